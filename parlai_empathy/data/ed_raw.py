"""Reading EmpatheticDialogues' raw CSV files, faithfully or with cleaning.

The raw files are not real CSV: fields are split on ``,`` and commas inside text are written
``_comma_``. Two readers share one output shape (:class:`Conversation`):

* :func:`read_faithful` reads exactly as ParlAI's ``empathetic_dialogues`` teacher does (so
  ``empathy_ed`` yields its examples), but a malformed line raises :class:`EDFormatError` naming
  file, line and field instead of a bare assert or an aborted load.
* :func:`read_clean` recovers what the raw reading crashes on or mangles (the cleaned ED of Metz &
  You) and accounts for every change in a :class:`CleaningReport`: nothing is dropped silently.
"""

import json
import os
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from parlai_empathy.data.file_errors import (
    DataFileError,
    DataNotFound,
    column_of,
    decode_line,
    field_at,
    no_examples,
    read_lines,
)
from parlai_empathy.files.cache_lock import atomic_write, build_lock

HEADER = ['conv_id', 'utterance_idx', 'context', 'prompt', 'speaker_idx', 'utterance', 'selfeval', 'tags']
CONV_ID_RE = re.compile(r'^hit:\d+_conv:\d+$')
# selfeval is "a|b|c_d|e|f" (ratings of both workers); a free-text answer sometimes replaces one.
SELFEVAL_RE = re.compile(r'^\d\|\d\|\d_.*\|\d$|^.*_\d\|\d\|\d$')
MAX_EXAMPLE_LINES = 10


# the 9th field, when a row has one, holds the inline candidates
FIELDS = HEADER + ['candidates']
KIND = 'EmpatheticDialogues CSV'


class EDFormatError(DataFileError):
    """A raw ED file or line that cannot be read; the message names file, line and field."""

    def __init__(self, path, line_no, field_name, problem):
        super().__init__(path, line_no, field_name, problem)
        self.field_name = field_name


@dataclass
class Utterance:
    text: str
    utterance_idx: int
    line_no: int
    speaker_idx: str = ''
    selfeval: str = ''
    tags: str = ''
    candidates: Optional[List[str]] = None  # the raw 9th field, when present


@dataclass
class Conversation:
    conv_id: str
    emotion: str
    situation: str
    utterances: List[Utterance] = field(default_factory=list)


def unescape(text: str) -> str:
    return text.replace('_comma_', ',')


def unescape_candidate(text: str) -> str:
    return text.replace('_comma_', ',').replace('_pipe_', '|')


def _lines(path):
    """(line number, raw bytes) for every line, the header included (a UTF-8 BOM dropped)."""
    if not os.path.isfile(path):
        raise DataNotFound(f'EmpatheticDialogues file not found: {path}')
    return read_lines(path, KIND)


# Quotes in ED are text. ED's own reader and ParlAI's split every line on ',' and keep each '"' as
# a character; the release has no CSV quoting (commas are written _comma_). Its quotes are all in
# the two text fields, prompt and utterance (the shared train.csv has 86 rows where one is
# unbalanced at a field's edge, e.g. '"I haven't heard...'; 164 rows in all have an odd count),
# in rows whose fields line up. A quote anywhere else is a CSV writer's quoting that this format
# does not have, and reading on would silently misplace text: it is refused.
NOT_TEXT_FIELDS = (0, 1, 2, 4)  # conv_id, utterance_idx, context, speaker_idx


def check_plain_fields(path, line_no: int, parts: List[str]) -> None:
    """Refuse a double quote in a field that is never text (a CSV-quoted field's continuation line
    starts with its tail, so it lands here too)."""
    for index in NOT_TEXT_FIELDS:
        if index < len(parts) and '"' in parts[index]:
            raise EDFormatError(
                path,
                line_no,
                FIELDS[index],
                f'holds a double quote ({parts[index][:40]!r}): EmpatheticDialogues files have no CSV quoting '
                '(commas are written _comma_) and this field is never text; the file was written by a CSV '
                'writer, or a quoted field ran onto this line',
            )


