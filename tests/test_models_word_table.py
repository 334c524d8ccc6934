"""Word tables built offline (``models/word_table.py``) and read back by ``glove.load_glove``:
each method on a small real dictionary (GloVe 6B 50d and all-MiniLM-L6-v2 from PyPI), the
rebuild giving the same bytes, and hostile dictionaries and tables refused with one line naming
the file, line and field."""

import json
import os

import numpy as np
import pytest
import torch

from parlai_empathy.data.file_errors import DataFileError
from parlai_empathy.files.offline_models import minilm_dir
from parlai_empathy.models import glove, word_table
from parlai_empathy.models.embeddings import WordEmbedding

WORDS = [
    'happy',
    'sad',
    'glad',
    'dog',
    'puppy',
    'cat',
    'exam',
    'test',
    'terrified',
    'scared',
    'the',
    'a',
    'car',
    'bike',
    'mom',
    'dad',
    'qzxqzxnotaword',
    'won',
    'lost',
    'birthday',
    'party',
    'rain',
    'sun',
]


DIM = 60  # wider than GloVe's 50, below the dictionary's word count (PCA's limit)


def dictionary_words():
    """WORDS, then GloVe's most frequent entries (so that PCA has more words than columns)."""
    import pandas as pd

    index = pd.read_parquet(glove._kumo_paths()[1]).iloc[:400, 0].tolist()
    return WORDS + [w for w in index if w not in WORDS and '\t' not in w and w.strip() == w and w][:200]


def write_dict(path, words):
    specials = [f'{token}\t{1000000003 - i}' for i, token in enumerate(word_table.SPECIAL_TOKENS)]
    path.write_text('\n'.join(specials + [f'{w}\t{len(words) - i}' for i, w in enumerate(words)]) + '\n')
    return str(path)


@pytest.fixture(scope='module')
def tables(tmp_path_factory):
    root = tmp_path_factory.mktemp('tables')
    dict_file = write_dict(root / 'model.dict', dictionary_words())
    encoder = minilm_dir()
    built = {
        method: word_table.build(
            dict_file, method, str(root / method), dim=DIM, encoder='offline-minilm', encoder_dir=encoder, seed=3
        )[0]
        for method in word_table.METHODS
    }
    return root, dict_file, encoder, built


def table_files(folder):
    return {
        name: open(os.path.join(folder, name), 'rb').read()
        for name in (glove.TABLE_VECTORS, glove.TABLE_WORDS, glove.TABLE_META)
    }


def test_each_method_gives_a_checked_table_at_glove_length(tables):
    root, _, _, built = tables
    vocab = list(word_table.SPECIAL_TOKENS) + dictionary_words()
    gmatrix, ghit = glove.load_glove(vocab)
    glove_norm = gmatrix[ghit].norm(dim=1).mean()
    for method, folder in built.items():
        matrix, hit = glove.load_glove(vocab, folder)
        assert matrix.shape == (len(vocab), DIM)
        assert not hit[:4].any()  # the special tokens are no words
        if method == 'distill':
            assert hit[4:].all()  # every word has pieces, even one GloVe lacks
        else:
            assert torch.equal(hit, ghit)
        # glove_distill: two parts each as long as GloVe, the row divided by sqrt(2): about as long
        rtol = 0.02 if method == 'glove_distill' else 1e-4
        assert torch.isclose(matrix[hit].norm(dim=1).mean(), glove_norm, rtol=rtol)


def test_orthogonal_control_keeps_glove_geometry(tables):
    _, _, _, built = tables
    gmatrix, _ = glove.load_glove(['happy', 'sad', 'dog'])
    matrix, _ = glove.load_glove(['happy', 'sad', 'dog'], built['glove_orthogonal'])
    assert torch.allclose(matrix @ matrix.T, gmatrix @ gmatrix.T, rtol=1e-4, atol=1e-4)


def test_glove_distill_keeps_glove_columns_up_to_one_factor(tables):
    _, _, _, built = tables
    gmatrix, _ = glove.load_glove(['happy', 'dog'])
    matrix, _ = glove.load_glove(['happy', 'dog'], built['glove_distill'])
    assert torch.allclose(matrix[:, :50] * np.sqrt(2.0), gmatrix, atol=1e-5)


