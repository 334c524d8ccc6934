"""Readers for the ED test generations other papers released, one small adapter per format.

Each adapter turns one released file into :class:`ReleasedOutput` records: the dialogue context as
the file shows it (a list of turns), the system's reply, and, where the file has them, its own
reference reply and gold emotion. Nothing is scored or aligned here: :mod:`.alignment` finds each
record's ED test example, :mod:`parlai_empathy.leaderboard.published` scores the matched ones.

Every adapter refuses a block it cannot read with :class:`ReleasedFormatError` naming the file,
line and field, and never skips one silently: a file that is not in the format gives an error, not
a short list.
"""
import ast
import functools
import hashlib
import os
import re
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Tuple

# Released files are small (MIME's output.txt is 2.4 MB); a file far beyond this is not one of them.
MAX_FILE_BYTES = 64 * 1024 * 1024


class ReleasedFormatError(ValueError):
    def __init__(self, path: str, line_no: int, field_name: str, problem: str):
        super().__init__(f'{path}, line {line_no}, field {field_name!r}: {problem}')


@dataclass(frozen=True)
class ReleasedOutput:
    """One reply of a released file. ``source`` is ``file:line`` of the block's first line."""

    context: Tuple[str, ...]
    response: str
    reference: Optional[str] = None
    emotion: Optional[str] = None
    source: str = ''


def _read_text(path: str) -> List[str]:
    size = os.path.getsize(path)
    if size > MAX_FILE_BYTES:
        raise ReleasedFormatError(path, 1, 'file', f'{size} bytes: larger than any released output file '
                                  f'({MAX_FILE_BYTES} bytes at most)')
    with open(path, 'rb') as f:
        raw = f.read()
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError as err:
        line_no = raw[:err.start].count(b'\n') + 1
        raise ReleasedFormatError(path, line_no, 'file', f'not UTF-8 (byte {raw[err.start]:#04x})') from None
    return text.split('\n')


def _context_list(value: str, path: str, line_no: int, field_name: str) -> Tuple[str, ...]:
    """A context written as a Python list literal of strings (``str(list_of_turns)``)."""
    try:
        turns = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise ReleasedFormatError(path, line_no, field_name, f'not a list of strings: {value.strip()[:80]!r}') from None
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        raise ReleasedFormatError(path, line_no, field_name, f'not a non-empty list of strings: {value.strip()[:80]!r}')
    return tuple(turns)


def _labelled_blocks(lines: List[str], separator: Callable[[str], bool]) -> Iterator[Tuple[int, Dict[str, Tuple]]]:
    """Blocks between separator lines, as ``(first non-blank line's number, {label: (value, line
    number)})`` for each ``Label:value`` line (the label is everything before the first colon)."""
    block: Dict[str, Tuple[str, int]] = {}
    first = 0
    for line_no, line in enumerate(lines, start=1):
        if separator(line):
            if block:
                yield first, block
            block, first = {}, 0
            continue
        first = first or (line_no if line.strip() else 0)
        match = re.match(r'^([A-Za-z_ ]+?)\s*:(.*)$', line)
        if match:
            block.setdefault(match.group(1), (match.group(2), line_no))
    if block:
        yield first, block


def _field(block: Dict[str, Tuple], label: str, path: str, first: int) -> Tuple[str, int]:
    if label not in block:
        raise ReleasedFormatError(path, first, label, f'the block starting here has no "{label}:" line')
    return block[label]


# ----- declare-lab/MIME output.txt ------------------------------------------------------------------
MIME_DECODINGS = ('Beam', 'Greedy', 'Topk')
MIME_SEPARATOR = '-' * 70
MIME_HEAD = re.compile(r'^emotion:(\S+)\s+vader-score:\s*\S+\s+predicted_emotion:\s*(\S+)\s*$')


