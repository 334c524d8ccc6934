"""GoEmotions (Demszky et al., ACL 2020): reader, label taxonomy and groupings, official download.

The release is a folder with ``{train,dev,test}.tsv`` (``text<TAB>comma-separated label ids
<TAB>comment id``, no header), ``emotions.txt`` (28 names, id = line number, ``neutral`` last) and
the paper's two groupings, ``ekman_mapping.json`` and ``sentiment_dict.json``. Neither grouping
lists ``neutral``; it stays its own group.

Where the folder comes from, first match wins: an explicit path (``--goemotions-datapath``), the
environment variable ``PARLAI_EMPATHY_GOEMOTIONS_DIR``, or ``<parlai datapath>/goemotions``, which
is downloaded from the google-research GitHub repository (sha256-checked) when it is missing.
ParlAI is imported only for that download, so the reader itself is plain Python.
"""

import json
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from parlai_empathy.data.file_errors import DataFileError, DataNotFound, decode_line, no_examples, read_lines

ENV_VAR = 'PARLAI_EMPATHY_GOEMOTIONS_DIR'
SPLITS = {'train': 'train.tsv', 'valid': 'dev.tsv', 'test': 'test.tsv'}
NEUTRAL = 'neutral'
GROUPINGS = ('none', 'ekman', 'sentiment')
# Multi-label examples carry one ParlAI label string: the names joined in class order.
LABEL_SEP = ','

# Canonical files in google-research/google-research (master branch), with the sha256 of the
# copies this project was developed against (../shared/data/SHA256SUMS).
DOWNLOAD_VERSION = '1.0'
_RAW_URL = 'https://raw.githubusercontent.com/google-research/google-research/master/goemotions/data/'
OFFICIAL_FILES = {
    'train.tsv': '1c254a142be5c00e80d819b9ae1bbd36d94b2eeb8f4b1271846508d57e57d9c5',
    'dev.tsv': '575489c079c9de1097062a01738f998590d6b7ead66dd1c9fd1d2ba01fd8bc62',
    'test.tsv': '0587b2dd8b27b97352adbfc3fb083d46005c8946657fdc2b1ca8b1cc7f1f8be4',
    'emotions.txt': '45c3ef86782d2a4d7fedcd6d8c111aa0d0e94720689bd164fac94fefb4495a89',
    'ekman_mapping.json': 'd6b1fea382917c1685c42e1324a0344106be9390f52a3850ce032656d103a328',
    'sentiment_dict.json': '801f6f028082141bd38541a4b14d65b33bdc55d29c7b2aaa029fefecf206f76b',
}


def join_labels(names: Sequence[str]) -> str:
    return LABEL_SEP.join(names)


def split_labels(text: str) -> List[str]:
    return [name for name in text.split(LABEL_SEP) if name]


FIELDS = ('text', 'ids', 'comment_id')
KIND = 'GoEmotions'


class GoEmotionsFormatError(DataFileError):
    """A malformed GoEmotions file; the message names the file, line and field."""


@dataclass(frozen=True)
class GoEmotionsExample:
    text: str
    label_ids: Tuple[int, ...]
    comment_id: str
    line_no: int


@dataclass(frozen=True)
class Taxonomy:
    """The 28 label names and the paper's Ekman / sentiment groupings of them."""

    names: Tuple[str, ...]
    ekman: Dict[str, str]  # fine label -> Ekman group
    sentiment: Dict[str, str]  # fine label -> sentiment group

    def classes(self, grouping: str = 'none') -> List[str]:
        """Class names for a grouping, in a stable order (groups in file order, neutral last)."""
        if grouping == 'none':
            return list(self.names)
        mapping = self._mapping(grouping)
        ordered = []
        for name in self.names:
            group = mapping[name]
            if group not in ordered and group != NEUTRAL:
                ordered.append(group)
        return ordered + [NEUTRAL]

    def group(self, names: Sequence[str], grouping: str = 'none') -> List[str]:
        """Map fine label names to a grouping, deduplicated, in ``classes(grouping)`` order."""
        if grouping == 'none':
            wanted = set(names)
        else:
            mapping = self._mapping(grouping)
            wanted = {mapping[n] for n in names}
        return [c for c in self.classes(grouping) if c in wanted]

    def _mapping(self, grouping: str) -> Dict[str, str]:
        if grouping == 'ekman':
            return self.ekman
        if grouping == 'sentiment':
            return self.sentiment
        raise ValueError(f'unknown GoEmotions grouping {grouping!r}; choose one of {GROUPINGS}')


def resolve_dir(path: Optional[str] = None, datapath: Optional[str] = None) -> str:
    """Find (or download into ``<datapath>/goemotions``) the folder holding the release."""
    chosen = path or os.environ.get(ENV_VAR)
    if chosen:
        if not os.path.isdir(chosen):
            raise DataNotFound(
                f'GoEmotions folder {chosen!r} does not exist (from --goemotions-datapath or ${ENV_VAR})'
            )
        return chosen
    if datapath is None:
        raise DataNotFound(
            f'No GoEmotions folder: pass --goemotions-datapath DIR, set ${ENV_VAR}, '
            'or give a ParlAI datapath to download into'
        )
    return download(os.path.join(datapath, 'goemotions'))


