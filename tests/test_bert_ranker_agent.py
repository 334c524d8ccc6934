"""The agent in-process: vectorization, fixed candidates and the never-stale encoding cache."""

import os

import pytest
import torch

from bert_ranker_tiny import build_tiny_bert
from parlai_empathy.data import response_pool

AGENT = 'parlai_empathy.agents.bert_ranker:BertRankerAgent'


@pytest.fixture(scope='module')
def tiny_bert(tmp_path_factory, ed_dir):
    return build_tiny_bert(str(tmp_path_factory.mktemp('tiny_bert')), os.path.join(ed_dir, 'train.csv'))


@pytest.fixture(scope='module')
def pool_file(tmp_path_factory):
    responses = response_pool.listener_responses(response_pool.train_csv_path('sample'))
    return response_pool.write_pool(responses, str(tmp_path_factory.mktemp('pool') / 'pool.cands'))


def make_agent(*args):
    from parlai.core.agents import create_agent
    from parlai.core.params import ParlaiParser

    parser = ParlaiParser(True, True)
    opt = parser.parse_args(['-m', AGENT] + [str(a) for a in args])
    return create_agent(opt)


@pytest.mark.parametrize('specials', [False, True])
def test_labels_inline_and_fixed_candidates_are_vectorized_alike(tiny_bert, pool_file, tmp_path, specials):
    agent = make_agent(
        '--bert-model',
        tiny_bert,
        '-mf',
        tmp_path / 'm',
        '--eval-candidates',
        'fixed',
        '--fixed-candidates-path',
        pool_file,
        '--add-special-tokens',
        specials,
    )
    label = agent.fixed_candidates[3]
    obs = agent.observe({'text': 'I lost my job.', 'eval_labels': [label], 'episode_done': True})
    vec = obs['eval_labels_vec']
    assert torch.equal(vec[1:-1] if specials else vec, torch.LongTensor(agent.dict.txt2vec(label)))
    # [CLS] ... [SEP] on request; the reference adds neither
    assert (vec[0] == agent.START_IDX and vec[-1] == agent.END_IDX) == specials
    inline = agent._vectorize_text(label, True, True, agent.label_truncate, False)  # as inline cands
    assert torch.equal(inline, vec)
    row = agent.fixed_candidate_vecs[3]
    assert torch.equal(row[: len(vec)], vec) and (row[len(vec) :] == agent.NULL_IDX).all()
    reply = agent.act()
    assert reply['text'] in agent.fixed_candidates
    assert 'rank' in reply['metrics']  # the label was found among the fixed candidates


def test_context_is_the_last_four_turns_joined_by_the_separator_keeping_the_first_100_pieces(tiny_bert, tmp_path):
    """The reference: turns joined by [unused1], no [CLS]/[SEP], the first 100 word pieces kept."""
    agent = make_agent('--bert-model', tiny_bert, '-mf', tmp_path / 'm')
    separator = agent.dict.tok2ind['[unused1]']
    utterances = [f'utterance number {i} is here' for i in range(6)]
    obs = agent.observe(
        {'text': utterances[-1], 'context_utterances': utterances, 'eval_labels': ['ok'], 'episode_done': True}
    )
    assert 'utterance number 1 ' not in obs['full_text'] and obs['full_text'].startswith('utterance number 2')
    turns = [agent.dict.txt2vec(u) for u in utterances[2:]]
    expected = turns[0] + sum(([separator] + t for t in turns[1:]), [])
    assert obs['text_vec'].tolist() == expected
    agent.reset()
    long_context = [' '.join(['sad'] * 80), 'it ' + ' '.join(['happy'] * 80)]
    long_obs = agent.observe(
        {
            'text': long_context[-1],
            'context_utterances': long_context,
            'eval_labels': ['so ' * 300],
            'episode_done': True,
        }
    )
    kept = long_obs['text_vec'].tolist()
    assert len(kept) == 100 and kept[:80] == agent.dict.txt2vec(long_context[0]) and kept[80] == separator
    assert long_obs['eval_labels_vec'].tolist() == agent.dict.txt2vec('so ' * 300)[:100]


