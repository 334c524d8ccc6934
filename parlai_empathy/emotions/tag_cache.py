"""GoEmotions tags of every ED utterance, in a versioned, resumable on-disk cache.

Layout: ``<root>/v<VERSION>/<classifier key[:16]>-<data key[:16]>/``. The classifier key hashes
the weights and decision settings; the data key hashes the three ED csv files and the reader.
While tagging, length-sorted chunks of utterances are written as ``parts/part-NNNNN.npz``, each
atomically (temporary file + rename), so a killed run resumes at the first missing chunk and
never recomputes a finished one. When every chunk exists they are merged into ``tags.npz``
(probabilities, thresholded labels, keys) and ``meta.json`` is written last: a cache is complete
exactly when ``meta.json`` says so.

Tagging holds a file lock (``<cache folder>.lock``): when several processes tag the same data with
the same classifier at once (the ranks of a distributed job), one tags and the others wait, then
find the complete cache and reuse it.
"""

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from parlai_empathy.data import ed_raw, ed_source
from parlai_empathy.data.file_errors import DataSourceError
from parlai_empathy.emotions import inference
from parlai_empathy.emotions.classifier_files import LoadedClassifier, load_classifier
from parlai_empathy.files.bounded import FileRefused, load_json_file, read_text
from parlai_empathy.files.cache_lock import atomic_write, build_lock

VERSION = 1
SPLITS = ('train', 'valid', 'test')
READER = 'ed_raw.read_clean'
TAG_COMMAND = 'parlai empathy_tag_ed -mf <classifier model file>'
CACHE_SUBDIR = 'empathy_ed_goemotions'  # under ParlAI's --datapath, beside the built data


def default_root(parlai_datapath: str, explicit: Optional[str] = None) -> str:
    return explicit or os.path.join(parlai_datapath, CACHE_SUBDIR)


class TagCacheError(DataSourceError, RuntimeError):
    """A missing, incomplete or corrupt tag cache; the message says what to run."""


@dataclass(frozen=True)
class Utterance:
    split: str
    conv_id: str
    utterance_idx: int
    text: str


def ed_utterances(ed_dir: str, splits: Sequence[str] = SPLITS) -> List[Utterance]:
    """Every utterance of the cleaned ED splits, in file order."""
    out = []
    for split in splits:
        conversations, _ = ed_raw.read_clean(os.path.join(ed_dir, split + '.csv'))
        for conv in conversations:
            out.extend(Utterance(split, conv.conv_id, u.utterance_idx, u.text) for u in conv.utterances)
    return out


def data_key(ed_dir: str, splits: Sequence[str] = SPLITS) -> str:
    digest = hashlib.sha256(f'{READER}:{VERSION}:{",".join(splits)}'.encode())
    for split in splits:
        digest.update(ed_source.file_checksum(os.path.join(ed_dir, split + '.csv')).encode())
    return digest.hexdigest()


def cache_dir(root: str, classifier_key: str, ed_data_key: str) -> str:
    return os.path.join(root, f'v{VERSION}', f'{classifier_key[:16]}-{ed_data_key[:16]}')


def _atomic_json(path: str, obj) -> None:
    atomic_write(path, lambda f: f.write(json.dumps(obj, indent=1, sort_keys=True).encode('utf-8')))


def _part_path(directory: str, number: int) -> str:
    return os.path.join(directory, 'parts', f'part-{number:05d}.npz')


@dataclass
class TagRun:
    directory: str
    total: int
    reused: int  # utterances found already tagged (finished chunks or a complete cache)
    tagged: int  # utterances computed by this run
    empty: int  # utterances with empty text (tagged like any other)


def tag_ed(
    model_file: str,
    ed_dir: str,
    root: str,
    splits: Sequence[str] = SPLITS,
    chunk_size: int = 4096,
    batch_tokens: int = 4096,
    progress: bool = True,
    max_chunks: Optional[int] = None,
    classifier: Optional[LoadedClassifier] = None,
    bf16: bool = False,
) -> TagRun:
    """Tag every utterance of ``splits``; resumes a partial cache. ``max_chunks`` stops early
    (a deliberate interruption, for tests and for tagging in slices). ``bf16`` runs the encoder
    under bfloat16 autocast (about 2x faster on CPUs with AVX-512 BF16); the precision is recorded
    in the cache, and a partial cache is only resumed in the precision it was started in."""
    classifier = classifier or load_classifier(model_file)
    classifier.model.encoder.bf16 = bf16
    precision = 'bf16' if bf16 else 'fp32'
    utterances = ed_utterances(ed_dir, splits)
    key = data_key(ed_dir, splits)
    directory = cache_dir(root, classifier.key, key)
    empty = sum(1 for u in utterances if not u.text.strip())
    if _is_complete(directory):
        return TagRun(directory, len(utterances), len(utterances), 0, empty)
    with build_lock(directory, f'tagging ED into {directory}'):
        # another process may have finished it while this one waited
        if _is_complete(directory):
            return TagRun(directory, len(utterances), len(utterances), 0, empty)
        return _tag_missing_chunks(
            directory,
            utterances,
            classifier,
            key,
            model_file,
            empty,
            precision,
            chunk_size,
            batch_tokens,
            progress,
            max_chunks,
        )