def read_mime(path: str, decoding: str) -> List[ReleasedOutput]:
    """declare-lab/MIME ``output.txt``: per test example a head line ``emotion:E vader-score: S
    predicted_emotion: P``, then ``Context:[list]``, ``Topk:``, ``Beam:``, ``Greedy:`` and ``Ref:``
    lines, blocks separated by 70 dashes; three header lines (a comment, the EVAL figures) first."""
    label = {d.lower(): d for d in MIME_DECODINGS}.get(decoding)
    if label is None:
        raise ValueError(f'MIME output.txt holds the decodings {", ".join(d.lower() for d in MIME_DECODINGS)}, '
                         f'not {decoding!r}')
    lines = _read_text(path)
    outputs = []
    for first, block in _labelled_blocks(lines, lambda line: line.strip() == MIME_SEPARATOR):
        context, context_no = _field(block, 'Context', path, first)
        head = MIME_HEAD.match(lines[context_no - 2]) if context_no > 1 else None
        if head is None:
            raise ReleasedFormatError(path, context_no - 1, 'emotion', 'the line before "Context:" is not '
                                      '"emotion:E vader-score: S predicted_emotion: P"')
        reply, _ = _field(block, label, path, context_no - 1)
        reference, _ = _field(block, 'Ref', path, context_no - 1)
        outputs.append(ReleasedOutput(_context_list(context, path, context_no, 'Context'), reply.strip(),
                                      reference.strip(), head.group(1), f'{path}:{context_no - 1}'))
    if not outputs:
        raise ReleasedFormatError(path, 1, 'file', 'no "emotion: ... Context: ... Ref:" block: not a MIME output.txt')
    return outputs


# ----- CEM's results.txt (Sahandfer/CEM main.py test()) ------------------------------------------------
CEM_DECODINGS = ('Beam', 'Greedy')
CEM_HEAD = ('EVAL\tLoss\tPPL\tAccuracy', re.compile(r'^\S+\t[0-9.]+\t[0-9.]+\t[0-9.]+$'))
CEM_SEPARATOR = re.compile(r'^-{20,}$')


def read_cem(path: str, decoding: str) -> List[ReleasedOutput]:
    """A ``results.txt`` as CEM's code writes it: two header lines (``EVAL Loss PPL Accuracy`` and
    the four test figures), then per test example ``Emotion:``, ``Pred Emotions:`` (the model's
    top 3), ``Context:[list]``, ``Beam:``, ``Greedy:`` and ``Ref:`` lines, blocks separated by dashes."""
    label = {d.lower(): d for d in CEM_DECODINGS}.get(decoding)
    if label is None:
        raise ValueError(f'CEM results hold the decodings {", ".join(d.lower() for d in CEM_DECODINGS)}, '
                         f'not {decoding!r}')
    lines = _read_text(path)
    if len(lines) < 2 or lines[0].rstrip('\r') != CEM_HEAD[0]:
        raise ReleasedFormatError(path, 1, 'EVAL', 'the first line is not "EVAL<TAB>Loss<TAB>PPL<TAB>Accuracy": '
                                  "not a CEM results file")
    if not CEM_HEAD[1].match(lines[1].rstrip('\r')):
        raise ReleasedFormatError(path, 2, 'EVAL', 'the second line is not four tab-separated test figures')
    body = ['', ''] + lines[2:]  # the header read, keep line numbers
    outputs = []
    for first, block in _labelled_blocks(body, lambda line: bool(CEM_SEPARATOR.match(line.strip()))):
        emotion, _ = _field(block, 'Emotion', path, first)
        context, context_no = _field(block, 'Context', path, first)
        reply, _ = _field(block, label, path, first)
        reference, _ = _field(block, 'Ref', path, first)
        outputs.append(ReleasedOutput(_context_list(context, path, context_no, 'Context'), reply.strip(),
                                      reference.strip(), emotion.strip() or None, f'{path}:{first}'))
    if not outputs:
        raise ReleasedFormatError(path, 3, 'file', 'no "Emotion: ... Context: ... Ref:" block: not a CEM results file')
    return outputs


# ----- labelled lines, a block per "Emotion:" line (MoEL, KEMP, EmpDG) ------------------------------
_LABEL = re.compile(r'^([A-Za-z_+ ]+?)\s*:(.*)$')