def test_distilled_neighbours_are_related_words(tables):
    _, _, _, built = tables
    matrix, _ = glove.load_glove(WORDS, built['distill'])
    unit = torch.nn.functional.normalize(matrix, dim=1)
    nearest = (unit @ unit[WORDS.index('puppy')]).argsort(descending=True)[1].item()
    assert WORDS[nearest] in ('dog', 'cat')


def test_rebuild_is_byte_identical_and_a_built_table_is_reused(tables, tmp_path):
    root, dict_file, encoder, built = tables
    for method in ('distill', 'glove_orthogonal'):
        again, fresh = word_table.build(
            dict_file, method, str(tmp_path / method), dim=DIM, encoder='offline-minilm', encoder_dir=encoder, seed=3
        )
        assert fresh
        first, second = table_files(built[method]), table_files(again)
        assert first[glove.TABLE_VECTORS] == second[glove.TABLE_VECTORS]
        assert first[glove.TABLE_WORDS] == second[glove.TABLE_WORDS]
        assert word_table.build(
            dict_file, method, again, dim=DIM, encoder='offline-minilm', encoder_dir=encoder, seed=3
        ) == (again, False)
    with pytest.raises(ValueError, match='built otherwise .*dim'):
        word_table.build(
            dict_file, 'distill', str(tmp_path / 'distill'), dim=10, encoder='offline-minilm', encoder_dir=encoder
        )


def test_the_table_starts_the_model_word_embedding(tables):
    _, _, _, built = tables
    vocab = ['__null__', 'happy', 'qzxqzxnotaword']
    module, hit_rate = WordEmbedding.from_glove(vocab, DIM, 0, built['glove_orthogonal'], 'pad', fill_std=0.01)
    matrix, _ = glove.load_glove(vocab, built['glove_orthogonal'])
    assert torch.equal(module.weight[1], matrix[1])
    assert module.weight[0].abs().sum() == 0
    assert float(module.weight[2].detach().std()) < 0.05  # GloVe lacks it: the padded table's fill
    assert hit_rate == pytest.approx(1 / 3)


@pytest.fixture
def copied(tables, tmp_path):
    _, _, _, built = tables
    folder = tmp_path / 'copy'
    folder.mkdir()
    for name, data in table_files(built['glove_orthogonal']).items():
        (folder / name).write_bytes(data)
    return folder


def test_a_truncated_table_is_refused_by_its_checksum(copied):
    vectors = copied / glove.TABLE_VECTORS
    vectors.write_bytes(vectors.read_bytes()[:-40])
    with pytest.raises(ValueError, match=r'vectors.npy: sha256 .* \(truncated or changed\); rebuild'):
        glove.load_glove(['happy'], str(copied))


def test_a_changed_word_list_is_refused(copied):
    (copied / glove.TABLE_WORDS).write_text('happy\n' * 5)
    with pytest.raises(ValueError, match='words.txt: sha256'):
        glove.load_glove(['happy'], str(copied))


def rewrite_meta(folder, **changes):
    meta_path = folder / glove.TABLE_META
    meta = json.loads(meta_path.read_text())
    meta.update(changes)
    meta_path.write_text(json.dumps(meta))
    return meta


@pytest.mark.parametrize(
    'change, message',
    [
        ({'sha256': {'vectors.npy': '0' * 64, 'words.txt': '0' * 64}}, 'sha256 .* is not the 0000'),
        ({'sha256': {}}, "field 'sha256' lacks vectors.npy"),
        ({'format': 'something else'}, "field 'format'"),
        ({'dim': 'wide'}, "field 'dim' is not a positive whole number"),
    ],
)
def test_a_wrong_json_field_is_named(copied, change, message):
    rewrite_meta(copied, **change)
    with pytest.raises(ValueError, match=message):
        glove.load_glove(['happy'], str(copied))


def test_corrupt_json_and_missing_files(copied, tmp_path):
    (copied / glove.TABLE_META).write_text('{"format": ')
    with pytest.raises(ValueError, match=r'word_table.json: not JSON'):
        glove.load_glove(['happy'], str(copied))
    with pytest.raises(FileNotFoundError, match='no word_table.json'):
        glove.load_glove(['happy'], str(tmp_path))


