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
import dataclasses
import functools
import hashlib
import io
import os
import re
import tokenize
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from parlai_empathy.files.bounded import FileRefused, read_bytes
from parlai_empathy.files.caps import caps, describe


class ReleasedFormatError(FileRefused):
    def __init__(self, path: str, line_no: int, field_name: str, problem: str):
        super().__init__(path, line_no, field_name, problem)


@dataclass(frozen=True)
class ReleasedOutput:
    """One reply of a released file. ``source`` is ``file:line`` of the block's first line."""

    context: Tuple[str, ...]
    response: str
    reference: Optional[str] = None
    emotion: Optional[str] = None
    source: str = ''
    # a file of emotion predictions instead of replies: the ED emotion the system named ('' for none)
    predicted_emotion: Optional[str] = None


def _read_text(path: str) -> List[str]:
    # released files are small (MIME's output.txt is 2.4 MB): read whole, within ``data_bytes``
    raw = read_bytes(path, 'a released output file', 'data_bytes')
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError as err:
        line_no = raw[: err.start].count(b'\n') + 1
        raise ReleasedFormatError(path, line_no, 'file', f'not UTF-8 (byte {raw[err.start]:#04x})') from None
    return text.split('\n')


def _context_list(value: str, path: str, line_no: int, field_name: str) -> Tuple[str, ...]:
    """A context written as a Python list literal of strings (``str(list_of_turns)``), read token
    by token: ``ast.literal_eval`` would build a syntax tree hundreds of times the text's size, and
    nothing but a flat list of string literals is accepted, within ``literal_chars``."""
    limits = caps()
    text = value.strip()
    if len(text) > limits.literal_chars:
        raise ReleasedFormatError(
            path,
            line_no,
            field_name,
            f'{len(text):,} characters, over the cap of '
            f'{describe("literal_chars", limits.literal_chars)} for a context',
        )

    def refused(problem=None):
        return ReleasedFormatError(
            path, line_no, field_name, problem or f'not a non-empty list of strings: {text[:80]!r}'
        )

    turns, expect = [], '['
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER):
                continue
            if expect == 'end':
                raise refused()
            if token.type == tokenize.OP and token.string == expect == '[':
                expect = 'item'
            elif token.type == tokenize.STRING and expect == 'item' and token.string[:1] in '\'"':
                turn = ast.literal_eval(token.string)  # one plain string literal: bounded by its text
                if len(turn) > limits.cell_chars:
                    raise refused(
                        f'a turn of {len(turn):,} characters, over the cap of '
                        f'{describe("cell_chars", limits.cell_chars)}'
                    )
                turns.append(turn)
                expect = ','
            elif token.type == tokenize.OP and token.string == ']' and expect in (',', 'item'):
                expect = 'end'
            elif token.type == tokenize.OP and token.string == ',' and expect == ',':
                expect = 'item'
            else:
                raise refused()
    except (tokenize.TokenError, SyntaxError, ValueError) as err:
        if isinstance(err, ReleasedFormatError):
            raise
        raise refused() from None
    if expect != 'end' or not turns:
        raise refused()
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
        raise ValueError(
            f'MIME output.txt holds the decodings {", ".join(d.lower() for d in MIME_DECODINGS)}, not {decoding!r}'
        )
    lines = _read_text(path)
    outputs = []
    for first, block in _labelled_blocks(lines, lambda line: line.strip() == MIME_SEPARATOR):
        context, context_no = _field(block, 'Context', path, first)
        head = MIME_HEAD.match(lines[context_no - 2]) if context_no > 1 else None
        if head is None:
            raise ReleasedFormatError(
                path,
                context_no - 1,
                'emotion',
                'the line before "Context:" is not "emotion:E vader-score: S predicted_emotion: P"',
            )
        reply, _ = _field(block, label, path, context_no - 1)
        reference, _ = _field(block, 'Ref', path, context_no - 1)
        outputs.append(
            ReleasedOutput(
                _context_list(context, path, context_no, 'Context'),
                reply.strip(),
                reference.strip(),
                head.group(1),
                f'{path}:{context_no - 1}',
            )
        )
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
        raise ValueError(
            f'CEM results hold the decodings {", ".join(d.lower() for d in CEM_DECODINGS)}, not {decoding!r}'
        )
    lines = _read_text(path)
    if len(lines) < 2 or lines[0].rstrip('\r') != CEM_HEAD[0]:
        raise ReleasedFormatError(
            path, 1, 'EVAL', 'the first line is not "EVAL<TAB>Loss<TAB>PPL<TAB>Accuracy": not a CEM results file'
        )
    if not CEM_HEAD[1].match(lines[1].rstrip('\r')):
        raise ReleasedFormatError(path, 2, 'EVAL', 'the second line is not four tab-separated test figures')
    body = ['', ''] + lines[2:]  # the header read, keep line numbers
    outputs = []
    for first, block in _labelled_blocks(body, lambda line: bool(CEM_SEPARATOR.match(line.strip()))):
        emotion, _ = _field(block, 'Emotion', path, first)
        context, context_no = _field(block, 'Context', path, first)
        reply, _ = _field(block, label, path, first)
        reference, _ = _field(block, 'Ref', path, first)
        outputs.append(
            ReleasedOutput(
                _context_list(context, path, context_no, 'Context'),
                reply.strip(),
                reference.strip(),
                emotion.strip() or None,
                f'{path}:{first}',
            )
        )
    if not outputs:
        raise ReleasedFormatError(path, 3, 'file', 'no "Emotion: ... Context: ... Ref:" block: not a CEM results file')
    return outputs