def read_labelled(path: str, reply_label: str, name: str) -> List[ReleasedOutput]:
    """Files of ``Label:value`` lines where each example starts at its ``Emotion:`` line and holds
    ``Context:[list]``, the reply under ``reply_label`` and ``Ref:``, in any order, blank lines
    between blocks or none; labels are matched without regard to case (MoEL writes ``ref:``,
    KEMP ``Ref:``, EmpDG ``emotion:``), other labels (KEMP's ``Concept:``) are read past."""
    blocks: List[Tuple[int, Dict[str, Tuple[str, int]]]] = []
    for line_no, line in enumerate(_read_text(path), start=1):
        if not line.strip():
            continue
        match = _LABEL.match(line)
        if match is None:
            raise ReleasedFormatError(path, line_no, 'line', f'not a "Label:value" line of {name}: {line[:80]!r}')
        label, value = match.group(1).strip().lower(), match.group(2).strip()
        if label == 'emotion':
            blocks.append((line_no, {}))
        elif not blocks:
            raise ReleasedFormatError(path, line_no, label, f'comes before the first "Emotion:" line of {name}')
        block = blocks[-1][1]
        if label in block:
            raise ReleasedFormatError(path, line_no, label, f'a second "{label}:" line in the example starting at '
                                      f'line {blocks[-1][0]}: an "Emotion:" line is missing')
        block[label] = (value, line_no)
    outputs = []
    for first, block in blocks:
        context, context_no = _field(block, 'context', path, first)
        reply, _ = _field(block, reply_label, path, first)
        reference, _ = _field(block, 'ref', path, first)
        outputs.append(ReleasedOutput(_context_list(context, path, context_no, 'context'), reply, reference,
                                      block['emotion'][0] or None, f'{path}:{first}'))
    if not outputs:
        raise ReleasedFormatError(path, 1, 'file', f'no "Emotion:" line: not a {name} file')
    return outputs


# HLTCHKUST/MoEL generation_result.txt: four systems' replies per example
MOEL_SYSTEMS = {'moel': 'moe', 'moel-oracle': 'moe+oracle', 'moel-multitask': 'trs+multitask',
                'moel-transformer': 'trs'}


# The formats by name, as ``parlai empathy_score --outputs-format`` takes them.
FORMATS: Dict[str, Callable[[str], List[ReleasedOutput]]] = {
    **{f'mime-{d.lower()}': functools.partial(read_mime, decoding=d.lower()) for d in MIME_DECODINGS},
    **{fmt: functools.partial(read_labelled, reply_label=label, name='MoEL generation_result.txt')
       for fmt, label in MOEL_SYSTEMS.items()},
    'kemp': functools.partial(read_labelled, reply_label='pred', name='KEMP result'),
    'empdg': functools.partial(read_labelled, reply_label='pred', name='EmpDG prediction'),
    **{f'cem-{d.lower()}': functools.partial(read_cem, decoding=d.lower()) for d in CEM_DECODINGS},
}


def read_released(path: str, fmt: str) -> List[ReleasedOutput]:
    if fmt not in FORMATS:
        raise ValueError(f'unknown released-outputs format {fmt!r} (known: {", ".join(sorted(FORMATS))})')
    return FORMATS[fmt](path)


# ----- the released files this package knows ---------------------------------------------------------
RELEASED_ENV = 'PARLAI_EMPATHY_RELEASED_DIR'


@dataclass(frozen=True)
class ReleasedFile:
    """One released test-output file, pinned to a commit and a sha256."""

    entry: str  # the row's name, e.g. ``moel``
    system: str  # as its paper names it
    decoding: str
    repo: str  # owner/name on GitHub
    commit: str
    path: str
    sha256: str
    format: str  # a key of FORMATS

    @property
    def url(self) -> str:
        return f'https://raw.githubusercontent.com/{self.repo}/{self.commit}/{self.path}'

    @property
    def label(self) -> str:
        return f'released outputs of {self.system} ({self.decoding})'

    def local_path(self, folder: str) -> str:
        return os.path.join(folder, self.repo.replace('/', '+'), self.commit, self.path)

    def to_json(self) -> Dict[str, str]:
        return {'system': self.system, 'decoding': self.decoding, 'repo': self.repo, 'commit': self.commit,
                'path': self.path, 'sha256': self.sha256, 'url': self.url, 'format': self.format}


