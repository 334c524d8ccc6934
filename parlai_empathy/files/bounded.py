"""The one reader of files a user hands us (model folders, dictionaries, checkpoints, archives,
world logs, CSV/TSV, released outputs), within the caps of :mod:`parlai_empathy.files.caps`.

* Only regular files are read: a FIFO would block the reader for ever and a device
  (``/dev/zero``) never ends. The file is opened without blocking and checked on the open
  descriptor (``fstat``), so nothing can swap it for a FIFO between the check and the read.
* The size is checked before anything is read, and reading stops at the cap all the same (a file
  that grows while it is read).
* JSON is parsed with its nesting, integer digits and strings bounded, and with NaN and Infinity
  refused (no figure we read may be one); a line of a text file is read up to its cap and no
  further.
* An archive's members are checked before one is unpacked: their count, nesting, total unpacked
  size, names (no NUL), and the free disk where they go.

Every refusal is a :class:`FileRefused` (a ``ValueError``) whose message is one line naming the
file, the line and field where there is one, what was wrong and the cap with the variable that
raises it.
"""

import gzip
import io
import json
import math
import os
import re
import shutil
import stat
import zlib
from typing import IO, Any, Iterable, Iterator, Optional, Tuple

from parlai_empathy.files.caps import FileCaps, caps, describe


class FileRefused(ValueError):
    """A file refused before or while reading it; the message names file, line and field."""

    def __init__(self, path, line_no: Optional[int] = None, field: Optional[str] = None, problem: str = ''):
        self.path, self.line_no, self.field, self.problem = str(path), line_no, field, problem
        where = self.path
        if line_no is not None:
            where += f', line {line_no}'
        if field is not None:
            where += f', field {field!r}'
        super().__init__(f'{where}: {problem}')


_KINDS = (
    (stat.S_ISFIFO, 'a FIFO'),
    (stat.S_ISCHR, 'a character device'),
    (stat.S_ISBLK, 'a block device'),
    (stat.S_ISSOCK, 'a socket'),
    (stat.S_ISDIR, 'a folder'),
)


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return 'not a regular file'


def _check_stat(path, st: os.stat_result, what: str, cap_name: Optional[str], limits: FileCaps) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(path, None, None, f'{_kind(st.st_mode)}, not a regular file; {what} must be a plain file')
    if cap_name is not None:
        cap = getattr(limits, cap_name)
        if st.st_size > cap:
            raise FileRefused(
                path, None, None, f'{st.st_size:,} bytes, over the cap of {describe(cap_name, cap)} bytes for {what}'
            )


