"""What every reader of a data file does when the file cannot be used.

A file that is empty, holds only a header, yields no examples, is not UTF-8 text, holds NUL bytes
or has no line breaks is an error whose message names the file and, where the reading failed on
a line, that line, the column and the field, so the user can open the file at that spot. Readers
raise :class:`DataFileError` (a ``ValueError``); a missing file or folder is a
:class:`DataNotFound` (a ``FileNotFoundError``).

ParlAI builds a teacher while it creates the world, where an exception becomes a long traceback
(after an unrelated one: ParlAI creates the teacher inside an ``except AttributeError``) around
the one line that matters. :func:`guard_teacher` makes a teacher's data errors end the command
with that line alone: :class:`DataFileExit`, a ``SystemExit`` that still carries the original
error (``.error``) for Python callers.
"""

import codecs
import contextlib
import functools
from typing import Iterator, Optional, Sequence, Tuple

from parlai_empathy.files.bounded import FileRefused, iter_lines


class DataFileError(FileRefused):
    """A data file that cannot be used; the message names the file (and line, column, field). The
    bounded reader's refusals (:class:`parlai_empathy.files.bounded.FileRefused`) are the same kind."""


class DataNotFound(FileNotFoundError):
    """A data file or folder that is not there; the message says where it was looked for."""


class DataSourceError(Exception):
    """An error of another data source a teacher reads (an emotion tag cache, a classifier's
    files), whose message says itself what to run; the sources subclass it."""


def no_examples(path, why: str) -> DataFileError:
    return DataFileError(path, None, None, f'no examples ({why})')


def read_lines(path, kind: str) -> Iterator[Tuple[int, bytes]]:
    """(line number, raw bytes with the line break) for every line of ``path``: the lines of
    :func:`parlai_empathy.files.bounded.iter_lines` (a regular file within the ``data_bytes`` cap,
    each line within ``line_bytes``), and a UTF-8 byte order mark dropped (an editor's encoding
    mark, not content); a UTF-16 file is an error naming the file. ``kind`` names the format in
    messages ("EmpatheticDialogues CSV")."""
    lines = iter_lines(path, f'{kind} file')
    while True:
        try:
            line_no, raw = next(lines)
        except StopIteration:
            return
        except DataFileError:
            raise
        except FileRefused as err:  # the bounded reader's refusal, as the data error it is here
            raise DataFileError(err.path, err.line_no, err.field, err.problem) from None
        if line_no == 1:
            if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
                raise DataFileError(
                    path,
                    1,
                    None,
                    f'UTF-16 text (it starts with a UTF-16 byte order mark): '
                    f'a {kind} file must be UTF-8; save it as UTF-8',
                )
            if raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
        yield line_no, raw


def field_at(raw: bytes, offset: int, sep: Optional[bytes], fields: Optional[Sequence[str]]) -> Optional[str]:
    """The name of the field holding byte ``offset`` of a line split on ``sep``."""
    if not sep or not fields:
        return None
    index = raw[:offset].count(sep)
    return fields[index] if index < len(fields) else f'#{index + 1}'


def column_of(raw: bytes, offset: int) -> int:
    """1-based character column of byte ``offset`` (bytes before it that are not UTF-8 count one each)."""
    return len(raw[:offset].decode('utf-8', errors='replace')) + 1


def decode_line(
    raw: bytes, path, line_no: int, sep: Optional[bytes] = None, fields: Optional[Sequence[str]] = None
) -> str:
    """The text of one line; a byte that is not UTF-8, or a NUL byte, is an error naming the
    line, column and (with ``sep`` and ``fields``) field."""
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError as err:
        raise DataFileError(
            path,
            line_no,
            field_at(raw, err.start, sep, fields),
            f'not UTF-8: byte 0x{raw[err.start]:02x} at column {column_of(raw, err.start)} '
            f'({err.reason}); the file must be UTF-8 text',
        ) from None
    nul = raw.find(b'\0')
    if nul >= 0:
        raise DataFileError(
            path,
            line_no,
            field_at(raw, nul, sep, fields),
            f'NUL byte at column {column_of(raw, nul)}: not text (a binary file, or UTF-16 without a byte order mark?)',
        )
    return text


class DataFileExit(SystemExit):
    """A data error that ends a ``parlai`` command with its message alone (exit status 1).

    Python callers catch it by name; ``.error`` is the reader's original exception."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


_DATA_ERRORS = (FileRefused, DataNotFound, DataSourceError)


@contextlib.contextmanager
def exit_on_data_errors():
    try:
        yield
    except DataFileExit:
        raise
    except Exception as err:
        if isinstance(err, _DATA_ERRORS):
            raise DataFileExit(err) from None
        raise


def guard_teacher(teacher) -> None:
    """Make a DialogTeacher's ``setup_data`` end the command on a data error (see the module doc).

    Call it before ``DialogTeacher.__init__``, which hands ``self.setup_data`` to its data
    loader: streaming teachers read lazily, long after ``__init__`` returned."""
    setup_data = teacher.setup_data

    @functools.wraps(setup_data)
    def guarded(datafile):
        with exit_on_data_errors():
            yield from setup_data(datafile)

    teacher.setup_data = guarded