def _unbalanced_quote(path, line_no: int, parts: List[str], how: str) -> EDFormatError:
    """The error for an odd number of quotes in a row whose fields do not line up."""
    index = next((i for i, part in enumerate(parts) if part.count('"') % 2 == 1), len(parts) - 1)
    name = 'prompt' if index == 3 else 'utterance' if index >= 5 else FIELDS[index]
    return EDFormatError(
        path,
        line_no,
        name,
        f'unbalanced double quote in a row of {len(parts)} comma-separated fields ({how}): CSV quoting of a '
        'field that holds commas or a line break, which EmpatheticDialogues files do not use (commas are '
        'written _comma_); rewrite the row without CSV quoting',
    )


def _check_header(path, line: str) -> None:
    found = line.strip().split(',')
    if found != HEADER:
        # the first column that differs; a header with extra columns after ours is wrong in the last
        position = next(
            (i for i, (name, got) in enumerate(zip(HEADER, found + [''] * len(HEADER))) if name != got), len(HEADER) - 1
        )
        raise EDFormatError(
            path,
            1,
            HEADER[position],
            f'the first line is not the EmpatheticDialogues header {",".join(HEADER)!r} '
            f'(found {line.strip()[:80]!r}): not an ED file?',
        )


# ---------------------------------------------------------------------------------------------
# Faithful reading: ParlAI's semantics, clear errors
# ---------------------------------------------------------------------------------------------


def read_faithful(path: str) -> List[Conversation]:
    """Conversations exactly as ParlAI 1.7.2's teacher sees them (split on ',', 8 or 9 fields)."""
    conversations: List[Conversation] = []
    current: Optional[Conversation] = None
    lines = 0
    for line_no, raw in _lines(path):
        lines = line_no
        line = decode_line(raw, path, line_no, b',', FIELDS)
        if line_no == 1:
            _check_header(path, line)
            continue
        parts = line.strip().split(',')
        check_plain_fields(path, line_no, parts)
        if len(parts) not in (8, 9):
            raise EDFormatError(
                path,
                line_no,
                'line',
                f'has {len(parts)} comma-separated fields, expected 8 (or 9 with inline candidates); '
                'use the empathy_ed_clean teacher to recover such rows',
            )
        try:
            utterance_idx = int(parts[1])
        except ValueError:
            raise EDFormatError(path, line_no, 'utterance_idx', f'not an integer: {parts[1]!r}') from None
        candidates = None
        if len(parts) == 9 and parts[8] != '':
            candidates = [unescape_candidate(c).strip() for c in parts[8].split('|')]
        utt = Utterance(unescape(parts[5]), utterance_idx, line_no, parts[4], parts[6], parts[7], candidates)
        if current is not None and current.conv_id == parts[0]:
            expected = current.utterances[-1].utterance_idx + 1
            if utterance_idx != expected:
                raise EDFormatError(
                    path,
                    line_no,
                    'utterance_idx',
                    f'is {utterance_idx} but {expected} was expected in {parts[0]}; '
                    'use the empathy_ed_clean teacher to renumber',
                )
            current.utterances.append(utt)
        else:
            if utterance_idx != 1:
                raise EDFormatError(
                    path,
                    line_no,
                    'utterance_idx',
                    f'conversation {parts[0]} starts at {utterance_idx}, not 1',
                )
            current = Conversation(parts[0], parts[2], unescape(parts[3]), [utt])
            conversations.append(current)
    if not conversations:
        raise no_examples(path, 'empty file' if lines == 0 else 'header only')
    return conversations


# ---------------------------------------------------------------------------------------------
# Clean reading: recover, and account for every change
# ---------------------------------------------------------------------------------------------

FIX_DESCRIPTIONS = OrderedDict(
    [
        ('invalid_utf8', 'bytes that are not UTF-8 were replaced by U+FFFD'),
        ('blank_line', 'blank line skipped'),
        (
            'prompt_repeated_shift',
            'prompt repeated in the utterance column; real utterance shifted right '
            '(EmpatheticDialogues issue #40) - realigned',
        ),
        ('unescaped_comma', 'raw commas inside a text field split it; fields re-joined'),
        ('missing_trailing_fields', 'row ended early; missing selfeval/tags taken as empty'),
        ('inline_candidates', '9th field of inline candidates split off (kept, _comma_/_pipe_ decoded)'),
        ('candidates_missing_gold', 'inline candidates lacked the gold response; gold appended'),
        ('csv_quoting', 'field wrapped in CSV quotes; quotes removed'),
        ('stray_quote', 'unbalanced double quote at the start or end of a field removed'),
        ('edge_whitespace', 'leading/trailing spaces stripped'),
        ('double_space', 'runs of spaces collapsed'),
        ('empty_utterance', 'utterance empty after cleaning; row removed'),
        ('duplicate_row', 'exact repeat of the previous row; removed'),
        ('repeated_index', 'utterance_idx repeated with different text; renumbered'),
        ('index_gap', 'gap or disorder in utterance_idx; renumbered'),
        ('bad_utterance_idx', 'utterance_idx not an integer; position used'),
        ('inconsistent_conversation_field', 'emotion/situation differs inside a conversation; first value kept'),
        ('short_conversation', 'conversation has fewer than 2 utterances; kept but yields no example'),
    ]
)