def check_file(path, what: str, cap_name: Optional[str] = None) -> os.stat_result:
    """``path``'s status if it is a regular file within the cap ``cap_name`` (a field of
    :class:`FileCaps`; None: no size cap), without opening it. Symbolic links are followed."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise FileRefused(path, None, None, f'cannot be read ({err.strerror or err})') from None
    _check_stat(path, st, what, cap_name, caps())
    return st


def open_regular(path, what: str, cap_name: Optional[str] = None) -> IO[bytes]:
    """``path`` opened for binary reading, after the checks of :func:`check_file` on the open
    descriptor. A missing file raises ``FileNotFoundError`` (the caller names what it looked for)."""
    flags = os.O_RDONLY | getattr(os, 'O_NONBLOCK', 0) | getattr(os, 'O_NOCTTY', 0) | getattr(os, 'O_CLOEXEC', 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise FileRefused(path, None, None, f'a folder, not a regular file; {what} must be a plain file') from None
    except OSError as err:
        raise FileRefused(path, None, None, f'cannot be read ({err.strerror or err})') from None
    try:
        _check_stat(path, os.fstat(fd), what, cap_name, caps())
        if hasattr(os, 'set_blocking'):
            os.set_blocking(fd, True)
        raw = io.FileIO(fd, 'rb', closefd=True)
        raw.name = str(path)  # named by the path in errors, not by its descriptor
        return io.BufferedReader(raw)
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path, what: str, cap_name: str) -> bytes:
    """All of ``path``, at most the cap ``cap_name`` (checked before reading and while reading)."""
    cap = getattr(caps(), cap_name)
    with open_regular(path, what, cap_name) as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise FileRefused(
            path, None, None, f'grew over the cap of {describe(cap_name, cap)} bytes for {what} while it was read'
        )
    return data


def decode_utf8(data: bytes, path, line_no: Optional[int] = None) -> str:
    """``data`` as UTF-8 text; a byte that is not UTF-8, or a NUL byte, is refused naming the line
    (counted from ``line_no`` when ``data`` is one line) and column."""
    try:
        text = data.decode('utf-8')
    except UnicodeDecodeError as err:
        before = data[: err.start].decode('utf-8', errors='replace')
        line, column = _line_col(before, len(before))
        raise FileRefused(
            path,
            (line_no or 1) + line - 1,
            None,
            f'not UTF-8: byte 0x{data[err.start]:02x} at column {column} ({err.reason}); the file must be UTF-8 text',
        ) from None
    nul = text.find('\0')
    if nul >= 0:
        line, column = _line_col(text, nul)
        raise FileRefused(
            path,
            (line_no or 1) + line - 1,
            None,
            f'NUL byte at column {column}: not text (a binary file, or UTF-16 without a byte order mark?)',
        )
    return text


def read_text(path, what: str, cap_name: str) -> str:
    """:func:`read_bytes` as UTF-8 text without NUL bytes."""
    return decode_utf8(read_bytes(path, what, cap_name), path)


def iter_lines(
    path,
    what: str,
    line_cap: str = 'line_bytes',
    file_cap: str = 'data_bytes',
) -> Iterator[Tuple[int, bytes]]:
    """(line number, raw bytes with the line break) for every line of the regular file ``path``
    (at most ``file_cap`` bytes), each at most ``line_cap`` bytes: a longer line is refused
    before more of it is read."""
    limit = getattr(caps(), line_cap)
    with open_regular(path, what, file_cap) as f:
        line_no = 0
        while True:
            raw = f.readline(limit + 1)
            if not raw:
                return
            line_no += 1
            if len(raw) > limit and not raw.endswith(b'\n'):
                raise FileRefused(
                    path,
                    line_no,
                    None,
                    f'no line break within the cap of {describe(line_cap, limit)} '
                    f'bytes: not a {what} (a binary file, or lines ended by lone '
                    'CR characters?)',
                )
            yield line_no, raw


def _gzip_refusal(path, line_no: int, err: BaseException) -> FileRefused:
    return FileRefused(
        path, line_no, None, f'not a gzip file, or a damaged one ({type(err).__name__}: {str(err)[:80]})'
    )


def iter_gzip_lines(
    path,
    what: str,
    line_cap: str = 'log_line_bytes',
    file_cap: str = 'data_bytes',
) -> Iterator[Tuple[int, bytes]]:
    """(line number, raw bytes with the line break) for every line of the gzip file ``path``: the
    file as :func:`iter_lines` reads a plain one (a regular file within ``file_cap``, each
    unpacked line within ``line_cap``), and its unpacked bytes within ``data_bytes`` and within
    ``archive_ratio`` times its own size (counted from at least 1 MiB): a decompression bomb is
    refused as soon as the bytes it unpacked pass either, never held whole."""
    limits = caps()
    limit = getattr(limits, line_cap)
    with open_regular(path, what, file_cap) as raw_file:
        packed = os.fstat(raw_file.fileno()).st_size
        most = min(limits.data_bytes, limits.archive_ratio * max(packed, 1 << 20))
        line_no = unpacked = 0
        with gzip.GzipFile(fileobj=raw_file, mode='rb') as f:
            while True:
                try:
                    raw = f.readline(limit + 1)
                except (OSError, EOFError, zlib.error) as err:
                    raise _gzip_refusal(path, line_no + 1, err) from None
                if not raw:
                    return
                line_no += 1
                unpacked += len(raw)
                if unpacked > most:
                    if most == limits.data_bytes:
                        over = f'the cap of {describe("data_bytes", limits.data_bytes)} bytes'
                    else:
                        over = f'{describe("archive_ratio", limits.archive_ratio)} times its own {packed:,} bytes'
                    raise FileRefused(path, line_no, None, f'unpacks to over {over}: a decompression bomb, not {what}')
                if len(raw) > limit and not raw.endswith(b'\n'):
                    raise FileRefused(
                        path,
                        line_no,
                        None,
                        f'no line break within the cap of {describe(line_cap, limit)} bytes unpacked: not {what}',
                    )
                yield line_no, raw


def read_gzip_bytes(path, what: str, file_cap: str = 'data_bytes') -> bytes:
    """All the unpacked bytes of the gzip file ``path``, within the caps of :func:`iter_gzip_lines`."""
    return b''.join(raw for _, raw in iter_gzip_lines(path, what, 'data_bytes', file_cap))


def copy_regular(src, dst, what: str, cap_name: str) -> int:
    """Copy the regular file ``src`` (within the cap ``cap_name``, checked before and while
    copying) to ``dst``; returns the bytes copied. A FIFO or device is refused, never read."""
    cap = getattr(caps(), cap_name)
    copied = 0
    with open_regular(src, what, cap_name) as f, open(dst, 'wb') as out:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            copied += len(chunk)
            if copied > cap:
                raise FileRefused(
                    src,
                    None,
                    None,
                    f'grew over the cap of {describe(cap_name, cap)} bytes for {what} while it was copied',
                )
            out.write(chunk)
    shutil.copymode(src, dst)
    return copied


def copy_folder(src, dst, what: str) -> int:
    """Copy the folder ``src`` to ``dst``: only folders and regular files (each within
    ``checkpoint_bytes``, all together within ``archive_bytes``), lock files and caches left out;
    a FIFO, device or socket anywhere in it is refused before anything is copied."""
    limits = caps()
    plan, total = [], 0
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d != '__pycache__')
        for name in sorted(files):
            if name.endswith('.lock'):
                continue
            path = os.path.join(root, name)
            total += check_file(path, f'a file of {what}', 'checkpoint_bytes').st_size
            if total > limits.archive_bytes:
                raise FileRefused(
                    src,
                    None,
                    None,
                    f'over the cap of {describe("archive_bytes", limits.archive_bytes)} bytes in all, for {what}',
                )
            plan.append(os.path.relpath(path, src))
    os.makedirs(dst, exist_ok=True)
    for rel in plan:
        os.makedirs(os.path.join(dst, os.path.dirname(rel)), exist_ok=True)
        copy_regular(os.path.join(src, rel), os.path.join(dst, rel), f'a file of {what}', 'checkpoint_bytes')
    return total


# ----- JSON ----------------------------------------------------------------------------------------
class _Refusal(Exception):
    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem = problem


def _line_col(text: str, offset: int) -> Tuple[int, int]:
    line = text.count('\n', 0, offset) + 1
    return line, offset - (text.rfind('\n', 0, offset) + 1) + 1


_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _too_deep_at(text: str, depth: int) -> int:
    """The offset where ``text`` (JSON) first nests deeper than ``depth``; -1 if it never does."""
    level = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in '[{':
            level += 1
            if level > depth:
                return match.start()
        elif token in ']}':
            level -= 1
    return -1


def _walk_depth(value: Any, depth: int) -> bool:
    """Whether ``value`` nests deeper than ``depth`` (iteratively: no recursion to exhaust)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            if level > depth:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return False