def download(dpath: str) -> str:
    """Fetch the canonical files into ``dpath`` once, ParlAI-style (built marker + sha256)."""
    from parlai.core import build_data

    if not build_data.built(dpath, DOWNLOAD_VERSION):
        if build_data.built(dpath):
            build_data.remove_dir(dpath)
        build_data.make_dir(dpath)
        for file_name, sha in OFFICIAL_FILES.items():
            resource = build_data.DownloadableFile(_RAW_URL + file_name, file_name, sha, zipped=False)
            resource.download_file(dpath)
        build_data.mark_done(dpath, DOWNLOAD_VERSION)
    return dpath


def _require(folder: str, file_name: str) -> str:
    path = os.path.join(folder, file_name)
    if not os.path.isfile(path):
        raise DataNotFound(f'GoEmotions file missing: {path}')
    return path


def _text_lines(path: str) -> List[Tuple[int, str]]:
    """(line number, text with its line break) of a small UTF-8 file; clear errors otherwise."""
    return [(n, decode_line(raw, path, n)) for n, raw in read_lines(path, KIND)]


def _read_group_json(path: str, names: Sequence[str]) -> Dict[str, str]:
    text = ''.join(line for _, line in _text_lines(path))
    if not text.strip():
        raise no_examples(path, 'empty file')
    try:
        groups = json.loads(text)
    except json.JSONDecodeError as err:
        raise GoEmotionsFormatError(path, err.lineno, 'json', f'{err.msg} (column {err.colno})') from None
    if not isinstance(groups, dict) or not all(
        isinstance(m, list) and all(isinstance(x, str) for x in m) for m in groups.values()
    ):
        raise GoEmotionsFormatError(path, 1, 'json', 'expected an object mapping each group to a list of emotion names')
    mapping = {NEUTRAL: NEUTRAL}
    for group, members in groups.items():
        for member in members:
            if member not in names:
                raise GoEmotionsFormatError(path, 1, group, f'unknown emotion {member!r}')
            mapping[member] = group
    missing = [n for n in names if n not in mapping]
    if missing:
        raise GoEmotionsFormatError(path, 1, 'groups', f'emotions not assigned to any group: {missing}')
    return mapping


def read_taxonomy(folder: str) -> Taxonomy:
    path = _require(folder, 'emotions.txt')
    lines = [(n, line.strip()) for n, line in _text_lines(path) if line.strip()]
    if not lines:
        raise no_examples(path, 'no emotion names: empty file')
    seen = {}
    for line_no, name in lines:
        if name in seen:
            raise GoEmotionsFormatError(path, line_no, 'name', f'{name!r} is already on line {seen[name]}')
        seen[name] = line_no
    names = tuple(name for _, name in lines)
    return Taxonomy(
        names=names,
        ekman=_read_group_json(_require(folder, 'ekman_mapping.json'), names),
        sentiment=_read_group_json(_require(folder, 'sentiment_dict.json'), names),
    )


def read_split(folder: str, split: str, num_labels: Optional[int] = None) -> List[GoEmotionsExample]:
    """Read one split (``train``/``valid``/``test``; ``dev`` is accepted for ``valid``)."""
    split = 'valid' if split == 'dev' else split
    if split not in SPLITS:
        raise ValueError(f'unknown GoEmotions split {split!r}; choose one of {sorted(SPLITS)}')
    if num_labels is None:
        num_labels = len(read_taxonomy(folder).names)
    path = _require(folder, SPLITS[split])
    examples = []
    lines = 0
    for line_no, raw in read_lines(path, KIND):
        lines = line_no
        line = decode_line(raw, path, line_no, b'\t', FIELDS).rstrip('\r\n')
        if not line:
            continue
        fields = line.split('\t')
        if len(fields) != 3:
            raise GoEmotionsFormatError(
                path, line_no, 'row', f'expected 3 tab-separated fields (text, ids, comment_id), got {len(fields)}'
            )
        text, ids, comment_id = fields
        try:
            label_ids = tuple(int(i) for i in ids.split(','))
        except ValueError:
            raise GoEmotionsFormatError(path, line_no, 'ids', f'not comma-separated integers: {ids!r}') from None
        bad = [i for i in label_ids if not 0 <= i < num_labels]
        if bad:
            raise GoEmotionsFormatError(path, line_no, 'ids', f'label ids {bad} outside 0..{num_labels - 1}')
        if not comment_id:
            raise GoEmotionsFormatError(path, line_no, 'comment_id', 'empty')
        examples.append(GoEmotionsExample(text, label_ids, comment_id, line_no))
    if not examples:
        raise no_examples(path, 'empty file' if lines == 0 else 'only blank lines')
    return examples