@dataclass
class CleaningReport:
    """Every fix by kind (count, first line numbers) and every row that could not be recovered."""

    path: str
    rows_read: int = 0
    rows_kept: int = 0
    conversations: int = 0
    fixes: Dict[str, Dict] = field(default_factory=OrderedDict)
    unrecoverable: List[Dict] = field(default_factory=list)

    def fix(self, kind: str, line_no: int, count: int = 1):
        entry = self.fixes.setdefault(kind, {'count': 0, 'example_lines': []})
        entry['count'] += count
        if len(entry['example_lines']) < MAX_EXAMPLE_LINES and line_no not in entry['example_lines']:
            entry['example_lines'].append(line_no)

    def reject(self, line_no: int, reason: str, raw: str):
        self.unrecoverable.append({'line': line_no, 'reason': reason, 'raw': raw[:500]})

    def count(self, kind: str) -> int:
        return self.fixes.get(kind, {}).get('count', 0)

    def to_dict(self) -> Dict:
        return {
            'path': self.path,
            'rows_read': self.rows_read,
            'rows_kept': self.rows_kept,
            'conversations': self.conversations,
            'fixes': {k: dict(v, description=FIX_DESCRIPTIONS.get(k, '')) for k, v in self.fixes.items()},
            'unrecoverable': self.unrecoverable,
        }

    def summary(self) -> str:
        lines = [
            f'Cleaning report for {self.path}',
            f'  rows read {self.rows_read}, rows kept {self.rows_kept}, conversations {self.conversations}, '
            f'unrecoverable {len(self.unrecoverable)}',
        ]
        if not self.fixes and not self.unrecoverable:
            lines.append('  no fixes were needed')
        for kind in FIX_DESCRIPTIONS:
            if kind in self.fixes:
                entry = self.fixes[kind]
                shown = ', '.join(str(n) for n in entry['example_lines'])
                lines.append(f'  {kind:32s} {entry["count"]:7d}  (e.g. lines {shown}): {FIX_DESCRIPTIONS[kind]}')
        for bad in self.unrecoverable:
            lines.append(f'  UNRECOVERABLE line {bad["line"]}: {bad["reason"]}')
        return '\n'.join(lines)


_SPACES_RE = re.compile(r' {2,}')


def _clean_text(text: str, line_no: int, report: CleaningReport) -> str:
    text = unescape(text).replace('_pipe_', '|')
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"' and text.count('"') == 2:
        text = text[1:-1]
        report.fix('csv_quoting', line_no)
    if text.count('"') % 2 == 1:
        # An odd quote at either edge is a leftover of broken CSV quoting. A lone quote inside
        # the text (``I"m``) is the writer's typo, not ours to guess at: it is left alone.
        stripped = text.strip()
        if stripped.startswith('"'):
            text = stripped[1:]
            report.fix('stray_quote', line_no)
        elif stripped.endswith('"'):
            text = stripped[:-1]
            report.fix('stray_quote', line_no)
    if text != text.strip():
        text = text.strip()
        report.fix('edge_whitespace', line_no)
    if '  ' in text:
        text = _SPACES_RE.sub(' ', text)
        report.fix('double_space', line_no)
    return text


def _normalized(text: str) -> str:
    return _SPACES_RE.sub(' ', unescape(text)).strip().strip('"').lower()


