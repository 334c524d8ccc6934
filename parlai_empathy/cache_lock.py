"""On-disk caches that several processes may build at once (the ranks of a distributed run start
together, and every one of them wants the same cache).

* :func:`build_lock` -- an exclusive ``flock`` on ``<cache>.lock``: the first process builds while
  the others wait; they then find the finished cache and read it, so it is built once. The lock
  goes with the process (the kernel drops it when a process dies), so a killed builder never
  leaves the others waiting. ``flock`` works across the nodes of a cluster on NFSv4 and on Lustre
  mounted with ``flock``; on other shared file systems, build the cache before starting the ranks.
* :func:`atomic_write` -- write to a temporary file named after host and process, then rename it
  over the target: a reader sees the old file or the whole new one, never a part.
"""
import contextlib
import fcntl
import logging
import os
import socket
from typing import IO, Callable

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


def atomic_write(path: str, write: Callable[[IO], None], binary: bool = True) -> None:
    """``write(f)`` into a temporary file beside ``path``, flushed to disk, then renamed to it."""
    tmp = f'{path}.tmp-{socket.gethostname()}-{os.getpid()}'
    try:
        with open(tmp, 'wb' if binary else 'w', **({} if binary else {'encoding': 'utf-8'})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
