"""GloVe loading on the real GloVe 6B 50d vectors, and the embedding modules built on it."""

import numpy as np
import pytest
import torch

from parlai_empathy.models import glove
from parlai_empathy.models.embeddings import DialogueEmbedding, WordEmbedding


@pytest.fixture(scope='module')
def real_vectors():
    vocab = ['__null__', 'the', 'happy', 'Happy', 'sad', 'qzxqzxnotaword']
    return vocab, glove.load_glove(vocab)


def test_real_50d_vectors_for_a_few_words(real_vectors):
    vocab, (matrix, hit) = real_vectors
    assert matrix.shape == (6, 50)
    assert hit.tolist() == [False, True, True, True, True, False]
    # the published first values of GloVe 6B 50d 'the'
    assert np.allclose(matrix[1, :3].numpy(), [0.418, 0.24968, -0.41242], atol=1e-5)
    assert torch.equal(matrix[2], matrix[3])  # 'Happy' falls back to lower case
    assert torch.nn.functional.cosine_similarity(matrix[2], matrix[4], dim=0) > 0.5
    assert matrix[5].abs().sum() == 0


def test_text_file_source_matches_the_package(tmp_path, real_vectors):
    vocab, (matrix, _) = real_vectors
    path = tmp_path / 'glove.txt'
    lines = [w + ' ' + ' '.join(f'{v:.6f}' for v in matrix[i].tolist()) for i, w in enumerate(vocab[1:3], 1)]
    path.write_text('\n'.join(['unused ' + ' '.join(['0.5'] * 50)] + lines) + '\n')
    from_text, hit = glove.load_glove(['the', 'happy', 'HAPPY', 'nope'], str(path))
    assert hit.tolist() == [True, True, True, False]
    assert torch.allclose(from_text[0], matrix[1], atol=1e-5)
    bad = tmp_path / 'bad.txt'
    bad.write_text('a 1 2 3\nthe 1 2\n')
    with pytest.raises(ValueError, match='bad.txt:2'):
        glove.load_glove(['the'], str(bad))


def test_dimension_fitting_modes():
    words = ['__null__', 'the', 'happy', 'qzxqzxnotaword']
    projected, rate = WordEmbedding.from_glove(words, d_model=300, glove_fit='project')
    assert rate == 0.5 and projected.table.weight.shape == (4, 50)
    assert projected(torch.tensor([[1, 2]])).shape == (1, 2, 300)
    padded, _ = WordEmbedding.from_glove(words, d_model=300, glove_fit='pad')
    assert padded.table.weight.shape == (4, 300) and padded.proj is None
    assert torch.allclose(padded.table.weight[1, :50], projected.table.weight[1])
    assert padded.table.weight[0].abs().sum() == 0  # padding row stays zero
    with pytest.raises(ValueError, match='glove_fit'):
        WordEmbedding.from_glove(words, d_model=300, glove_fit='stretch')


def test_pad_fill_std_scales_only_the_random_values_and_keeps_the_draws():
    """``fill_std`` (``--glove-fill-std``): the values GloVe does not give (a missing word's row,
    the columns beyond GloVe's 50) are drawn at that std; the found vectors stay as they are, and
    the draws are the same ones, so a seed gives the same other initial weights for every choice."""
    words = ['__null__', 'the', 'happy', 'qzxqzxnotaword']
    matrix, hit = glove.load_glove(words)
    found_std = float(matrix[hit].std())
    tables, after = {}, {}
    for fill in (None, 0.01):
        torch.manual_seed(0)
        tables[fill] = WordEmbedding.from_glove(words, d_model=300, glove_fit='pad', fill_std=fill)[0].table.weight
        after[fill] = torch.rand(3)  # the global generator's state after building the table
    default, small = tables[None], tables[0.01]
    assert torch.equal(after[None], after[0.01])
    assert torch.equal(small[1:3, :50], matrix[1:3]) and torch.equal(default[1:3, :50], matrix[1:3])
    assert torch.allclose(small[3] * (found_std / 0.01), default[3], rtol=1e-5, atol=1e-6)
    assert torch.allclose(small[1:3, 50:] * (found_std / 0.01), default[1:3, 50:], rtol=1e-5, atol=1e-6)
    assert 0.005 < float(small[1:, 50:].std()) < 0.02 and float(default[1:, 50:].std()) > 0.3
    assert small[0].abs().sum() == 0
    with pytest.raises(ValueError, match='fill_std'):
        WordEmbedding.from_glove(words, d_model=300, glove_fit='pad', fill_std=-1.0)