# ----- 27182812/LLM4ED: ChatGPT's emotion and situation, a line per test example -----------------------
LLM4ED_CONTEXTS = os.path.join('data', 'ED', 'sys_dialog_texts.test.npy')
# the globals an object array of strings names in its pickle (numpy's array rebuild, the dtype, and
# bytes written as latin-1 text by protocol 2); none of them is ever imported or called here
_RECONSTRUCT = {('numpy.core.multiarray', '_reconstruct'), ('numpy._core.multiarray', '_reconstruct')}
_NPY_GLOBALS = _RECONSTRUCT | {('numpy', 'ndarray'), ('numpy', 'dtype'), ('_codecs', 'encode')}
_PUSHED = {
    'SHORT_BINUNICODE',
    'BINUNICODE',
    'BINUNICODE8',
    'UNICODE',
    'SHORT_BINBYTES',
    'BINBYTES',
    'BINBYTES8',
    'SHORT_BINSTRING',
    'BINSTRING',
    'BININT',
    'BININT1',
    'BININT2',
    'INT',
    'LONG1',
}
_CONSTANTS = {'NONE': None, 'NEWTRUE': True, 'NEWFALSE': False}


@dataclasses.dataclass
class _Call:
    """A REDUCE the pickle asks for, recorded and never performed."""

    func: Tuple[str, str]
    args: tuple
    state: object = None


class _NotStrings(ValueError):
    pass