def test_our_recipe_keeps_the_last_100_pieces_in_cls_and_sep(tiny_bert, tmp_path):
    agent = make_agent(
        '--bert-model',
        tiny_bert,
        '-mf',
        tmp_path / 'm',
        '--add-special-tokens',
        'true',
        '--truncate-side',
        'left',
        '--turn-separator',
        'none',
    )
    utterances = ['sad ' * 80, 'it happy ' + 'happy ' * 80]
    long_obs = agent.observe(
        {'text': utterances[-1], 'context_utterances': utterances, 'eval_labels': ['so ' * 300], 'episode_done': True}
    )
    vec = long_obs['text_vec'].tolist()
    assert len(vec) == 100 and vec[0] == agent.START_IDX and vec[-1] == agent.END_IDX
    assert vec[1:-1] == agent.dict.txt2vec('\n'.join(utterances))[-98:]  # the most recent pieces
    assert len(long_obs['eval_labels_vec']) == 100 and long_obs['eval_labels_vec'][-1] == agent.END_IDX


def test_a_separator_outside_the_vocabulary_is_a_clear_error(tiny_bert, tmp_path):
    with pytest.raises(ValueError, match='not a token of the vocabulary'):
        make_agent('--bert-model', tiny_bert, '-mf', tmp_path / 'm', '--turn-separator', '<SOC>')


def test_a_saved_model_keeps_the_behaviour_of_its_own_options(tiny_bert, tmp_path):
    """Options other than the reference's defaults (the CPU recipe's) come back from the saved
    model's options; no migration table is needed: every committed ranker run saved them."""
    model_file = tmp_path / 'old'
    ours = [
        '--add-special-tokens',
        'true',
        '--truncate-side',
        'left',
        '--turn-separator',
        'none',
        '--freeze-word-embeddings',
        'false',
        '--projection-dim',
        0,
    ]
    make_agent('--bert-model', tiny_bert, '-mf', model_file, *ours).save()
    loaded = make_agent('-mf', model_file)
    assert [loaded.opt[k] for k in ('add_special_tokens', 'truncate_side', 'turn_separator')] == [True, 'left', 'none']
    obs = loaded.observe({'text': 'b', 'context_utterances': ['a', 'b'], 'eval_labels': ['ok'], 'episode_done': True})
    assert obs['text_vec'][0] == loaded.START_IDX and obs['text_vec'][-1] == loaded.END_IDX
    assert obs['text_vec'][1:-1].tolist() == loaded.dict.txt2vec('a\nb')


def test_word_embeddings_are_frozen_by_default_and_left_out_of_the_optimizer(tiny_bert, tmp_path):
    agent = make_agent('--bert-model', tiny_bert, '-mf', tmp_path / 'm')
    frozen = agent.bi_encoder.word_embeddings()
    assert len(frozen) == 2 and not any(t.requires_grad for t in frozen)
    optimized = {id(p) for group in agent.optimizer.param_groups for p in group['params']}
    assert not optimized & {id(t) for t in frozen}
    assert type(agent.optimizer).__name__ == 'Adamax' and agent.optimizer.param_groups[0]['lr'] == 1e-5
    trainable = make_agent('--bert-model', tiny_bert, '-mf', tmp_path / 'm2', '--freeze-word-embeddings', 'false')
    assert all(t.requires_grad for t in trainable.bi_encoder.word_embeddings())