def consistent(folder, meta):
    meta['sha256'] = {name: glove.sha256_file(folder / name) for name in (glove.TABLE_VECTORS, glove.TABLE_WORDS)}
    (folder / glove.TABLE_META).write_text(json.dumps(meta))


def test_a_pickled_array_is_never_loaded_even_with_matching_checksums(copied):
    meta = json.loads((copied / glove.TABLE_META).read_text())
    np.save(copied / glove.TABLE_VECTORS, np.array([{'x': 1}] * meta['words'], dtype=object), allow_pickle=True)
    consistent(copied, meta)
    with pytest.raises(ValueError, match='vectors.npy: not a plain array'):
        glove.load_glove(['happy'], str(copied))


def test_shape_dtype_and_line_count_must_match_the_json(copied):
    meta = json.loads((copied / glove.TABLE_META).read_text())
    np.save(copied / glove.TABLE_VECTORS, np.zeros((meta['words'], meta['dim']), dtype=np.float64))
    consistent(copied, meta)
    with pytest.raises(ValueError, match=r'vectors.npy: float64 .* expected float32'):
        glove.load_glove(['happy'], str(copied))
    np.save(copied / glove.TABLE_VECTORS, np.full((meta['words'], meta['dim']), np.nan, dtype=np.float32))
    consistent(copied, meta)
    with pytest.raises(ValueError, match='not finite'):
        glove.load_glove(['happy'], str(copied))
    np.save(copied / glove.TABLE_VECTORS, np.zeros((meta['words'], meta['dim']), dtype=np.float32))
    (copied / glove.TABLE_WORDS).write_text('happy\n')
    consistent(copied, meta)
    with pytest.raises(ValueError, match=f'words.txt: 1 lines, expected {meta["words"]}'):
        glove.load_glove(['happy'], str(copied))


@pytest.mark.parametrize(
    'lines, where',
    [
        (['happy\t3', 'sad'], r'line 2: 1 tab-separated fields, expected 2'),
        (['happy\t3', 'sad\t1\t2'], r'line 2: 3 tab-separated fields'),
        (['happy\t3', 'sad\tmany'], r"line 2, field 'count': 'many' is not"),
        (['happy\t3', '\t4'], r"line 2, field 'token': empty token"),
        (['happy\t3', 'happy\t4'], r"line 2, field 'token': 'happy' again \(first on line 1\)"),
        ([], 'no tokens'),
    ],
)
def test_odd_dictionary_lines_are_named(tmp_path, lines, where):
    path = tmp_path / 'odd.dict'
    path.write_text(''.join(line + '\n' for line in lines))
    with pytest.raises(DataFileError, match=('odd.dict, ' if lines else 'odd.dict: ') + where):
        word_table.read_dictionary(str(path))


def test_dictionary_bytes_that_are_not_utf8(tmp_path):
    path = tmp_path / 'latin.dict'
    path.write_bytes(b'happy\t3\ncaf\xe9\t2\n')
    with pytest.raises(DataFileError, match=r"latin.dict, line 2, field 'token': not UTF-8"):
        word_table.read_dictionary(str(path))


def test_dictionary_keeps_parlai_escapes(tmp_path):
    path = tmp_path / 'esc.dict'
    path.write_text('a\\tb\t3\nhappy\t1\n')
    assert word_table.read_dictionary(str(path)) == ['a\tb', 'happy']


def test_methods_refuse_widths_they_cannot_give(tables, tmp_path):
    _, dict_file, encoder, _ = tables
    with pytest.raises(ValueError, match='below GloVe'):
        word_table.build(dict_file, 'glove_orthogonal', str(tmp_path / 'o'), dim=40)
    with pytest.raises(ValueError, match='no column beyond'):
        word_table.build(
            dict_file, 'glove_distill', str(tmp_path / 'g'), dim=50, encoder='offline-minilm', encoder_dir=encoder
        )
    with pytest.raises(ValueError, match='method must be one of'):
        word_table.build(dict_file, 'random', str(tmp_path / 'r'))
    assert not os.path.exists(tmp_path / 'o') and not os.path.exists(tmp_path / 'g')