def _pickle_stack(data: bytes) -> object:
    """The object a pickle describes, read from its opcodes (``pickletools.genops`` only parses):
    lists, tuples, strings and numbers are built, the globals above recorded by name, anything
    else refused. Nothing in the file is imported or called."""
    import pickletools

    stack: List[object] = []
    marks: List[int] = []
    memo: Dict[object, object] = {}

    def pop_mark():
        start = marks.pop()
        items = stack[start:]
        del stack[start:]
        return items

    for op, arg, pos in pickletools.genops(data):
        name = op.name
        if name in ('PROTO', 'FRAME'):
            continue
        if name == 'STOP':
            break
        if name in ('GLOBAL', 'STACK_GLOBAL'):
            module, attr = arg.split(' ', 1) if name == 'GLOBAL' else (stack.pop(-2), stack.pop())
            if (module, attr) not in _NPY_GLOBALS:
                raise _NotStrings(f'{module}.{attr} is not part of an array of strings')
            stack.append((module, attr, 'global'))
        elif name in _PUSHED:
            stack.append(arg)
        elif name in _CONSTANTS:
            stack.append(_CONSTANTS[name])
        elif name == 'EMPTY_LIST':
            stack.append([])
        elif name == 'EMPTY_TUPLE':
            stack.append(())
        elif name == 'MARK':
            marks.append(len(stack))
        elif name == 'APPEND':
            item = stack.pop()
            stack[-1].append(item)
        elif name == 'APPENDS':
            items = pop_mark()
            stack[-1].extend(items)
        elif name == 'LIST':
            stack.append(pop_mark())
        elif name == 'TUPLE':
            stack.append(tuple(pop_mark()))
        elif name in ('TUPLE1', 'TUPLE2', 'TUPLE3'):
            n = int(name[-1])
            items = tuple(stack[-n:])
            del stack[-n:]
            stack.append(items)
        elif name in ('BINPUT', 'LONG_BINPUT', 'PUT'):
            memo[arg] = stack[-1]
        elif name == 'MEMOIZE':
            memo[len(memo)] = stack[-1]
        elif name in ('BINGET', 'LONG_BINGET', 'GET'):
            stack.append(memo[arg])
        elif name == 'REDUCE':
            args, func = stack.pop(), stack.pop()
            if not (isinstance(func, tuple) and func[-1:] == ('global',)) or not isinstance(args, tuple):
                raise _NotStrings(f'a call of something other than a named function at byte {pos}')
            if func[:2] == ('_codecs', 'encode'):  # protocol 2's bytes: latin-1 text
                if len(args) != 2 or not isinstance(args[0], str) or args[1] != 'latin1':
                    raise _NotStrings(f'_codecs.encode of something other than latin-1 text at byte {pos}')
                stack.append(args[0].encode('latin1'))
            else:
                stack.append(_Call(func[:2], args))
        elif name == 'BUILD':
            state = stack.pop()
            if not isinstance(stack[-1], _Call):
                raise _NotStrings(f'state set on something other than an array or a dtype at byte {pos}')
            stack[-1].state = state
        else:
            raise _NotStrings(f'pickle opcode {name} at byte {pos} has no place in an array of strings')
    if len(stack) != 1:
        raise _NotStrings('the pickle does not end with one object')
    return stack[0]


def _object_array_items(root: object) -> list:
    """The items of the object array a parsed pickle describes (``numpy.ndarray.__reduce__``:
    ``_reconstruct(ndarray, (0,), b'b')`` then the state ``(1, shape, dtype, fortran, items)``)."""
    if not isinstance(root, _Call) or root.func not in _RECONSTRUCT:
        raise _NotStrings('the pickled object is not a numpy array')
    if not root.args or root.args[0] != ('numpy', 'ndarray', 'global'):
        raise _NotStrings('the pickled object is not a plain numpy array')
    state = root.state
    if not isinstance(state, tuple) or len(state) != 5 or not isinstance(state[4], list):
        raise _NotStrings('the array has no list of items')
    dtype = state[2]
    if not isinstance(dtype, _Call) or dtype.func != ('numpy', 'dtype') or dtype.args[:1] != ('O8',):
        raise _NotStrings('the array is not an object array')
    return state[4]


def read_npy_turns(path: str) -> List[Tuple[str, ...]]:
    """A ``.npy`` object array whose items are lists of strings (MoEL's and CEM's preprocessed
    contexts, ``sys_dialog_texts.test.npy``), read without unpickling: the pickle inside is parsed
    opcode by opcode (:func:`_pickle_stack`), and only lists of strings come out of it."""
    import io

    import numpy as np
    from numpy.lib import format as npy_format

    data = read_bytes(path, 'a preprocessed ED split (.npy)', 'data_bytes')  # a regular file within the cap
    with io.BytesIO(data) as f:
        try:
            version = npy_format.read_magic(f)
            read_header = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
            shape, _, dtype = read_header(f)
        except ValueError as err:
            raise ReleasedFormatError(path, 1, 'header', f'not a .npy file ({err})') from None
        if dtype != np.dtype(object) or len(shape) != 1:
            raise ReleasedFormatError(path, 1, 'header', f'a {dtype} array of shape {shape}, not a list of contexts')
        try:
            items = _object_array_items(_pickle_stack(f.read()))
        except Exception as err:  # any failure of a hostile or damaged pickle is this file's error
            raise ReleasedFormatError(path, 1, 'array', f'not an array of lists of strings ({err})') from None
    if len(items) != shape[0]:
        raise ReleasedFormatError(path, 1, 'array', 'the pickled object is not the array the header announces')
    turns = []
    for i, item in enumerate(items, start=1):
        if not isinstance(item, list) or not item or not all(isinstance(t, str) for t in item):
            raise ReleasedFormatError(path, 1, f'item {i}', 'not a non-empty list of strings')
        turns.append(tuple(item))
    return turns