_TOO_DEEP = object()


def loads_json(text: str, path, line_no: Optional[int] = None, what: str = 'a JSON file') -> Any:
    """``text`` parsed as JSON within the caps: nesting (``json_depth``), integer digits
    (``int_digits``), string length (``cell_chars``); NaN, Infinity and floats that overflow to
    them are refused. Errors name ``path`` and the line (``line_no``: the line ``text`` starts on
    in the file, for one line of a JSONL file)."""
    limits = caps()
    if line_no is not None:  # one line of a JSONL file: its line break is not a line of its own
        text = text.rstrip('\r\n')

    def at(offset: int) -> Tuple[int, str]:
        line, column = _line_col(text, offset)
        return (line_no or 1) + line - 1, f'column {column}'

    def parse_int(digits: str) -> int:
        if len(digits.lstrip('-')) > limits.int_digits:
            raise _Refusal(
                f'an integer of {len(digits.lstrip("-")):,} digits, over the cap of '
                f'{describe("int_digits", limits.int_digits)} digits'
            )
        return int(digits)

    def parse_float(number: str) -> float:
        if len(number) > limits.int_digits + 40:
            raise _Refusal(
                f'a number of {len(number):,} characters, over the cap of '
                f'{describe("int_digits", limits.int_digits)} digits'
            )
        value = float(number)
        if not math.isfinite(value):
            raise _Refusal(f'the number {number[:40]} overflows to infinity; a figure must be finite')
        return value

    def parse_constant(name: str):
        raise _Refusal(f'{name} is not a number a figure may have (JSON has no NaN or Infinity)')

    def check_strings(pairs):
        for key, value in pairs:
            if isinstance(value, str) and len(value) > limits.cell_chars:
                raise _Refusal(
                    f'field {key!r}: a string of {len(value):,} characters, over the cap of '
                    f'{describe("cell_chars", limits.cell_chars)}'
                )
        return dict(pairs)

    try:
        value = json.loads(
            text,
            parse_int=parse_int,
            parse_float=parse_float,
            parse_constant=parse_constant,
            object_pairs_hook=check_strings,
        )
    except json.JSONDecodeError as err:
        raise FileRefused(
            path, (line_no or 1) + err.lineno - 1, None, f'not valid JSON for {what} ({err.msg} at column {err.colno})'
        ) from None
    except _Refusal as err:
        raise FileRefused(path, line_no or (1 if '\n' not in text.strip() else None), None, err.problem) from None
    except RecursionError:
        value = _TOO_DEEP  # located below
    if value is _TOO_DEEP or _walk_depth(value, limits.json_depth):
        offset = _too_deep_at(text, limits.json_depth)
        if offset >= 0 or value is _TOO_DEEP:
            line, column = at(max(offset, 0))
            raise FileRefused(
                path,
                line,
                None,
                f'nested deeper than the cap of '
                f'{describe("json_depth", limits.json_depth)} levels (at {column}), '
                f'for {what}',
            )
    return value