KNOWN: Dict[str, ReleasedFile] = {f.entry: f for f in (
    ReleasedFile('mime_beam', 'MIME', 'beam 5', 'declare-lab/MIME', '7c34f3ae6dc8f8b9e6fb89b5bfa016fbaa445018',
                 'output.txt', '467977d5e05b0a9a97c85d7cf14576a69dcac3d49444b131d8013187c6344a72', 'mime-beam'),
    ReleasedFile('mime_greedy', 'MIME', 'greedy', 'declare-lab/MIME', '7c34f3ae6dc8f8b9e6fb89b5bfa016fbaa445018',
                 'output.txt', '467977d5e05b0a9a97c85d7cf14576a69dcac3d49444b131d8013187c6344a72', 'mime-greedy'),
    *(ReleasedFile(entry, system, 'decoding not stated', 'HLTCHKUST/MoEL',
                   '116a37de98205d0585760070046fb70b5b5f50f9', 'generation_result.txt',
                   '41ac612083a4359d0b4526420adbd5df7c8201392c8ecad45022c385d1695d16', fmt)
      for entry, system, fmt in (('moel', 'MoEL', 'moel'), ('moel_multitask', 'Multi-TR, by the MoEL authors',
                                                                'moel-multitask'),
                                 ('moel_transformer', 'Transformer, by the MoEL authors', 'moel-transformer'))),
    ReleasedFile('kemp', 'KEMP', 'greedy', 'qtli/KEMP', 'b9a4fd58fa48556856c83d3d04125422d15e0b36',
                 'result/KEMP/KEMP.txt', 'a0f4a48302677fbf2c0deecd2448e14deefba301149f64cfd93ef14a5d78050d', 'kemp'),
    ReleasedFile('empdg', 'EmpDG', 'greedy, 2,713 test examples', 'qtli/EmpDG',
                 'b3054b1df452305352e2024c9485044e422d6551', 'Predictions/EmpDG_w_feedback.txt',
                 'f42f12ddf8188f00f5bb7880fec5cfd2eb4c970f276df0545fcd4d1423f6fc7b', 'empdg'),
    # written by CEM's code, named as CEM's README says; the EmpSOA authors' working copy was a CEM
    # tree whose model class was still called CEM, and the file's test figures are not CEM paper's:
    # which model wrote it is not established (projects/published/README.md)
    *(ReleasedFile(f'cem_txt_empsoa_{decoding}', "CEM.txt in EmpSOA's repository, model not established", decoding,
                   'circle-hit/EmpSOA', 'd5ee5461b4116a773c9973a7e34f3c26b3b58ddd', 'src/results/CEM.txt',
                   'aa30efc009843b0977669fc8ec7c74025ee828cd2e3890c0c7ece7b2bda3e282', f'cem-{decoding}')
      for decoding in ('greedy', 'beam')),
)}


def released_dir(folder: Optional[str] = None) -> str:
    return os.path.expanduser(folder or os.environ.get(RELEASED_ENV) or '~/.cache/parlai-empathy/released')


class ReleasedFileError(FileNotFoundError):
    pass


def fetch_released(known: ReleasedFile, folder: Optional[str] = None, download: bool = True) -> str:
    """The local copy of a known file (``<folder>/<owner>+<name>/<commit>/<path>``), downloaded
    from GitHub at its pinned commit when absent; its sha256 is checked either way."""
    path = known.local_path(released_dir(folder))
    if not os.path.isfile(path):
        if not download:
            raise ReleasedFileError(f'{path} does not exist')
        _download(known, path)
    from parlai_empathy.data.ed_source import file_checksum

    found = file_checksum(path)
    if found != known.sha256:
        raise ReleasedFileError(f'{path}: sha256 {found}, but {known.repo}@{known.commit[:7]}:{known.path} has '
                                f'{known.sha256}: not the released file (remove it to download it again)')
    return path


def _download(known: ReleasedFile, path: str) -> None:
    import urllib.error
    import urllib.request

    clone = known.repo.split('/')[1]
    by_hand = (f'git clone https://github.com/{known.repo} && git -C {clone} checkout {known.commit} && '
               f'mkdir -p {os.path.dirname(path)} && cp {clone}/{known.path} {path}')
    try:
        with urllib.request.urlopen(known.url, timeout=60) as response:
            data = response.read(MAX_FILE_BYTES + 1)
    except (urllib.error.URLError, OSError) as err:
        raise ReleasedFileError(f'could not download {known.url} ({err}); with a clone of the repository, put the '
                                f'file in place by hand:\n  {by_hand}\n(or set ${RELEASED_ENV} to a folder holding '
                                f'{known.repo.replace("/", "+")}/{known.commit}/{known.path})') from None
    if len(data) > MAX_FILE_BYTES:
        raise ReleasedFileError(f'{known.url}: more than {MAX_FILE_BYTES} bytes, not the released file')
    if hashlib.sha256(data).hexdigest() != known.sha256:
        raise ReleasedFileError(f'{known.url}: sha256 {hashlib.sha256(data).hexdigest()}, expected {known.sha256}')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f'{path}.part{os.getpid()}'
    with open(partial, 'wb') as f:
        f.write(data)
    os.replace(partial, path)
