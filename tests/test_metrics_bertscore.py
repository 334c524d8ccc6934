"""BERTScore through bert-score with a tiny random BERT built in a tmp dir (fast, offline)."""

import os

import pytest
import torch

from parlai_empathy.metrics.bertscore import BertScore, BertScoreConfig, get_scorer

WORDS = ['i', 'am', 'so', 'sorry', 'to', 'hear', 'that', 'great', 'news', 'what', 'happened', '.', '!', '?']


@pytest.fixture(scope='module')
def tiny_bert_dir(tmp_path_factory):
    from transformers import BertConfig, BertModel, BertTokenizer

    folder = tmp_path_factory.mktemp('tiny_bert')
    vocab = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'] + WORDS
    (folder / 'vocab.txt').write_text('\n'.join(vocab) + '\n', encoding='utf-8')
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(folder)
    # transformers 5 ignores vocab_file= here: the vocabulary is passed as a mapping
    BertTokenizer(vocab={w: i for i, w in enumerate(vocab)}, model_max_length=64).save_pretrained(folder)
    return str(folder)


def test_identical_response_scores_one_and_describe_names_model_and_layer(tiny_bert_dir):
    scorer = BertScore(BertScoreConfig(model=tiny_bert_dir, num_layers=2, batch_size=4))
    golds = ['i am so sorry to hear that .', 'great news !', 'what happened ?']
    f1 = scorer.f1(['i am so sorry to hear that .', 'what happened ?', 'great news !'], golds)
    assert f1[0] == pytest.approx(1.0, abs=1e-5)
    assert all(-1 < f < 1 - 1e-4 for f in f1[1:])
    text = scorer.describe()
    assert f'model={tiny_bert_dir}' in text and 'layer=2' in text and 'rescale=no' in text


def independent_bertscore_f1(folder, layer, response, gold):
    """BERTScore F1 by hand: greedy cosine matching of layer-``layer`` token vectors.

    As in bert-score with idf off: every word piece except [CLS]/[SEP] is averaged with weight 1,
    and its best match may be any token of the other sentence, [CLS]/[SEP] included.
    """
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder)
    model.eval()

    def vectors(text):
        ids = tokenizer(text, return_tensors='pt')
        with torch.no_grad():
            hidden = model(**ids, output_hidden_states=True).hidden_states[layer][0]
        return torch.nn.functional.normalize(hidden, dim=-1)

    sim = vectors(response) @ vectors(gold).T
    precision = sim.max(dim=1).values[1:-1].mean()
    recall = sim.max(dim=0).values[1:-1].mean()
    return float(2 * precision * recall / (precision + recall))


def test_matches_an_independent_computation(tiny_bert_dir):
    response, gold = 'so sorry to hear that !', 'i am sorry . what happened ?'
    ours = BertScore(BertScoreConfig(model=tiny_bert_dir, num_layers=2)).f1([response], [gold])[0]
    assert ours == pytest.approx(independent_bertscore_f1(tiny_bert_dir, 2, response, gold), abs=1e-5)


def test_layer_changes_the_score_and_scores_do_not_depend_on_batching(tiny_bert_dir):
    pairs = (['i am sorry .', 'great !', 'so sorry to hear that'], ['sorry to hear that', 'great news', 'what ?'])
    layer1 = BertScore(BertScoreConfig(model=tiny_bert_dir, num_layers=1)).f1(*pairs)
    layer3 = BertScore(BertScoreConfig(model=tiny_bert_dir, num_layers=3, batch_size=1)).f1(*pairs)
    layer3_batched = BertScore(BertScoreConfig(model=tiny_bert_dir, num_layers=3, batch_size=8)).f1(*pairs)
    assert layer1 != pytest.approx(layer3, abs=1e-4)
    assert layer3 == pytest.approx(layer3_batched, abs=1e-5)


def test_local_directory_needs_an_explicit_layer(tiny_bert_dir, tmp_path):
    with pytest.raises(ValueError, match='give the layer explicitly'):
        BertScore(BertScoreConfig(model=tiny_bert_dir))
    with pytest.raises(FileNotFoundError, match='no config.json'):
        BertScore(BertScoreConfig(model=str(tmp_path), num_layers=1))


def test_default_is_bert_scores_english_model():
    config = BertScoreConfig()
    assert (config.model, config.layer()) == ('roberta-large', 17)


def test_get_scorer_loads_once(tiny_bert_dir):
    config = BertScoreConfig(model=tiny_bert_dir, num_layers=1)
    assert get_scorer(config) is get_scorer(config)
    assert os.path.isdir(tiny_bert_dir)


def test_empty_response_scores_zero_instead_of_crashing(tiny_bert_dir):
    scorer = BertScore(BertScoreConfig(model=tiny_bert_dir, num_layers=2, batch_size=4))
    f1 = scorer.f1(['', 'great news !', '   '], ['what happened ?', 'great news !', 'so sorry .'])
    assert f1[0] == 0.0 and f1[2] == 0.0
    assert f1[1] == pytest.approx(1.0, abs=1e-5)


def test_a_local_path_containing_t5_still_loads_as_bert(tiny_bert_dir, tmp_path):
    """bert-score chooses T5EncoderModel for any name containing "t5" (e.g. /tmp/tiny_bert5)."""
    import shutil

    unlucky = tmp_path / 'models_t5_folder'
    shutil.copytree(tiny_bert_dir, unlucky)
    scorer = BertScore(BertScoreConfig(model=str(unlucky), num_layers=2, batch_size=4))
    assert scorer.f1(['great news !'], ['great news !'])[0] == pytest.approx(1.0, abs=1e-5)
    assert f'model={unlucky}' in scorer.describe()
