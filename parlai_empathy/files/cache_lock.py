"""On-disk caches that several processes may build at once (the ranks of a distributed run start
together, and every one of them wants the same cache).

* :func:`build_lock` -- an exclusive ``flock`` on ``<cache>.lock``: the first process builds while
  the others wait; they then find the finished cache and read it, so it is built once. The lock
  goes with the process (the kernel drops it when a process dies), so a killed builder never
  leaves the others waiting. ``flock`` works across the nodes of a cluster on NFSv4 and on Lustre
  mounted with ``flock``; on other shared file systems, build the cache before starting the ranks.
* :func:`atomic_write` -- write to a temporary file named after host and process, then rename it
  over the target: a reader sees the old file or the whole new one, never a part.
  :func:`atomic_save_as` does the same for a writer that takes a file name (ParlAI's option and
  dictionary files) and :func:`atomic_save_dir` for one that fills a folder, file by file; a run
  killed while saving its checkpoint then resumes from the last complete one.
"""

import contextlib
import fcntl
import logging
import os
import re
import shutil
import socket
from typing import IO, Callable, Sequence

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def build_lock(path: str, what: str = None):
    """Hold ``<path>.lock`` exclusively for the block; says so when it has to wait."""
    lock_path = f'{path}.lock'
    os.makedirs(os.path.dirname(os.path.abspath(lock_path)), exist_ok=True)
    with open(lock_path, 'a') as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.warning(f'waiting for another process to finish {what or path} (lock {lock_path})')
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def temporary_name(path: str) -> str:
    """A name beside ``path`` that no other process (on any host) writes to."""
    return f'{path}.tmp-{socket.gethostname()}-{os.getpid()}'


def atomic_write(path: str, write: Callable[[IO], None], binary: bool = True) -> None:
    """``write(f)`` into a temporary file beside ``path``, flushed to disk, then renamed to it."""

    def save(name):
        with open(name, 'wb' if binary else 'w', **({} if binary else {'encoding': 'utf-8'})) as f:
            write(f)

    atomic_save_as(path, save)


def atomic_save_as(path: str, save: Callable[[str], None], sidecars: Sequence[str] = ()) -> None:
    """``save(name)`` writes a file at ``name`` (and, for each suffix in ``sidecars``, perhaps one at
    ``name + suffix``); each is flushed and renamed to ``path`` (``path + suffix``), the sidecars
    first, so the main file's presence says the save finished."""
    tmp = temporary_name(path)
    try:
        save(tmp)
        for suffix in [*sidecars, '']:
            if suffix and not os.path.exists(tmp + suffix):
                continue
            move_into_place(tmp + suffix, path + suffix)
    except BaseException:
        for suffix in [*sidecars, '']:
            with contextlib.suppress(OSError):
                os.remove(tmp + suffix)
        raise


def atomic_save_dir(path: str, save: Callable[[str], None]) -> None:
    """``save(folder)`` fills a temporary folder beside ``path``; each of its files is then renamed
    into ``path``: a file there is always whole (a save killed half-way leaves some files of the
    new save beside the rest of the old one, which is complete when saves write the same files)."""
    tmp = temporary_name(path)
    try:
        save(tmp)
        os.makedirs(path, exist_ok=True)
        for root, _, files in os.walk(tmp):
            target = os.path.join(path, os.path.relpath(root, tmp))
            os.makedirs(target, exist_ok=True)
            for name in files:
                move_into_place(os.path.join(root, name), os.path.join(target, name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def move_into_place(written: str, path: str) -> None:
    """A finished file, flushed to disk, renamed over ``path`` (one step for a reader)."""
    with open(written, 'rb') as f:
        os.fsync(f.fileno())
    os.replace(written, path)


def remove_dead_temporaries(path: str) -> None:
    """Remove the temporary files beside ``path`` (``<its name>...tmp-<host>-<pid>...``) left by a
    process of this host that no longer runs: a run killed while saving leaves one, which
    nothing else would ever read or remove. Another host's, and a live process's, are kept."""
    folder, base = os.path.split(os.path.abspath(path))
    pattern = re.compile(re.escape(base) + r'.*\.tmp-' + re.escape(socket.gethostname()) + r'-(\d+)(\..*)?$')
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        match = pattern.match(name)
        if match is None or int(match.group(1)) == os.getpid() or _process_exists(int(match.group(1))):
            continue
        with contextlib.suppress(OSError):
            if os.path.isdir(os.path.join(folder, name)):
                shutil.rmtree(os.path.join(folder, name))
            else:
                os.remove(os.path.join(folder, name))


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