def _tag_missing_chunks(
    directory, utterances, classifier, key, model_file, empty, precision, chunk_size, batch_tokens, progress, max_chunks
) -> TagRun:
    os.makedirs(os.path.join(directory, 'parts'), exist_ok=True)
    _check_precision(directory, precision)

    token_ids = inference.tokenize(classifier, [u.text for u in utterances])
    order = inference.length_sorted(token_ids)
    chunks = [order[i : i + chunk_size] for i in range(0, len(order), chunk_size)]
    done = [n for n in range(len(chunks)) if os.path.exists(_part_path(directory, n))]
    for n in done:
        _check_part(directory, n, chunks[n], len(classifier.classes))
    reused = sum(len(chunks[n]) for n in done)

    bar = _progress(len(utterances), reused, progress)
    tagged = 0
    computed_chunks = 0
    for n, chunk in enumerate(chunks):
        if n in done:
            continue
        if max_chunks is not None and computed_chunks >= max_chunks:
            break
        probs = np.zeros((len(chunk), len(classifier.classes)), dtype=np.float32)
        row_of = {int(pos): row for row, pos in enumerate(chunk)}
        for batch in inference.batches(chunk, token_ids, batch_tokens):
            probs[[row_of[p] for p in batch]] = inference.predict(classifier, [token_ids[p] for p in batch])
            bar.update(len(batch))
        atomic_write(
            _part_path(directory, n), lambda f, chunk=chunk, probs=probs: np.savez(f, positions=chunk, probs=probs)
        )
        tagged += len(chunk)
        computed_chunks += 1
    bar.close()

    if reused + tagged == len(utterances):
        _finish(directory, chunks, utterances, classifier, key, model_file, empty, precision)
    return TagRun(directory, len(utterances), reused, tagged, empty)


def _progress(total, initial, enabled):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit='utt', desc='tagging ED', disable=not enabled)


def _check_part(directory, number, expected_positions, num_classes):
    path = _part_path(directory, number)
    try:
        with np.load(path) as part:
            positions, probs = part['positions'], part['probs']
    except Exception as err:  # a truncated or foreign file: never silently reuse it
        raise TagCacheError(
            f'corrupt tag cache chunk {path} ({type(err).__name__}: {err}); delete it and run {TAG_COMMAND} again'
        ) from None
    if not np.array_equal(positions, expected_positions) or probs.shape != (len(expected_positions), num_classes):
        raise TagCacheError(
            f'tag cache chunk {path} does not belong to this classifier/data plan; '
            f'delete {directory} and run {TAG_COMMAND} again'
        )


def _check_precision(directory: str, precision: str) -> None:
    """Every part of a cache is computed in one precision; the first run decides which."""
    path = os.path.join(directory, 'parts', 'precision')
    if not os.path.exists(path):
        with open(path, 'w') as f:
            f.write(precision)
        return
    try:
        started = read_text(path, 'a tag cache precision mark', 'opt_bytes').strip()
    except FileRefused as err:
        raise TagCacheError(f'{err}; delete {directory} and run {TAG_COMMAND}') from None
    if started != precision:
        flag = '--bf16 true' if started == 'bf16' else '--bf16 false'
        raise TagCacheError(
            f'{directory} was started in {started}, this run is {precision}: resume it with '
            f'{flag}, or delete the folder to start again'
        )


def _finish(directory, chunks, utterances, classifier, key, model_file, empty, precision='fp32'):
    probs = np.zeros((len(utterances), len(classifier.classes)), dtype=np.float32)
    for n, _chunk in enumerate(chunks):
        with np.load(_part_path(directory, n)) as part:
            probs[part['positions']] = part['probs']
    settings = {
        'model_file': os.path.abspath(model_file) if model_file else None,
        'key': classifier.key,
        'classes': classifier.classes,
        'multilabel': classifier.multilabel,
        'threshold': classifier.threshold,
        'max_length': classifier.max_length,
        'precision': precision,
    }
    write_complete(directory, utterances, probs, settings, key)
    shutil.rmtree(os.path.join(directory, 'parts'), ignore_errors=True)


