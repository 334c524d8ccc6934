"""The ED 32-way emotion of every ED utterance, as a small portable folder.

ETHREED trains its listener tracker on an emotion label for every listener utterance. Those labels
come from an ED 32-way classifier trained on utterances (``li_ethreed/ed32_utterance``): hours of
CPU training, then ``parlai empathy_tag_ed``, whose tag cache (float probabilities of every class,
some 14 MB) lives under ParlAI's datapath on one machine. What ETHREED reads from it is one label
per utterance, so ``parlai empathy_tag_ed --export-labels DIR`` writes just that:

* ``labels.csv.gz``: ``split,conv_id,utterance_idx,emotion,probability,text_sha1`` for every
  utterance of the three ED files, in file order; ``emotion`` is the classifier's top class,
  ``probability`` its probability (4 decimals), ``text_sha1`` the first 8 hex digits of the SHA-1
  of the utterance's cleaned text, so that labels are never applied to other text;
* ``meta.json``: the format, the classifier (key of its weights, classes), the ED data key, the
  counts, the sha256 of ``labels.csv.gz`` and the command that made it.

The package ships the labels of the ``ed32_utterance`` row (``--listener-emotions ed32-utterance``,
ETHREED's default), so that plain ``parlai train_model -t empathy_ed_clean -m empathy/ethreed -mf M``
trains the paper's model without the classifier step. Plain text, read without unpickling; a
malformed line is named with its file, line and field.
"""

import csv
import gzip
import hashlib
import io
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from parlai_empathy.data.ed_source import file_checksum
from parlai_empathy.data.emotions import ED_EMOTIONS
from parlai_empathy.evidence.artifacts import code_version, path_placeholders, portable, read_json, write_json
from parlai_empathy.files.bounded import FileRefused, read_gzip_bytes
from parlai_empathy.files.cache_lock import atomic_write

FORMAT = 'ed-utterance-labels/1'
LABELS, META = 'labels.csv.gz', 'meta.json'
HEADER = ('split', 'conv_id', 'utterance_idx', 'emotion', 'probability', 'text_sha1')
PACKAGED = 'ed32-utterance'  # --listener-emotions keyword: the labels shipped with the package
PACKAGED_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'data', 'listener_labels', 'ed32_utterance'
)
RETAG = (
    'parlai empathy_reproduce --project li_ethreed --rows ed32_utterance (the classifier, then '
    'parlai empathy_tag_ed --export-labels DIR), then --listener-emotions DIR'
)


class LabelFileError(ValueError):
    """A missing, malformed or mismatched label folder; the message names file, line and field."""


def text_sha1(text: str) -> str:
    return hashlib.sha1(text.encode('utf-8')).hexdigest()[:8]


def export(cache_directory: str, ed_dir: str, out_directory: str, command: Optional[str] = None) -> Dict:
    """Write ``out_directory`` from a complete single-label tag cache of the ED files in ``ed_dir``."""
    from parlai_empathy.emotions import tag_cache

    table = tag_cache.TagTable(cache_directory)
    classifier = table.meta['classifier']
    if classifier.get('multilabel') or sorted(table.classes) != sorted(ED_EMOTIONS):
        raise LabelFileError(
            f'{cache_directory} was not tagged by a single-label ED 32-way classifier: '
            'only those labels can be exported'
        )
    utterances = tag_cache.ed_utterances(ed_dir)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator='\n')
    writer.writerow(HEADER)
    for u in utterances:
        probs = table.probs[table.lookup(u.split, u.conv_id, u.utterance_idx)]
        top = int(np.argmax(probs))
        writer.writerow(
            (u.split, u.conv_id, u.utterance_idx, table.classes[top], f'{probs[top]:.4f}', text_sha1(u.text))
        )
    os.makedirs(out_directory, exist_ok=True)
    labels_path = os.path.join(out_directory, LABELS)
    # mtime 0: the same labels give the same bytes (and the same sha256)
    data = gzip.compress(buffer.getvalue().encode('utf-8'), compresslevel=9, mtime=0)
    atomic_write(labels_path, lambda f: f.write(data))
    by_split: Dict[str, int] = {}
    for u in utterances:
        by_split[u.split] = by_split.get(u.split, 0) + 1
    meta = {
        'format': FORMAT,
        'classifier': {
            'key': classifier['key'],
            'classes': list(table.classes),
            'precision': classifier.get('precision'),
            'model_file': os.path.basename(classifier.get('model_file') or '') or None,
        },
        'data': dict(table.meta['data']),
        'counts': {'utterances': len(utterances), 'by_split': by_split},
        'sha256': file_checksum(labels_path),
        'command': portable(command, path_placeholders()) if command else None,
        'code': code_version(),
    }
    write_json(os.path.join(out_directory, META), meta)
    return meta


