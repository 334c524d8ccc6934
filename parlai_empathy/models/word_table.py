"""Word tables built offline for a model's dictionary: substitutes for the papers' 300-d GloVe.

The papers start their word tables from 300-d GloVe (6B for MIME and MoEL, 840B for ETHREED);
offline there is only GloVe 6B 50d, which ``glove.fit_to_dim`` pads to the model's width with
random columns. This module builds a table as wide as the model from what is installed:

* ``distill``: each word of the dictionary encoded alone by a sentence encoder (``[CLS] word
  [SEP]``, the last layer mean-pooled over the word's own pieces), reduced to ``dim`` columns by
  PCA: the model2vec recipe for static vectors;
* ``glove_distill``: GloVe 50d's own columns first, the rest from that distillation;
* ``glove_orthogonal``: the GloVe 50d vectors mapped by a fixed random orthogonal map to ``dim``
  columns, a control with GloVe's information and no column left random.

Every table is scaled so that its mean row length over the words it covers is the mean length
of the GloVe 50d vectors of the same dictionary (``glove_distill``: each of its two parts is, and
the row is divided by sqrt(2), which leaves it within about 1 % of that length): the padded
table has that length (its random columns are small), so the candidates differ from it in
content, not in scale (the projects' diagnostics showed the scale alone moves the perplexity).

The table is a folder (``glove.read_word_table`` reads it; ``--glove-path FOLDER`` gives it to
the generators): ``vectors.npy`` (float32, one row per word, never pickled), ``words.txt`` (one
word a line, the dictionary's spelling) and ``word_table.json`` (how it was built, with the
sha256 of both files, checked on every load). Words the table lacks (the dictionary's special
tokens; for the GloVe methods, words GloVe lacks) start as the padded table's missing words do.
Building is deterministic for one machine, torch version and thread count: rows in dictionary
order, no sampling but the orthogonal map's seeded draw, and PCA signs fixed. Another thread count
splits the encoder's sums otherwise, which moves values by float32 rounding (at most 4e-7 seen on
MIME's dictionary) and so the table's sha256.
"""

import json
import os
import shutil
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from parlai_empathy.data.file_errors import DataFileError, decode_line, read_lines
from parlai_empathy.files.cache_lock import build_lock, temporary_name
from parlai_empathy.models import glove
from parlai_empathy.models.glove import sha256_file

METHODS = ('distill', 'glove_distill', 'glove_orthogonal')
DISTILLING = ('distill', 'glove_distill')
# ParlAI writes its four special tokens first in every dictionary; they are no words to encode
SPECIAL_TOKENS = ('__null__', '__start__', '__end__', '__unk__')
DICT_FIELDS = ('token', 'count')


def read_dictionary(path) -> List[str]:
    """The tokens of a ParlAI dictionary file (``token<TAB>count`` a line, as ParlAI saves one),
    in its order. Anything else (a line without its count, a count that is not a whole number, an
    empty or repeated token, bytes that are not UTF-8) is an error naming the file, line and field:
    ParlAI's own loader skips such lines silently, which would shift every later word's id."""
    tokens, seen = [], {}
    for line_no, raw in read_lines(path, 'ParlAI dictionary'):
        text = decode_line(raw, path, line_no, b'\t', DICT_FIELDS).rstrip('\r\n')
        fields = text.split('\t')
        if len(fields) != 2:
            raise DataFileError(path, line_no, None, f'{len(fields)} tab-separated fields, expected 2 (token, count)')
        token, count = fields
        if not token:
            raise DataFileError(path, line_no, 'token', 'empty token')
        if not count.isdigit():
            raise DataFileError(path, line_no, 'count', f'{count!r} is not a non-negative whole number')
        token = token.replace('\\n', '\n').replace('\\t', '\t').replace('\\r', '\r')  # ParlAI's escapes
        if token in seen:
            raise DataFileError(path, line_no, 'token', f'{token!r} again (first on line {seen[token]})')
        seen[token] = line_no
        tokens.append(token)
    if not tokens:
        raise DataFileError(path, None, None, 'no tokens: not a ParlAI dictionary')
    return tokens