def test_negatives_chunk_trains_with_the_same_loss_and_gradients_through_parlai(tiny_bert, tmp_path):
    """ParlAI's own train_step, with and without the gradient cache, on one batch of 8 (dropout off)."""
    from parlai_empathy.data import ed_episodes
    from parlai_empathy.data.ed_raw import read_clean

    conversations, _ = read_clean(os.path.join(os.path.dirname(response_pool.train_csv_path('sample')), 'valid.csv'))
    examples = [e for ep in ed_episodes.build_episodes(conversations[:6], both_sides=False) for e in ep][:8]
    grads, losses = {}, {}
    for chunk in (0, 3):
        torch.manual_seed(0)
        agent = make_agent(
            '--bert-model', tiny_bert, '-mf', tmp_path / f'm{chunk}', '-bs', 8, '--negatives-chunk', chunk
        )
        for module in agent.bi_encoder.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        agent.update_params = lambda: None  # keep the gradients to compare them
        cached_batches = []
        encode_for_cache = agent.bi_encoder.gradient_cached
        agent.bi_encoder.gradient_cached = lambda *a, batches=cached_batches, encode=encode_for_cache: (
            batches.append(1) or encode(*a)
        )
        observations = []
        for e in examples:
            observations.append(
                agent.observe(
                    {
                        'text': e.context_utterances[-1],
                        'labels': [e.label],
                        'context_utterances': e.context_utterances,
                        'episode_done': True,
                    }
                )
            )
            agent.reset()
        batch = agent.batchify(observations)
        agent.train_step(batch)
        losses[chunk] = agent._local_metrics['mean_loss']
        grads[chunk] = {n: p.grad.clone() for n, p in agent.bi_encoder.named_parameters() if p.grad is not None}
        assert agent._gradient_cache is None and len(cached_batches) == (1 if chunk else 0)
    for a, b in zip(losses[0], losses[3]):
        assert a.value() == pytest.approx(b.value(), abs=1e-5)
    assert grads[0].keys() == grads[3].keys() and grads[0]
    for name, grad in grads[3].items():
        assert torch.allclose(grad, grads[0][name], atol=1e-5), name


@pytest.mark.parametrize('separator', ['[unused1]', 'none'])
def test_interactive_context_comes_from_the_dialogue_history_tokenized_once(tiny_bert, tmp_path, pool_file, separator):
    agent = make_agent(
        '--bert-model',
        tiny_bert,
        '-mf',
        tmp_path / 'm',
        '--eval-candidates',
        'fixed',
        '--fixed-candidates-path',
        pool_file,
        '--interactive-mode',
        'true',
        '--turn-separator',
        separator,
    )
    agent.observe({'text': 'my dog died last week', 'episode_done': False})
    first_reply = agent.act()['text']
    turns = ['my dog died last week', first_reply, 'i miss him so much']
    obs = agent.observe({'text': turns[-1], 'episode_done': False})
    assert obs['full_text'] == '\n'.join(turns)
    if separator == 'none':
        assert torch.equal(obs['text_vec'], agent._vectorize_text(obs['full_text'], True, True, 100, True))
    else:
        assert agent.dict.tok2ind[separator] in obs['text_vec'].tolist()
        joined = sum(([agent.dict.tok2ind[separator]] + agent.dict.txt2vec(t) for t in turns), [])
        assert obs['text_vec'].tolist() == joined[1:]
    assert agent.history.history_vecs == []  # utterances are not tokenized one by one as well


def test_candidate_encodings_cache_is_reused_and_never_stale(tiny_bert, pool_file, tmp_path):
    from parlai_empathy.models.encoding_cache import load_encodings

    model_file = str(tmp_path / 'model')
    fixed = [
        '--bert-model',
        tiny_bert,
        '-mf',
        model_file,
        '--eval-candidates',
        'fixed',
        '--fixed-candidates-path',
        pool_file,
    ]
    first = make_agent(*fixed)
    first.save()
    cache = first.candidate_cache_path(pool_file)
    assert os.path.exists(cache)
    built = os.stat(cache).st_mtime_ns
    encs = first.fixed_candidate_encs.clone()
    assert encs.shape == (len(first.fixed_candidates), 300)  # projected to 300, as the reference

    again = make_agent(*fixed)  # same weights, same file: reused, not rebuilt
    assert os.stat(cache).st_mtime_ns == built
    assert torch.equal(again.fixed_candidate_encs, encs)

    with torch.no_grad():  # new weights under the same model file: the cache must be rebuilt
        again.bi_encoder.candidate_encoder.transformer.embeddings.word_embeddings.weight.add_(0.5)
    again.save()
    changed = make_agent(*fixed)
    assert os.stat(cache).st_mtime_ns != built
    assert not torch.allclose(changed.fixed_candidate_encs, encs)
    fresh = changed._make_candidate_encs(changed.fixed_candidate_vecs)
    assert torch.allclose(changed.fixed_candidate_encs, fresh, atol=1e-5)
    assert load_encodings(cache, changed.candidate_cache_key(pool_file)) is not None

    rebuilt = os.stat(cache).st_mtime_ns
    in_bf16 = make_agent(*fixed, '--bf16', 'true')  # encodings made in bfloat16 are not float32 ones
    assert in_bf16.candidate_cache_path(pool_file) != cache  # kept beside them, so neither is rebuilt
    assert os.stat(cache).st_mtime_ns == rebuilt
    assert os.path.exists(in_bf16.candidate_cache_path(pool_file))
    assert in_bf16.candidate_cache_key(pool_file) != changed.candidate_cache_key(pool_file)
    assert in_bf16.fixed_candidate_encs.dtype == torch.float16  # kept and scored in 16 bits: half the memory
    assert torch.allclose(in_bf16.fixed_candidate_encs.float(), fresh, rtol=0.05, atol=0.05)
    in_bf16.observe({'text': 'my dog died last week and i miss him', 'episode_done': True})
    assert in_bf16.act()['text'] in in_bf16.fixed_candidates
    built = os.stat(cache).st_mtime_ns

    other_pool = tmp_path / 'pool.cands'  # same name, other content: rebuilt for the new file
    other_pool.write_text(open(pool_file, encoding='utf-8').read() + 'A brand new response.\n', encoding='utf-8')
    grown = make_agent(*fixed[:-1], other_pool)
    assert grown.fixed_candidate_encs.size(0) == encs.size(0) + 1
    assert grown.fixed_candidates[-1] == 'A brand new response.'


