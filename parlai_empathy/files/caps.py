"""Every cap on reading a file a user hands us, with its default and the one name that sets it.

Each cap is a field of :class:`FileCaps`; ``PARLAI_EMPATHY_CAP_<FIELD>`` (the field's name in upper
case) replaces its default in every process, including stock ``parlai`` commands that open one of
our files, which have no command-line option of ours to take it. The defaults sit well above the
real data (the full EmpatheticDialogues CSVs, the largest zoo archive, a world log of ED test
with every ranker candidate) and well below what would exhaust a machine; ``docs/security.md``
lists them, and ``tests/test_file_caps.py`` checks that the table and this class agree.
"""

import os
from dataclasses import dataclass, field, fields

ENV_PREFIX = 'PARLAI_EMPATHY_CAP_'
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def _cap(default: int, help: str):
    return field(default=default, metadata={'help': help})


@dataclass(frozen=True)
class FileCaps:
    opt_bytes: int = _cap(4 * MIB, "a model's .opt file (the committed rows': under 5 KB)")
    json_depth: int = _cap(
        64,
        'nesting of any JSON we read (.opt, world logs, released files; the '
        'committed .opt files: 2, a world-log line: 5)',
    )
    int_digits: int = _cap(40, 'digits of one integer in a JSON file (counts and indices: under 20)')
    line_bytes: int = _cap(1 * MIB, 'one line of a CSV or TSV file (ED: at most 1,288 bytes)')
    log_line_bytes: int = _cap(
        16 * MIB,
        'one line of a world log, i.e. one episode with its candidates (a '
        'ranker on ED test with 100 candidates an example: at most 73 KB)',
    )
    cell_chars: int = _cap(
        100_000,
        'one field of a CSV or TSV line, or one string of a world log or released file (ED: at most 725 characters)',
    )
    data_bytes: int = _cap(
        256 * MIB,
        'one data file: CSV, TSV, world log, released outputs, JSON artifacts '
        '(table.json, meta.json), and the unpacked bytes of a gzipped one '
        "(outputs.jsonl.gz, listener labels) (ED train.csv: 16 MB; a ranker's "
        'world log of ED test with 100 candidates an example: 74 MB)',
    )
    dict_bytes: int = _cap(
        256 * MIB, "a model's dictionary file (every token of ED train with its count: 55,000 lines, 0.6 MB)"
    )
    checkpoint_bytes: int = _cap(
        16 * GIB,
        'a model checkpoint file (the largest zoo model, the MiniLM ranker '
        'of 22.7M parameters, with its optimizer state: about 0.3 GB, '
        'estimated)',
    )
    literal_chars: int = _cap(
        1 * MIB, 'one context list of a released-format file (a few ED turns: a few hundred characters)'
    )
    archive_bytes: int = _cap(
        8 * GIB, 'the unpacked size of a zoo or release archive (the largest entry: about 0.3 GB, estimated as above)'
    )
    archive_ratio: int = _cap(
        100,
        'how many times its own size (counted from at least 1 MiB) an archive or a '
        'gzipped file may unpack to (model weights barely compress: under 2; a bomb '
        'of zeros: over 1,000)',
    )
    archive_members: int = _cap(10_000, 'files and folders in one archive (a model archive: under 20)')
    archive_depth: int = _cap(16, "folder nesting of an archive's members (a model archive: 2)")
    disk_headroom_bytes: int = _cap(256 * MIB, 'free disk left after unpacking an archive')


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


class CapSettingError(ValueError):
    """A ``PARLAI_EMPATHY_CAP_*`` variable that is not a positive whole number."""


def caps() -> FileCaps:
    """The caps now in force: the defaults, each replaced by its environment variable if set."""
    values = {}
    for f in fields(FileCaps):
        raw = os.environ.get(env_name(f.name))
        if raw is None or not raw.strip():
            continue
        text = raw.strip().replace('_', '')
        if not (text.isascii() and text.isdigit() and len(text) <= 20 and int(text) > 0):
            raise CapSettingError(
                f'{env_name(f.name)}={raw[:40]!r}: not a positive whole number '
                f'({f.metadata["help"]}; default {f.default})'
            )
        values[f.name] = int(text)
    return FileCaps(**values)


def describe(name: str, value: int) -> str:
    """How an error names a cap: its value and the variable that raises it."""
    return f'{value:,} ({env_name(name)})'