def encode_words(words: Sequence[str], encoder_dir: str, batch_size: int = 256) -> np.ndarray:
    """``[len(words), hidden]`` float32: each word encoded alone, mean of its pieces' last-layer
    states (the encoder's [CLS]/[SEP] left out: they would pull every short word to one point).
    Batches hold words of one piece count, taken in a fixed order, so no padding enters a state."""
    from transformers import AutoModel, AutoTokenizer  # only the distilling methods need it

    tokenizer = AutoTokenizer.from_pretrained(encoder_dir)
    model = AutoModel.from_pretrained(encoder_dir).eval()
    ids = [tokenizer(word, add_special_tokens=True)['input_ids'] for word in words]
    out = np.zeros((len(words), model.config.hidden_size), dtype=np.float32)
    by_length: Dict[int, List[int]] = {}
    for row, pieces in enumerate(ids):
        by_length.setdefault(len(pieces), []).append(row)
    with torch.inference_mode():
        for length in sorted(by_length):
            rows = by_length[length]
            for start in range(0, len(rows), batch_size):
                chunk = rows[start : start + batch_size]
                batch = torch.tensor([ids[row] for row in chunk])
                states = model(input_ids=batch, attention_mask=torch.ones_like(batch)).last_hidden_state
                inner = states[:, 1:-1] if length > 2 else states  # a word with no piece: keep what there is
                out[chunk] = inner.mean(dim=1).float().numpy()
    return out


def pca(matrix: np.ndarray, dim: int) -> np.ndarray:
    """The rows of ``matrix`` on its first ``dim`` principal axes (float64 SVD of the centred
    rows); each axis's sign is fixed so that its largest loading is positive, so a rebuild gives
    the same table."""
    if dim > min(matrix.shape):
        raise ValueError(f'cannot reduce {matrix.shape[0]} vectors of {matrix.shape[1]} dims to {dim} columns')
    centred = matrix.astype(np.float64) - matrix.mean(axis=0, dtype=np.float64)
    _, _, axes = np.linalg.svd(centred, full_matrices=False)
    axes = axes[:dim]
    signs = np.sign(axes[np.arange(dim), np.abs(axes).argmax(axis=1)])
    return centred @ (axes * signs[:, None]).T


def orthogonal_map(rows: int, cols: int, seed: int) -> np.ndarray:
    """``[rows, cols]`` with orthonormal columns (``rows >= cols``) from a seeded Gaussian's QR,
    signs fixed by R's diagonal (the Haar-uniform draw)."""
    gauss = np.random.default_rng(seed).standard_normal((rows, cols))
    q, r = np.linalg.qr(gauss)
    return q * np.sign(np.diag(r))


def mean_norm(matrix: np.ndarray) -> float:
    return float(np.linalg.norm(matrix.astype(np.float64), axis=1).mean())


def _scaled(matrix: np.ndarray, target: float) -> np.ndarray:
    return matrix * (target / mean_norm(matrix))