def write_complete(
    directory: str, utterances: Sequence[Utterance], probs: np.ndarray, classifier: Dict, ed_data_key: str
) -> None:
    """Write a complete cache: ``tags.npz`` first, then ``meta.json`` (which marks completion).

    ``classifier`` holds key, classes, multilabel and threshold (and optionally model_file,
    max_length); labels are decided from ``probs`` with them.
    """
    os.makedirs(directory, exist_ok=True)
    labels = inference.decide_labels(probs, classifier['multilabel'], classifier['threshold'])
    arrays = dict(
        probs=probs.astype(np.float32),
        labels=labels,
        split=np.array([u.split for u in utterances]),
        conv_id=np.array([u.conv_id for u in utterances]),
        utterance_idx=np.array([u.utterance_idx for u in utterances], dtype=np.int32),
    )
    atomic_write(os.path.join(directory, 'tags.npz'), lambda f: np.savez_compressed(f, **arrays))
    meta = {
        'version': VERSION,
        'complete': True,
        'classifier': dict(classifier),
        'data': {'key': ed_data_key, 'reader': READER},
        'counts': {
            'utterances': len(utterances),
            'empty_utterances': sum(1 for u in utterances if not u.text.strip()),
            'by_split': {s: int((arrays['split'] == s).sum()) for s in sorted(set(arrays['split'].tolist()))},
        },
    }
    _atomic_json(os.path.join(directory, 'meta.json'), meta)


def _is_complete(directory: str) -> bool:
    path = os.path.join(directory, 'meta.json')
    if not os.path.exists(path):
        return False
    try:
        meta = load_json_file(path, 'a tag cache meta.json', 'opt_bytes')
    except FileRefused:
        return False
    return (
        meta.get('complete') is True
        and meta.get('version') == VERSION
        and os.path.exists(os.path.join(directory, 'tags.npz'))
    )


def locate(root: str, model_file: str, ed_dir: str) -> str:
    """The cache folder of a classifier and ED folder (it need not exist yet)."""
    from parlai_empathy.emotions.classifier_files import read_settings

    return cache_dir(root, read_settings(model_file)['key'], data_key(ed_dir))


def locate_for_options(model_file: str, ed_dir: str, parlai_datapath: str, explicit_root: Optional[str] = None) -> str:
    """The cache folder of ``model_file`` under the root the options name (``--tag-cache-dir``)."""
    return locate(default_root(parlai_datapath, explicit_root), model_file, ed_dir)


class TagTable:
    """A complete cache, loaded: lookup by (split, conv_id, utterance_idx)."""

    def __init__(self, directory: str):
        meta_path = os.path.join(directory, 'meta.json')
        if not os.path.isdir(directory) or not os.path.exists(meta_path):
            raise TagCacheError(f'no GoEmotions tag cache at {directory}: run {TAG_COMMAND} first')
        try:
            self.meta = load_json_file(meta_path, 'a tag cache meta.json', 'opt_bytes')
        except FileRefused as err:
            raise TagCacheError(
                f'corrupt tag cache metadata {meta_path} ({err}); delete {directory} and run {TAG_COMMAND}'
            ) from None
        if self.meta.get('version') != VERSION:
            raise TagCacheError(
                f'tag cache {directory} has version {self.meta.get("version")}, this code reads {VERSION}: '
                f'run {TAG_COMMAND} again'
            )
        if not self.meta.get('complete'):
            raise TagCacheError(f'tag cache {directory} is incomplete: run {TAG_COMMAND} to finish it (it resumes)')
        path = os.path.join(directory, 'tags.npz')
        try:
            with np.load(path) as data:
                self.probs, self.labels = data['probs'], data['labels']
                keys = zip(data['split'].tolist(), data['conv_id'].tolist(), data['utterance_idx'].tolist())
                self.row: Dict[Tuple[str, str, int], int] = {k: i for i, k in enumerate(keys)}
        except Exception as err:
            raise TagCacheError(
                f'corrupt tag cache {path} ({type(err).__name__}: {err}); delete {directory} and run {TAG_COMMAND}'
            ) from None
        self.classes: List[str] = list(self.meta['classifier']['classes'])
        if self.probs.shape != (len(self.row), len(self.classes)) or self.labels.shape != self.probs.shape:
            raise TagCacheError(
                f'corrupt tag cache {path}: array shapes disagree with meta.json; '
                f'delete {directory} and run {TAG_COMMAND}'
            )
        self.directory = directory

    def lookup(self, split: str, conv_id: str, utterance_idx: int) -> int:
        key = (split, conv_id, int(utterance_idx))
        if key not in self.row:
            raise TagCacheError(
                f'utterance {key} is not in tag cache {self.directory}: it was built from other ED data; '
                f'run {TAG_COMMAND} on this data'
            )
        return self.row[key]

    def label_names(self, row: int) -> List[str]:
        return [self.classes[i] for i in np.flatnonzero(self.labels[row])]

    def top_k(self, row: int, k: int) -> List[str]:
        return [self.classes[i] for i in np.argsort(-self.probs[row], kind='stable')[:k]]