def test_bf16_casts_weights_only_where_nothing_trains_and_cosine_has_its_own_cache(tiny_bert, pool_file, tmp_path):
    model_file = str(tmp_path / 'model')
    fixed = [
        '--bert-model',
        tiny_bert,
        '-mf',
        model_file,
        '--eval-candidates',
        'fixed',
        '--fixed-candidates-path',
        pool_file,
        '--bf16',
        'true',
    ]
    training = make_agent(*fixed)  # datatype train: float32 weights, bfloat16 autocast
    assert next(training.bi_encoder.parameters()).dtype == torch.float32
    from parlai_empathy.models.precision import native_bf16

    auto = make_agent(*fixed[:-1], 'auto')  # --bf16 auto: the hardware decides; the options say what it chose
    assert auto.opt['bf16'] is native_bf16() and auto.bi_encoder.context_encoder.bf16 is native_bf16()
    training.save()
    # `parlai interactive` keeps the default datatype "train", but never trains
    interactive = make_agent(*fixed, '--interactive-mode', 'true')
    assert next(interactive.bi_encoder.parameters()).dtype == torch.bfloat16
    interactive.observe({'text': 'i failed my driving test again', 'episode_done': True})
    assert interactive.act()['text'] in interactive.fixed_candidates
    cosine = make_agent(*fixed, '--interactive-mode', 'true', '--similarity', 'cosine', '--pooling', 'mean')
    assert cosine.candidate_cache_key(pool_file) != interactive.candidate_cache_key(pool_file)
    norms = cosine.fixed_candidate_encs.float().norm(dim=-1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=0.02)


def test_corrupt_cache_file_is_a_clear_error(tiny_bert, pool_file, tmp_path):
    from parlai_empathy.models.encoding_cache import CacheFormatError

    cache = tmp_path / 'my.encs'
    cache.write_bytes(b'\x00 definitely not torch')
    with pytest.raises(CacheFormatError, match='my.encs'):
        make_agent(
            '--bert-model',
            tiny_bert,
            '-mf',
            tmp_path / 'm',
            '--eval-candidates',
            'fixed',
            '--fixed-candidates-path',
            pool_file,
            '--candidate-encodings-cache',
            cache,
        )