def build_vectors(
    words: Sequence[str], method: str, dim: int, encoder_dir: Optional[str] = None, seed: int = 0, batch_size: int = 256
) -> Tuple[List[str], np.ndarray, dict]:
    """``(covered words, [len(covered), dim] float32, facts for the table's json)``."""
    if method not in METHODS:
        raise ValueError(f'method must be one of {", ".join(METHODS)}, not {method!r}')
    candidates = [word for word in words if word not in SPECIAL_TOKENS]
    gmatrix, ghit = glove.load_glove(candidates)  # the offline 50-d vectors: the scale, and two methods' content
    gdim = gmatrix.shape[1]
    if not ghit.any():
        raise ValueError('no word of the dictionary is in GloVe 6B 50d: is it a dictionary of words?')
    gfound = gmatrix[ghit].numpy().astype(np.float64)
    target = mean_norm(gfound)
    facts = {'glove_dim': gdim, 'glove_words': int(ghit.sum()), 'mean_row_norm': round(target, 6)}
    if method == 'glove_orthogonal':
        if dim < gdim:
            raise ValueError(f"--dim {dim} is below GloVe's {gdim}: an orthogonal map cannot widen to it")
        covered = [word for word, hit in zip(candidates, ghit.tolist()) if hit]
        table = gfound @ orthogonal_map(dim, gdim, seed).T  # keeps every length and angle
        facts['seed'] = seed
        return covered, table.astype(np.float32), facts
    if encoder_dir is None:
        raise ValueError(f'method {method} needs an encoder folder')
    encoded = encode_words(candidates, encoder_dir, batch_size)
    if method == 'distill':
        return candidates, _scaled(pca(encoded, dim), target).astype(np.float32), facts
    if dim <= gdim:
        raise ValueError(f"--dim {dim} leaves no column beyond GloVe's {gdim} to fill")
    covered = [word for word, hit in zip(candidates, ghit.tolist()) if hit]
    rest = _scaled(pca(encoded, dim - gdim)[ghit.numpy()], target)
    # both parts as long as GloVe, then the row back to GloVe's length: GloVe's columns keep
    # their content up to one constant factor
    table = np.concatenate([gfound, rest], axis=1) / np.sqrt(2.0)
    return covered, table.astype(np.float32), facts


def write_table(folder: str, words: Sequence[str], vectors: np.ndarray, meta: dict) -> None:
    """The table's three files, into a temporary folder renamed into place (a killed build
    leaves no table behind)."""
    tmp = temporary_name(folder)
    os.makedirs(tmp)
    try:
        np.save(
            os.path.join(tmp, glove.TABLE_VECTORS), np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False
        )
        with open(os.path.join(tmp, glove.TABLE_WORDS), 'w', encoding='utf-8', newline='\n') as handle:
            handle.writelines(word + '\n' for word in words)
        meta = dict(
            meta,
            format=glove.TABLE_FORMAT,
            words=len(words),
            dim=int(vectors.shape[1]),
            sha256={name: sha256_file(os.path.join(tmp, name)) for name in (glove.TABLE_VECTORS, glove.TABLE_WORDS)},
        )
        with open(os.path.join(tmp, glove.TABLE_META), 'w', encoding='utf-8') as handle:
            json.dump(meta, handle, indent=1, sort_keys=True)
            handle.write('\n')
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build(
    dict_file: str,
    method: str,
    out: str,
    dim: int = 300,
    encoder: Optional[str] = None,
    encoder_dir: Optional[str] = None,
    seed: int = 0,
    batch_size: int = 256,
) -> Tuple[str, bool]:
    """Build (or reuse) the table of ``dict_file`` in the folder ``out``; returns ``(out, built)``.

    A table already in ``out`` is reused when it was built the same way from the same dictionary
    and its files match their sha256; one built otherwise is an error (``out`` names one table)."""
    words = read_dictionary(dict_file)
    recipe = {
        'method': method,
        'dim': dim,
        'dictionary_sha256': sha256_file(dict_file),
        'encoder': encoder if method in DISTILLING else None,
        'seed': seed if method == 'glove_orthogonal' else None,
    }
    with build_lock(out, f'building the word table {out}'):
        if os.path.exists(out):
            meta = glove.check_word_table(out)
            differs = sorted(key for key, value in recipe.items() if meta.get('recipe', {}).get(key) != value)
            if differs:
                raise ValueError(
                    f'{out} holds a word table built otherwise ({", ".join(differs)} differ): '
                    'pass another --out, or delete that folder'
                )
            return out, False
        covered, vectors, facts = build_vectors(words, method, dim, encoder_dir, seed, batch_size)
        meta = {
            'recipe': recipe,
            'dictionary': os.path.abspath(dict_file),
            'dictionary_words': len(words),
            'facts': facts,
            'torch': torch.__version__,
            'numpy': np.__version__,
        }
        if encoder_dir is not None and method in DISTILLING:
            weights = os.path.join(encoder_dir, 'model.safetensors')
            meta['encoder_weights_sha256'] = sha256_file(weights) if os.path.isfile(weights) else None
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        write_table(out, covered, vectors, meta)
    return out, True