def llm4ed_emotion(text: str) -> str:
    """The ED emotion a free-text answer names: the first quoted one of the 32 labels, else the
    first one written as a word; '' when it names none."""
    from parlai_empathy.data.emotions import ED_EMOTIONS

    labels = '|'.join(sorted(ED_EMOTIONS, key=len, reverse=True))
    lowered = text.lower()
    quoted = re.search(rf'["\u201c\']({labels})["\u201d\']', lowered)
    if quoted:
        return quoted.group(1)
    word = re.search(rf'\b({labels})\b', lowered)
    return word.group(1) if word else ''


def read_llm4ed(path: str) -> List[ReleasedOutput]:
    """LLM4ED's ``results/ED_chatgpt_stage1.txt``: line i is ChatGPT's answer (the user's emotion
    and situation) for item i of ``data/ED/sys_dialog_texts.test.npy`` in the same checkout
    (``prompt_twostages.py`` walks that array in order); both are read, the answer's emotion kept."""
    lines = _read_text(path)
    if lines and lines[-1] == '':
        lines = lines[:-1]
    contexts_path = os.path.join(os.path.dirname(os.path.dirname(path)), LLM4ED_CONTEXTS)
    if not os.path.isfile(contexts_path):
        raise ReleasedFormatError(
            path,
            1,
            'file',
            f'its contexts {contexts_path} are missing (the file is read in its checkout: results/ beside data/ED/)',
        )
    contexts = read_npy_turns(contexts_path)
    if len(contexts) != len(lines):
        raise ReleasedFormatError(
            path,
            min(len(lines), len(contexts)) + 1,
            'line',
            f'{len(lines)} answers for the {len(contexts)} contexts of {contexts_path}',
        )
    outputs = []
    for line_no, (line, context) in enumerate(zip(lines, contexts), start=1):
        if not line.strip():
            raise ReleasedFormatError(path, line_no, 'answer', 'an empty line: every test example has an answer')
        outputs.append(
            ReleasedOutput(context, '', None, None, f'{path}:{line_no}', predicted_emotion=llm4ed_emotion(line))
        )
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
            raise ReleasedFormatError(
                path,
                line_no,
                label,
                f'a second "{label}:" line in the example starting at '
                f'line {blocks[-1][0]}: an "Emotion:" line is missing',
            )
        block[label] = (value, line_no)
    outputs = []
    for first, block in blocks:
        context, context_no = _field(block, 'context', path, first)
        reply, _ = _field(block, reply_label, path, first)
        reference, _ = _field(block, 'ref', path, first)
        outputs.append(
            ReleasedOutput(
                _context_list(context, path, context_no, 'context'),
                reply,
                reference,
                block['emotion'][0] or None,
                f'{path}:{first}',
            )
        )
    if not outputs:
        raise ReleasedFormatError(path, 1, 'file', f'no "Emotion:" line: not a {name} file')
    return outputs


# HLTCHKUST/MoEL generation_result.txt: four systems' replies per example
MOEL_SYSTEMS = {
    'moel': 'moe',
    'moel-oracle': 'moe+oracle',
    'moel-multitask': 'trs+multitask',
    'moel-transformer': 'trs',
}