@dataclass
class ListenerLabels:
    """A label folder, loaded: ``(conv_id, utterance_idx) -> (emotion, text_sha1)``."""

    directory: str
    meta: Dict
    labels: Dict[Tuple[str, int], Tuple[str, str]]

    def emotion(self, conv_id: str, utterance_idx: int) -> Optional[str]:
        found = self.labels.get((str(conv_id), int(utterance_idx)))
        return found[0] if found else None

    def mismatches(self, utterances: Sequence) -> List[Tuple[str, str]]:
        """``(key, problem)`` for each utterance (``tag_cache.Utterance``) the folder has no label
        for, or whose text differs from the text that was labelled."""
        out = []
        for u in utterances:
            found = self.labels.get((u.conv_id, u.utterance_idx))
            if found is None:
                out.append((f'{u.split} {u.conv_id} utterance {u.utterance_idx}', 'no label'))
            elif found[1] != text_sha1(u.text):
                out.append((f'{u.split} {u.conv_id} utterance {u.utterance_idx}', 'other text'))
        return out

    def check_covers(self, ed_dir: str, splits: Sequence[str] = ('train', 'valid', 'test')) -> None:
        """Raise unless every utterance of the ED files in ``ed_dir`` has a label made from its text."""
        from parlai_empathy.emotions import tag_cache

        bad = self.mismatches(tag_cache.ed_utterances(ed_dir, splits))
        if bad:
            shown = '; '.join(f'{key}: {problem}' for key, problem in bad[:3])
            raise LabelFileError(
                f'the listener labels in {self.directory} were made from other ED text than {ed_dir}: '
                f'{len(bad)} utterances differ ({shown}{"; ..." if len(bad) > 3 else ""}). Tag these '
                f'files with the ED 32-way classifier: {RETAG}'
            )


def is_label_folder(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, LABELS))


def resolve(path: str) -> str:
    return PACKAGED_DIR if path == PACKAGED else path


def load(directory: str) -> ListenerLabels:
    directory = resolve(directory)
    labels_path, meta_path = os.path.join(directory, LABELS), os.path.join(directory, META)
    if not os.path.isfile(labels_path):
        raise LabelFileError(f'{labels_path} does not exist: make a label folder with {RETAG}')
    meta = read_json(meta_path, error=LabelFileError)
    if meta.get('format') != FORMAT:
        raise LabelFileError(f'{meta_path}, field "format": {meta.get("format")!r}, this code reads {FORMAT!r}')
    if meta.get('sha256') != file_checksum(labels_path):
        raise LabelFileError(
            f'{labels_path} does not match the sha256 in {meta_path}: the file is corrupt '
            f'or was edited; make it again with {RETAG}'
        )
    known = set(ED_EMOTIONS)
    labels: Dict[Tuple[str, int], Tuple[str, str]] = {}
    try:
        data = read_gzip_bytes(labels_path, 'a listener label file (gzipped CSV)')
    except FileRefused as err:
        raise LabelFileError(str(err)) from None
    try:
        text = data.decode('utf-8')
    except UnicodeDecodeError as err:
        line = data.count(b'\n', 0, err.start) + 1
        raise LabelFileError(
            f'{labels_path}, line {line}: not UTF-8: byte 0x{data[err.start]:02x} ({err.reason})'
        ) from None
    rows = csv.reader(io.StringIO(text, newline=''))
    header = tuple(next(rows, ()))
    if header != HEADER:
        raise LabelFileError(
            f'{labels_path}, line 1: the header is {",".join(header)!r}, expected {",".join(HEADER)!r}'
        )
    for line, row in enumerate(rows, start=2):

        def bad(field, problem, line=line):
            return LabelFileError(f'{labels_path}, line {line}, field "{field}": {problem}')

        if len(row) != len(HEADER):
            raise bad(HEADER[min(len(row), len(HEADER) - 1)], f'{len(row)} fields, expected {len(HEADER)}')
        split, conv_id, idx, emotion, probability, sha = row
        if split not in ('train', 'valid', 'test'):
            raise bad('split', f'{split!r} is not train, valid or test')
        if not idx.isdigit():
            raise bad('utterance_idx', f'{idx!r} is not a positive integer')
        if emotion not in known:
            raise bad('emotion', f'{emotion!r} is not one of the 32 ED emotions')
        try:
            p = float(probability)
        except ValueError:
            p = -1.0
        if not 0.0 <= p <= 1.0:
            raise bad('probability', f'{probability!r} is not a probability')
        if len(sha) != 8 or any(c not in '0123456789abcdef' for c in sha):
            raise bad('text_sha1', f'{sha!r} is not 8 hex digits')
        key = (conv_id, int(idx))
        if key in labels:
            raise bad('conv_id', f'utterance {idx} of {conv_id} appears twice')
        labels[key] = (emotion, sha)
    if not labels:
        raise LabelFileError(f'{labels_path}: no examples (header only); make it again with {RETAG}')
    return ListenerLabels(directory, meta, labels)