def test_dialogue_embedding_sums_word_and_speaker():
    words = WordEmbedding(10, 8)
    embed = DialogueEmbedding(words, prepend_ctx=True)
    tokens = torch.tensor([[4, 5, 0]])
    x, keep = embed(tokens, torch.tensor([[0, 1, 0]]))
    assert x.shape == (1, 4, 8) and keep.tolist() == [[True, True, True, False]]
    x_other, _ = embed(tokens, torch.tensor([[1, 1, 0]]))
    assert not torch.allclose(x[0, 1], x_other[0, 1]) and torch.allclose(x[0, 2], x_other[0, 2])


NOT_THE_PAPERS = "the word table is not the paper's"
TINY_MIME = [
    '-m',
    'empathy/mime',
    '--embedding-size',
    64,
    '--attention-size',
    16,
    '--ffn-size',
    32,
    '--latent-size',
    16,
    '--n-heads',
    2,
]
TINY_ETHREED = ['-m', 'empathy/ethreed', '--embedding-size', 16, '--hidden-size', 16, '--listener-emotions', 'none']


def _train_log(run_parlai, folder, *args):
    # one update: the schedule's end is then validated at the run's first update (the project's training loop)
    done = run_parlai(
        'train_model',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-mf',
        folder / 'model',
        '-bs',
        4,
        '--max-train-steps',
        1,
        '-vme',
        4,
        '--short-final-eval',
        'true',
        '--skip-generation',
        'true',
        '--dict-maxtokens',
        500,
        *args,
    )
    return done.stdout + done.stderr


@pytest.mark.parametrize(
    'model, paper_file, fit',
    [
        (TINY_MIME, 'glove.6B.300d.txt', 'padded to the 64-d embedding: 14 of its 64 columns start random'),
        (TINY_ETHREED, 'glove.840B.300d.txt', 'cut to the 16-d embedding'),
    ],
)
def test_a_word_table_from_other_vectors_than_the_papers_is_one_start_up_warning(
    run_parlai, tmp_path, model, paper_file, fit
):
    log = _train_log(run_parlai, tmp_path, *model)
    lines = [line for line in log.splitlines() if NOT_THE_PAPERS in line]
    assert len(lines) == 1, log[-4000:]  # once, though train_model builds the agent again to report
    line = lines[0]
    assert 'WARNING' in line and glove.NPY_NAME in line and '50-d vectors' in line, line
    assert f'{paper_file}' in line and f'--glove-path /path/to/{paper_file}' in line, line
    assert fit in line, line


def test_no_warning_with_300d_vectors_or_without_glove(run_parlai, tmp_path):
    path = tmp_path / 'glove.300d.txt'
    rng = np.random.default_rng(0)
    path.write_text(
        ''.join(
            f'{word} ' + ' '.join(f'{v:.4f}' for v in rng.normal(size=300)) + '\n'
            for word in ['the', 'i', 'my', 'was', 'so', 'happy', 'sad', '.', ',']
        )
    )
    log = _train_log(run_parlai, tmp_path / 'a', *TINY_MIME, '--glove-path', path)
    assert 'GloVe init' in log and NOT_THE_PAPERS not in log
    log = _train_log(run_parlai, tmp_path / 'b', *TINY_MIME, '--glove-init', 'false')
    assert 'GloVe init' not in log and NOT_THE_PAPERS not in log