def test_pool_name_follows_the_ed_folder_and_is_built_once(tmp_path):
    """Another ED copy (another train.csv) or token limit never reuses a stale pool file."""
    sample = response_pool.train_csv_path('sample')
    other = tmp_path / 'other_ed'
    other.mkdir()
    for split in ('train', 'valid', 'test'):
        text = open(os.path.join(os.path.dirname(sample), f'{split}.csv'), encoding='utf-8').read()
        if split == 'train':  # the first 300 rows only
            text = ''.join(text.splitlines(keepends=True)[:300])
        (other / f'{split}.csv').write_text(text, encoding='utf-8')
    out = tmp_path / 'pools'
    sample_pool = response_pool.ensure_pool('sample', 20, str(out))
    other_pool = response_pool.ensure_pool(str(other), 20, str(out))
    assert sample_pool != other_pool and os.path.dirname(sample_pool) == str(out)
    assert response_pool.ensure_pool('sample', 0, str(out)) not in (sample_pool, other_pool)
    with open(other_pool, encoding='utf-8') as f:
        assert len(f.read().splitlines()) < len(open(sample_pool, encoding='utf-8').read().splitlines())
    built = os.stat(sample_pool).st_mtime_ns
    assert response_pool.ensure_pool('sample', 20, str(out)) == sample_pool  # reused, not rebuilt
    assert os.stat(sample_pool).st_mtime_ns == built
    assert not [p for p in os.listdir(out) if '.tmp' in p]


def test_agent_builds_the_pool_of_its_ed_folder(tiny_bert, tmp_path):
    agent = make_agent(
        '--bert-model', tiny_bert, '-mf', tmp_path / 'm', '--eval-candidates', 'fixed', '--pool-ed-datapath', 'sample'
    )
    expected = response_pool.ensure_pool('sample', response_pool.RASHKIN_MAX_TOKENS, str(tmp_path))
    assert agent.fixed_candidates_path == expected
    assert agent.fixed_candidates == open(expected, encoding='utf-8').read().splitlines()


@pytest.fixture(scope='module')
def emotion_classifier(tmp_path_factory):
    """A tiny random 4-class emotion classifier, saved as the classifier agent saves one."""
    from test_emotions_support import make_tiny_bert, make_tiny_classifier

    folder = tmp_path_factory.mktemp('emoclf')
    bert = make_tiny_bert(str(folder / 'bert'))
    return make_tiny_classifier(
        str(folder / 'clf' / 'model'), bert, ['sad', 'happy', 'angry', 'afraid'], multilabel=False
    )


def test_emo_prepend_prefixes_contexts_labels_and_candidates(tiny_bert, pool_file, emotion_classifier, tmp_path):
    from parlai_empathy.emotions import classifier_files, inference

    classes = ['sad', 'happy', 'angry', 'afraid']
    args = [
        '--bert-model',
        tiny_bert,
        '-mf',
        tmp_path / 'm',
        '--eval-candidates',
        'fixed',
        '--fixed-candidates-path',
        pool_file,
        '--emo-prepend-k',
        2,
        '--emo-classifier-file',
        emotion_classifier,
    ]
    agent = make_agent(*args)
    clf = classifier_files.load_classifier(emotion_classifier)

    def expected_prefix(text):
        probs, _ = inference.predict_all(clf, [text])
        return [classes[i] for i in probs[0].argsort()[::-1][:2]]

    label = agent.fixed_candidates[3]
    obs = agent.observe({'text': 'I lost my job.', 'eval_labels': [label], 'episode_done': True})
    context_words = agent.dict.vec2txt(obs['text_vec']).split()
    assert context_words[:2] == expected_prefix('I lost my job.')
    label_words = agent.dict.vec2txt(obs['eval_labels_vec']).split()
    assert label_words[:2] == expected_prefix(label)
    row = agent.fixed_candidate_vecs[3]  # the fixed candidate is vectorized exactly like the label
    vec = obs['eval_labels_vec']
    assert torch.equal(row[: len(vec)], vec) and (row[len(vec) :] == agent.NULL_IDX).all()
    assert agent.act()['text'] in agent.fixed_candidates  # replies are the bare candidates
    agent.reset()

    long_obs = agent.observe({'text': 'sad ' * 300, 'episode_done': True})  # truncation keeps the prefix
    assert len(long_obs['text_vec']) == 100
    assert agent.dict.vec2txt(long_obs['text_vec']).split()[:2] == expected_prefix('sad ' * 300)
    agent.reset()

    # inline candidates (P@1,100 blocks) get their prefixes too
    cands = agent.fixed_candidates[:5]
    agent = make_agent(*args[:4], '--eval-candidates', 'inline', *args[-4:])
    obs = agent.observe(
        {'text': 'My dog died.', 'eval_labels': [cands[0]], 'label_candidates': cands, 'episode_done': True}
    )
    for cand, cvec in zip(cands, obs['label_candidates_vecs']):
        assert agent.dict.vec2txt(cvec).split()[:2] == expected_prefix(cand)
    # batch copies (eval with -bs N) share one memo: a block's candidates are classified once
    from parlai.core.agents import create_agent_from_shared

    from parlai_empathy.emotions import inference as inference_module

    copy = create_agent_from_shared(agent.share())
    classified = []
    original = inference_module.predict_all
    inference_module.predict_all = lambda clf, texts, *a, **k: (
        classified.append(list(texts)) or original(clf, texts, *a, **k)
    )
    try:
        copy.observe(
            {'text': 'My cat died.', 'eval_labels': [cands[1]], 'label_candidates': cands, 'episode_done': True}
        )
    finally:
        inference_module.predict_all = original
    assert classified == [['My cat died.']], 'the candidates were classified already, by the other copy'

    # the fixed candidates' emotions are cached with their encodings; another k rebuilds both
    agent = make_agent(*args)
    emotions_cache = agent.candidate_cache_path(pool_file) + '.emotions'
    built = os.stat(emotions_cache).st_mtime_ns
    make_agent(*args)
    assert os.stat(emotions_cache).st_mtime_ns == built
    one = make_agent(*args[:-3], 1, '--emo-classifier-file', emotion_classifier)
    assert os.stat(emotions_cache).st_mtime_ns != built
    assert agent.dict.vec2txt(one.fixed_candidate_vecs[3]).split()[0] == expected_prefix(label)[0]
    assert agent.candidate_cache_key(pool_file)['vectorizer'] != one.candidate_cache_key(pool_file)['vectorizer']