# The formats by name, as ``parlai empathy_score --outputs-format`` takes them.
FORMATS: Dict[str, Callable[[str], List[ReleasedOutput]]] = {
    **{f'mime-{d.lower()}': functools.partial(read_mime, decoding=d.lower()) for d in MIME_DECODINGS},
    **{
        fmt: functools.partial(read_labelled, reply_label=label, name='MoEL generation_result.txt')
        for fmt, label in MOEL_SYSTEMS.items()
    },
    'kemp': functools.partial(read_labelled, reply_label='pred', name='KEMP result'),
    'empdg': functools.partial(read_labelled, reply_label='pred', name='EmpDG prediction'),
    **{f'cem-{d.lower()}': functools.partial(read_cem, decoding=d.lower()) for d in CEM_DECODINGS},
    'llm4ed-stage1': read_llm4ed,
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
    # other files of the same checkout the format reads, (path, sha256), fetched and checked alike
    companions: Tuple[Tuple[str, str], ...] = ()

    @property
    def url(self) -> str:
        return f'https://raw.githubusercontent.com/{self.repo}/{self.commit}/{self.path}'

    @property
    def label(self) -> str:
        return f'released outputs of {self.system} ({self.decoding})'

    def local_path(self, folder: str) -> str:
        return os.path.join(folder, self.repo.replace('/', '+'), self.commit, self.path)

    def to_json(self) -> Dict[str, str]:
        return {
            'system': self.system,
            'decoding': self.decoding,
            'repo': self.repo,
            'commit': self.commit,
            'path': self.path,
            'sha256': self.sha256,
            'url': self.url,
            'format': self.format,
            **({'companions': [{'path': p, 'sha256': h} for p, h in self.companions]} if self.companions else {}),
        }


KNOWN: Dict[str, ReleasedFile] = {
    f.entry: f
    for f in (
        ReleasedFile(
            'mime_beam',
            'MIME',
            'beam 5',
            'declare-lab/MIME',
            '7c34f3ae6dc8f8b9e6fb89b5bfa016fbaa445018',
            'output.txt',
            '467977d5e05b0a9a97c85d7cf14576a69dcac3d49444b131d8013187c6344a72',
            'mime-beam',
        ),
        ReleasedFile(
            'mime_greedy',
            'MIME',
            'greedy',
            'declare-lab/MIME',
            '7c34f3ae6dc8f8b9e6fb89b5bfa016fbaa445018',
            'output.txt',
            '467977d5e05b0a9a97c85d7cf14576a69dcac3d49444b131d8013187c6344a72',
            'mime-greedy',
        ),
        *(
            ReleasedFile(
                entry,
                system,
                'decoding not stated',
                'HLTCHKUST/MoEL',
                '116a37de98205d0585760070046fb70b5b5f50f9',
                'generation_result.txt',
                '41ac612083a4359d0b4526420adbd5df7c8201392c8ecad45022c385d1695d16',
                fmt,
            )
            for entry, system, fmt in (
                ('moel', 'MoEL', 'moel'),
                ('moel_multitask', 'Multi-TR, by the MoEL authors', 'moel-multitask'),
                ('moel_transformer', 'Transformer, by the MoEL authors', 'moel-transformer'),
            )
        ),
        ReleasedFile(
            'kemp',
            'KEMP',
            'greedy',
            'qtli/KEMP',
            'b9a4fd58fa48556856c83d3d04125422d15e0b36',
            'result/KEMP/KEMP.txt',
            'a0f4a48302677fbf2c0deecd2448e14deefba301149f64cfd93ef14a5d78050d',
            'kemp',
        ),
        ReleasedFile(
            'empdg',
            'EmpDG',
            'greedy, 2,713 test examples',
            'qtli/EmpDG',
            'b3054b1df452305352e2024c9485044e422d6551',
            'Predictions/EmpDG_w_feedback.txt',
            'f42f12ddf8188f00f5bb7880fec5cfd2eb4c970f276df0545fcd4d1423f6fc7b',
            'empdg',
        ),
        # written by CEM's code, named as CEM's README says; the EmpSOA authors' working copy was a CEM
        # tree whose model class was still called CEM, and the file's test figures are not CEM paper's:
        # which model wrote it is not established (projects/published/README.md)
        *(
            ReleasedFile(
                f'cem_txt_empsoa_{decoding}',
                "CEM.txt in EmpSOA's repository, model not established",
                decoding,
                'circle-hit/EmpSOA',
                'd5ee5461b4116a773c9973a7e34f3c26b3b58ddd',
                'src/results/CEM.txt',
                'aa30efc009843b0977669fc8ec7c74025ee828cd2e3890c0c7ece7b2bda3e282',
                f'cem-{decoding}',
            )
            for decoding in ('greedy', 'beam')
        ),
        ReleasedFile(
            'llm4ed_chatgpt_emotion',
            'ChatGPT (gpt-3.5-turbo) emotion predictions, by the LLM4ED authors',
            'two-stage prompt, stage 1',
            '27182812/LLM4ED',
            '5822994c6f5771e768ea2fbc35ded84565a69330',
            'results/ED_chatgpt_stage1.txt',
            '589c09fda6ba619e0fb1b9c7d87973582d1f4a499a39588c0447724c91781f0b',
            'llm4ed-stage1',
            companions=(
                (
                    LLM4ED_CONTEXTS.replace(os.sep, '/'),
                    '311cce8cf985d72934477661226c011cd9460eb2ed62667dcda2ce5fb36d3cb1',
                ),
            ),
        ),
    )
}


def released_dir(folder: Optional[str] = None) -> str:
    return os.path.expanduser(folder or os.environ.get(RELEASED_ENV) or '~/.cache/parlai-empathy/released')


class ReleasedFileError(FileNotFoundError):
    pass


def fetch_released(known: ReleasedFile, folder: Optional[str] = None, download: bool = True) -> str:
    """The local copy of a known file (``<folder>/<owner>+<name>/<commit>/<path>``), downloaded
    from GitHub at its pinned commit when absent; its sha256 is checked either way."""
    for companion, sha256 in known.companions:  # read beside the file: fetched and checked first
        fetch_released(dataclasses.replace(known, path=companion, sha256=sha256, companions=()), folder, download)
    path = known.local_path(released_dir(folder))
    if not os.path.isfile(path):
        if not download:
            raise ReleasedFileError(f'{path} does not exist')
        _download(known, path)
    from parlai_empathy.data.ed_source import file_checksum

    found = file_checksum(path)
    if found != known.sha256:
        raise ReleasedFileError(
            f'{path}: sha256 {found}, but {known.repo}@{known.commit[:7]}:{known.path} has '
            f'{known.sha256}: not the released file (remove it to download it again)'
        )
    return path


def _download(known: ReleasedFile, path: str) -> None:
    import urllib.error
    import urllib.request

    clone = known.repo.split('/')[1]
    by_hand = (
        f'git clone https://github.com/{known.repo} && git -C {clone} checkout {known.commit} && '
        f'mkdir -p {os.path.dirname(path)} && cp {clone}/{known.path} {path}'
    )
    try:
        with urllib.request.urlopen(known.url, timeout=60) as response:
            data = response.read(caps().data_bytes + 1)
    except (urllib.error.URLError, OSError) as err:
        raise ReleasedFileError(
            f'could not download {known.url} ({err}); with a clone of the repository, put the '
            f'file in place by hand:\n  {by_hand}\n(or set ${RELEASED_ENV} to a folder holding '
            f'{known.repo.replace("/", "+")}/{known.commit}/{known.path})'
        ) from None
    if len(data) > caps().data_bytes:
        raise ReleasedFileError(
            f'{known.url}: more than {describe("data_bytes", caps().data_bytes)} bytes, not the released file'
        )
    if hashlib.sha256(data).hexdigest() != known.sha256:
        raise ReleasedFileError(f'{known.url}: sha256 {hashlib.sha256(data).hexdigest()}, expected {known.sha256}')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f'{path}.part{os.getpid()}'
    with open(partial, 'wb') as f:
        f.write(data)
    os.replace(partial, path)