def load_json_file(path, what: str, cap_name: str) -> Any:
    """A whole JSON file (a regular file within the cap ``cap_name``) parsed by :func:`loads_json`."""
    return loads_json(read_text(path, what, cap_name), path, what=what)


# ----- archives ------------------------------------------------------------------------------------
def check_archive(archive, members: Iterable[Tuple[str, int]], into: str) -> int:
    """Check an archive's members, ``(name, unpacked size)`` each, before one is unpacked into
    ``into``: their count, folder nesting, names (a NUL byte), total size (and how many times
    the archive's own size that is, counted from at least 1 MiB), and that the disk there keeps
    ``disk_headroom_bytes`` free after them. The total size is returned."""
    limits = caps()
    count = total = 0
    packed = os.path.getsize(archive) if os.path.isfile(archive) else 0
    for name, size in members:
        count += 1
        if count > limits.archive_members:
            cap = describe('archive_members', limits.archive_members)
            raise FileRefused(archive, None, None, f'over the cap of {cap} members; not a model archive')
        if '\0' in name:
            raise FileRefused(archive, None, 'member name', f'{name!r:.80} holds a NUL byte; not a file name')
        depth = len([part for part in name.split('/') if part not in ('', '.')])
        if depth > limits.archive_depth:
            cap = describe('archive_depth', limits.archive_depth)
            raise FileRefused(
                archive, None, 'member name', f'{name[:80]!r}... is nested {depth} folders deep, over the cap of {cap}'
            )
        total += max(int(size), 0)
        if total > limits.archive_ratio * max(packed, 1 << 20):
            cap = describe('archive_ratio', limits.archive_ratio)
            raise FileRefused(
                archive,
                None,
                None,
                f'unpacks to over {cap} times its own {packed:,} bytes: an archive bomb, not a model archive',
            )
        if total > limits.archive_bytes:
            cap = describe('archive_bytes', limits.archive_bytes)
            raise FileRefused(
                archive, None, None, f'unpacks to over the cap of {cap} bytes; not a model archive we unpack'
            )
    folder = into
    while folder and not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    free = shutil.disk_usage(folder or '.').free
    if total + limits.disk_headroom_bytes > free:
        cap = describe('disk_headroom_bytes', limits.disk_headroom_bytes)
        raise FileRefused(
            archive,
            None,
            None,
            f'unpacks to {total:,} bytes, and {folder} has {free:,} bytes free; at least {cap} bytes must stay free',
        )
    return total