def test_replies_carry_the_emotion_of_their_context(tiny_bert, pool_file, emotion_classifier, tmp_path):
    """With a classifier, every reply carries the top emotion of the context it answered; with
    --emo-prepend-k 0 nothing is prepended and the candidates are neither classified nor re-keyed."""
    from parlai_empathy.emotions import classifier_files, inference

    classes = ['sad', 'happy', 'angry', 'afraid']
    clf = classifier_files.load_classifier(emotion_classifier)
    top = classes[int(inference.predict_all(clf, ['I lost my job.'])[0][0].argmax())]
    base = [
        '--bert-model',
        tiny_bert,
        '-mf',
        tmp_path / 'm',
        '--eval-candidates',
        'fixed',
        '--fixed-candidates-path',
        pool_file,
    ]
    plain = make_agent(*base)
    shown = make_agent(*base, '--emo-classifier-file', emotion_classifier)
    prepended = make_agent(*base, '--emo-prepend-k', 2, '--emo-classifier-file', emotion_classifier)
    for agent in (shown, prepended):
        agent.observe({'text': 'I lost my job.', 'episode_done': True})
        reply = agent.act()
        assert reply['predicted_emotion'] == top and reply['text'] in agent.fixed_candidates
    # shown only: the same vectors and candidate encodings as without a classifier
    obs = plain.observe({'text': 'I lost my job.', 'episode_done': True})
    assert 'predicted_emotion' not in plain.act()
    shown.reset()
    assert torch.equal(shown.observe({'text': 'I lost my job.', 'episode_done': True})['text_vec'], obs['text_vec'])
    assert torch.equal(shown.fixed_candidate_vecs, plain.fixed_candidate_vecs)
    assert shown.candidate_cache_key(pool_file)['vectorizer'] == plain.candidate_cache_key(pool_file)['vectorizer']


def test_emo_prepend_k_above_the_class_count_is_refused(tiny_bert, emotion_classifier, tmp_path):
    with pytest.raises(ValueError, match='exceeds the 4 classes'):
        make_agent(
            '--bert-model',
            tiny_bert,
            '-mf',
            tmp_path / 'm',
            '--emo-prepend-k',
            5,
            '--emo-classifier-file',
            emotion_classifier,
        )


def test_emo_prepend_without_classifier_says_what_to_train(tiny_bert, tmp_path):
    with pytest.raises(FileNotFoundError, match='empathy/emotion_classifier'):
        make_agent(
            '--bert-model',
            tiny_bert,
            '-mf',
            tmp_path / 'm',
            '--emo-prepend-k',
            1,
            '--emo-classifier-file',
            tmp_path / 'missing',
        )