def _split_fields(parts: List[str], line_no: int, report: CleaningReport) -> Optional[Tuple]:
    """(utterance, selfeval, tags, candidate field, whether the fields line up) for a row,
    recovering known misalignments. Fields line up in a row of 8, a row of 9 with inline
    candidates, and a row shifted by a repeated prompt; rows that ended early or whose
    utterance holds raw commas do not."""
    n = len(parts)
    if n == 8:
        return parts[5], parts[6], parts[7], None, True
    if n < 8:
        if n >= 6:
            report.fix('missing_trailing_fields', line_no)
            padded = parts + [''] * (8 - n)
            return padded[5], padded[6], padded[7], None, False
        return None
    prompt = parts[3]

    def looks_like_selfeval(value):
        return value == '' or bool(SELFEVAL_RE.match(value))

    # Some released rows repeat the prompt in the utterance column and shift every later field right.
    if (
        _normalized(parts[5]) == _normalized(prompt)
        and not SELFEVAL_RE.match(parts[6])
        and looks_like_selfeval(parts[7])
    ):
        report.fix('prompt_repeated_shift', line_no)
        candidates = ','.join(parts[9:]) if n > 9 else None
        return parts[6], parts[7], parts[8], candidates, True
    if n == 9 and looks_like_selfeval(parts[6]):
        report.fix('inline_candidates', line_no)
        return parts[5], parts[6], parts[7], parts[8], True
    # Raw commas inside the utterance: the selfeval field is the anchor that tells where it ends.
    for j in range(6, n - 1):
        if SELFEVAL_RE.match(parts[j]):
            report.fix('unescaped_comma', line_no)
            candidates = ','.join(parts[j + 2 :]) if n > j + 2 else None
            if candidates is not None:
                report.fix('inline_candidates', line_no)
            return ','.join(parts[5:j]), parts[j], parts[j + 1], candidates, False
    return None


def read_clean(path: str, report: Optional[CleaningReport] = None) -> Tuple[List[Conversation], CleaningReport]:
    """Read a raw ED file, recovering malformed rows; returns conversations and the report."""
    report = report or CleaningReport(path)
    rows: List[Tuple[Dict, Utterance]] = []
    last_conv_id = last_raw_situation = situation = None
    lines, has_header, first_not_utf8 = 0, False, None
    for line_no, raw in _lines(path):
        lines = line_no
        try:
            line = raw.decode('utf-8')
        except UnicodeDecodeError as err:
            line = raw.decode('utf-8', errors='replace')
            report.fix('invalid_utf8', line_no)
            if first_not_utf8 is None:
                first_not_utf8 = (
                    f'line {line_no}, field {field_at(raw, err.start, b",", FIELDS)!r}: byte '
                    f'0x{raw[err.start]:02x} at column {column_of(raw, err.start)}'
                )
        if '\0' in line:
            # no release of ED holds one: a NUL byte means a binary or UTF-16 file, not a quirk to repair
            nul = raw.find(b'\0')
            raise DataFileError(
                path,
                line_no,
                field_at(raw, nul, b',', FIELDS),
                f'NUL byte at column {column_of(raw, nul)}: not text (a binary file, or UTF-16 '
                'without a byte order mark?)',
            )
        line = line.rstrip('\r\n')
        if line_no == 1 and line.startswith('conv_id,'):
            has_header = True
            continue
        report.rows_read += 1
        if not line.strip():
            report.fix('blank_line', line_no)
            continue
        parts = line.split(',')
        check_plain_fields(path, line_no, parts)
        if parts[0] != last_conv_id and not CONV_ID_RE.match(parts[0]):
            report.reject(line_no, f'field conv_id: {parts[0][:40]!r} is not of the form hit:N_conv:M', line)
            continue
        split = _split_fields(parts, line_no, report)
        if line.count('"') % 2 == 1 and (split is None or not split[4]):
            raise _unbalanced_quote(
                path, line_no, parts, 'the row ends early' if len(parts) < 8 else 'raw commas after the quote'
            )
        if split is None:
            report.reject(
                line_no,
                f'field utterance: {len(parts)} fields and no selfeval field to anchor the utterance on',
                line,
            )
            continue
        utterance, selfeval, tags, candidate_field, _lined_up = split
        text = _clean_text(utterance, line_no, report)
        if not text:
            report.fix('empty_utterance', line_no)
            continue
        candidates = None
        if candidate_field:
            candidates = [_SPACES_RE.sub(' ', unescape_candidate(c)).strip() for c in candidate_field.split('|')]
            if text not in candidates:
                # ParlAI requires the gold among the candidates; the raw 9th field often lacks it
                candidates.append(text)
                report.fix('candidates_missing_gold', line_no)
        try:
            utterance_idx = int(parts[1])
        except ValueError:
            report.fix('bad_utterance_idx', line_no)
            utterance_idx = -1
        if (parts[0], parts[3]) != (last_conv_id, last_raw_situation):
            # the situation repeats on every row of a conversation: clean (and count) it once
            last_conv_id, last_raw_situation = parts[0], parts[3]
            situation = _clean_text(parts[3], line_no, report)
        meta = {'conv_id': parts[0], 'emotion': parts[2].strip(), 'situation': situation}
        utt = Utterance(text, utterance_idx, line_no, parts[4].strip(), selfeval, tags, candidates)
        rows.append((meta, utt))

    if not rows:
        raise _nothing_readable(path, report, lines, has_header, first_not_utf8)
    conversations = _group_and_renumber(rows, report)
    report.rows_kept = sum(len(c.utterances) for c in conversations)
    report.conversations = len(conversations)
    return conversations, report


def _nothing_readable(path, report: CleaningReport, lines: int, has_header: bool, first_not_utf8) -> DataFileError:
    """The error for a file that yields no row: why, and the first line where reading failed."""
    if lines == 0:
        return no_examples(path, 'empty file')
    if report.rows_read == report.count('blank_line'):
        return no_examples(path, 'header only' if has_header else 'only blank lines')
    if not report.unrecoverable:
        lines_seen = report.fixes.get('empty_utterance', {}).get('example_lines', [])
        return no_examples(path, f'every row has an empty utterance, e.g. lines {", ".join(map(str, lines_seen))}')
    not_utf8 = report.count('invalid_utf8')
    if not_utf8 * 2 >= report.rows_read:
        why = [
            f'not UTF-8 text: {not_utf8} of its {report.rows_read} lines are not UTF-8, the first at '
            f'{first_not_utf8}; a binary file?'
        ]
    else:
        first = report.unrecoverable[0]
        why = [f'none of its {report.rows_read} rows can be read; the first, line {first["line"]}, {first["reason"]}']
    if not has_header:
        why.append(f'line 1 is not the EmpatheticDialogues header {",".join(HEADER)!r}')
    return DataFileError(path, None, None, 'no examples (' + '; '.join(why) + ')')


def _group_and_renumber(rows, report: CleaningReport) -> List[Conversation]:
    """Group consecutive rows by conv_id, drop exact repeats, and number utterances 1..n."""
    conversations: List[Conversation] = []
    for meta, utt in rows:
        conv = conversations[-1] if conversations else None
        if conv is None or conv.conv_id != meta['conv_id']:
            conv = Conversation(meta['conv_id'], meta['emotion'], meta['situation'])
            conversations.append(conv)
            expected_idx, previous_idx = 1, None
        elif (meta['emotion'], meta['situation']) != (conv.emotion, conv.situation):
            report.fix('inconsistent_conversation_field', utt.line_no)
        original_idx = utt.utterance_idx
        if conv.utterances and original_idx == previous_idx != -1:
            if utt.text == conv.utterances[-1].text:
                report.fix('duplicate_row', utt.line_no)
                continue
            report.fix('repeated_index', utt.line_no)
        elif original_idx not in (expected_idx, -1):
            report.fix('index_gap', utt.line_no)
        previous_idx = original_idx
        if original_idx != -1:
            expected_idx = original_idx + 1
        utt.utterance_idx = len(conv.utterances) + 1
        conv.utterances.append(utt)
    for conv in conversations:
        if len(conv.utterances) < 2:
            report.fix('short_conversation', conv.utterances[0].line_no)
    return conversations


def write_report(report: CleaningReport, directory: str, split: str) -> str:
    """Write ``<split>.cleaning_report.json`` and ``.txt`` atomically; returns the JSON path.

    Every rank of a distributed run cleans the file it reads and so has the same report: under a
    lock, the first one writes it and the others find it already there, identical."""
    os.makedirs(directory, exist_ok=True)
    json_path = os.path.join(directory, f'{split}.cleaning_report.json')
    with build_lock(json_path, f'writing the {split} cleaning report'):
        for path, content in (
            (json_path, json.dumps(report.to_dict(), indent=1)),
            (json_path[: -len('.json')] + '.txt', report.summary() + '\n'),
        ):
            if not _has_content(path, content):
                atomic_write(path, lambda f, content=content: f.write(content), binary=False)
    return json_path


def _has_content(path: str, content: str) -> bool:
    try:
        with open(path, encoding='utf-8') as f:
            return f.read() == content
    except (OSError, UnicodeDecodeError):
        return False
