"""Unit tests of the plain bi-encoder, the encoding cache and the response pool (no ParlAI loop)."""

import os
import shutil

import pytest
import torch

from bert_ranker_tiny import build_tiny_bert
from parlai_empathy.data import response_pool
from parlai_empathy.models.bi_encoder import (
    POOLINGS,
    BiEncoder,
    BiEncoderConfig,
    ModelFilesError,
    in_batch_loss,
    load_tokenizer,
    pool_for_scoring,
    state_checksum,
)
from parlai_empathy.models.encoding_cache import CacheFormatError, load_encodings, save_encodings

TEXTS = ['i am so sad today', 'what a great day for a walk!', 'no', 'my dog died last week and i miss him']


@pytest.fixture(scope='session')
def tiny_bert(tmp_path_factory, ed_dir):
    return build_tiny_bert(str(tmp_path_factory.mktemp('tiny_bert')), os.path.join(ed_dir, 'train.csv'))


# the pretrained encoder as it is: no projection and trainable word pieces (the reference's config
# adds a random 300-d projection, which would make two models built alike differ)
PLAIN = BiEncoderConfig(projection_dim=0, freeze_word_embeddings=False)


def _ids(tokenizer, texts):
    return tokenizer(texts, padding=True, return_tensors='pt')['input_ids']


def test_separate_encoders_by_default_and_shared_on_request(tiny_bert):
    separate = BiEncoder.from_pretrained(tiny_bert, PLAIN)
    shared = BiEncoder.from_pretrained(tiny_bert, PLAIN, share_encoders=True)
    assert not separate.shares_encoders and shared.shares_encoders
    n_separate = sum(p.numel() for p in separate.parameters())
    n_shared = sum(p.numel() for p in shared.parameters())
    assert n_separate == 2 * n_shared


def test_scores_are_dot_products_of_pooled_vectors(tiny_bert):
    tokenizer = load_tokenizer(tiny_bert)
    ids = _ids(tokenizer, TEXTS)
    for pooling, projection in [('cls', 0), ('mean', 0), ('cls', 300)]:
        model = BiEncoder.from_pretrained(tiny_bert, PLAIN, pooling=pooling, projection_dim=projection).eval()
        with torch.no_grad():
            ctx, cand = model.encode_context(ids), model.encode_candidates(ids)
            scores = model(ids, ids)
        assert ctx.shape == (len(TEXTS), 300 if projection else 32)
        assert torch.allclose(scores, ctx @ cand.t(), atol=1e-5)
        assert ctx.std(0).max() > 1e-3, 'different inputs must give different vectors'


def test_cosine_similarity_scores_unit_vectors_times_the_scale(tiny_bert):
    tokenizer = load_tokenizer(tiny_bert)
    ids = _ids(tokenizer, TEXTS)
    dot = BiEncoder.from_pretrained(tiny_bert, PLAIN, pooling='mean').eval()
    cosine = BiEncoder.from_pretrained(tiny_bert, PLAIN, pooling='mean', similarity='cosine', cosine_scale=20.0).eval()
    cosine.load_state_dict(dot.state_dict())
    with torch.no_grad():
        raw_ctx, raw_cand = dot.encode_context(ids), dot.encode_candidates(ids)
        ctx, cand = cosine.encode_context(ids), cosine.encode_candidates(ids)
        scores = cosine(ids, ids)
        per_example = cosine.score(ctx, cand.unsqueeze(0).expand(len(TEXTS), -1, -1))
    assert torch.allclose(ctx.norm(dim=-1), torch.ones(len(TEXTS)), atol=1e-5)
    expected = 20.0 * torch.nn.functional.cosine_similarity(raw_ctx.unsqueeze(1), raw_cand.unsqueeze(0), dim=-1)
    assert torch.allclose(scores, expected, atol=1e-4)
    assert torch.allclose(per_example, scores, atol=1e-4)
    assert scores.max() <= 20.0 + 1e-4
    with pytest.raises(ValueError, match='similarity'):
        BiEncoder.from_pretrained(tiny_bert, PLAIN, similarity='euclid')


def test_fused_inference_matches_the_huggingface_layers_and_follows_weight_updates(tiny_bert):
    tokenizer = load_tokenizer(tiny_bert)
    ids = _ids(tokenizer, TEXTS)  # padded batch: the fused path must mask padding like BERT does
    for pooling in POOLINGS:
        model = BiEncoder.from_pretrained(tiny_bert, PLAIN, pooling=pooling).eval()
        reference = BiEncoder.from_pretrained(tiny_bert, PLAIN, pooling=pooling).eval()
        reference.load_state_dict(model.state_dict())
        reference.set_fused_inference(False)
        with torch.no_grad():
            fused_vectors = model.encode_context(ids)
            assert model.context_encoder._fused is not None, 'a plain BERT must take the fused path'
            assert torch.allclose(fused_vectors, reference.encode_context(ids), atol=1e-5)
            assert torch.allclose(model(ids, ids), reference(ids, ids), atol=1e-4)
        # a training step changes the weights: the fused copy must follow, never answer stale
        model.train()
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        in_batch_loss(model(ids, ids)).backward()
        optimizer.step()
        model.eval()
        reference.load_state_dict(model.state_dict())
        with torch.no_grad():
            updated = model.encode_context(ids)
            assert not torch.allclose(updated, fused_vectors, atol=1e-3)
            assert torch.allclose(updated, reference.encode_context(ids), atol=1e-5)
        # bfloat16 weights (inference with --bf16) take the fused path too
        model.to(torch.bfloat16)
        with torch.no_grad():
            assert torch.nn.functional.cosine_similarity(model.encode_context(ids), updated).min() > 0.99


def test_unpadded_inputs_call_the_native_kernel_and_match_huggingface(tiny_bert, monkeypatch):
    tokenizer = load_tokenizer(tiny_bert)
    module_forward = torch.nn.TransformerEncoderLayer.forward
    module_calls = []
    monkeypatch.setattr(
        torch.nn.TransformerEncoderLayer,
        'forward',
        lambda self, *a, **k: module_calls.append(1) or module_forward(self, *a, **k),
    )
    model = BiEncoder.from_pretrained(tiny_bert, PLAIN, pooling='mean').eval()
    reference = BiEncoder.from_pretrained(tiny_bert, PLAIN, pooling='mean').eval()
    reference.load_state_dict(model.state_dict())
    reference.set_fused_inference(False)
    layers = model.context_encoder.transformer.config.num_hidden_layers
    with torch.no_grad():
        for text in TEXTS:  # one unpadded query each, as in `parlai interactive`
            ids = _ids(tokenizer, [text])
            assert torch.allclose(model.encode_context(ids), reference.encode_context(ids), atol=1e-5)
        assert module_calls == [], 'unpadded inputs skip the module and call its kernel directly'
        padded = _ids(tokenizer, TEXTS)
        assert torch.allclose(model.encode_context(padded), reference.encode_context(padded), atol=1e-5)
        assert len(module_calls) == layers, 'padded batches go through the module, which masks them'
        # PyTorch's switch for its fused attention paths is honoured
        module_calls.clear()
        monkeypatch.setattr(torch.backends.mha, 'get_fastpath_enabled', lambda: False)
        ids = _ids(tokenizer, TEXTS[:1])
        assert torch.allclose(model.encode_context(ids), reference.encode_context(ids), atol=1e-5)
        assert len(module_calls) == layers


def test_pool_layouts_for_scoring_keep_every_value_and_score(tiny_bert, ed_dir):
    responses = response_pool.listener_responses(os.path.join(ed_dir, 'valid.csv'), 20)[:300]
    model = BiEncoder.from_pretrained(tiny_bert, PLAIN, pooling='mean', similarity='cosine').eval()
    tokenizer = load_tokenizer(tiny_bert)
    with torch.no_grad():
        pool = model.encode_candidates(_ids(tokenizer, responses))
        query = model.encode_context(_ids(tokenizer, responses[:5]))
    reference = model.score(query, pool)
    as_float = pool_for_scoring(pool, half=False)
    assert as_float.shape == pool.shape and torch.equal(as_float, pool)
    assert as_float.t().is_contiguous(), 'float32 pools are stored [dim, n] for contiguous reads'
    assert torch.allclose(model.score(query, as_float), reference, atol=1e-5)
    # bfloat16-made encodings survive float16 storage bit for bit; scores stay within float16 rounding
    made_in_bf16 = pool.to(torch.bfloat16)
    half = pool_for_scoring(made_in_bf16.float(), half=True)
    assert half.dtype == torch.float16 and torch.equal(half.float(), made_in_bf16.float())
    half_scores = model.score(query.to(torch.float16), half).float()
    assert torch.allclose(half_scores, model.score(query, made_in_bf16.float()), atol=0.05)
    assert torch.equal(half_scores.argmax(1), model.score(query, made_in_bf16.float()).argmax(1))


def test_switching_to_the_current_mode_is_a_no_op_but_real_switches_reach_every_module(tiny_bert):
    model = BiEncoder.from_pretrained(tiny_bert, PLAIN).eval()
    assert all(not m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())
    model.train()
    model.eval()
    assert all(not m.training for m in model.modules())


def test_inference_encodes_length_sorted_chunks_with_the_same_vectors(tiny_bert, ed_dir):
    from parlai_empathy.data.ed_raw import read_clean
    from parlai_empathy.models import bi_encoder

    conversations, _ = read_clean(os.path.join(ed_dir, 'valid.csv'))
    texts = [u.text for c in conversations[:30] for u in c.utterances][: 3 * bi_encoder.INFERENCE_CHUNK_ROWS + 5]
    ids = _ids(load_tokenizer(tiny_bert), texts)
    assert (ids == 0).float().mean() > 0.3, 'real ED texts padded to the longest are mostly padding'
    model = BiEncoder.from_pretrained(tiny_bert, PLAIN, pooling='mean').eval()
    with torch.no_grad():
        chunked = model.encode_candidates(ids)
    one_by_one = torch.cat([model.encode_candidates(row[row != 0].unsqueeze(0)).detach() for row in ids])
    assert torch.allclose(chunked, one_by_one, atol=1e-5)


def test_training_encodes_chunks_with_the_same_loss_and_gradients(tiny_bert, ed_dir):
    from parlai_empathy.data.ed_raw import read_clean
    from parlai_empathy.models import bi_encoder

    conversations, _ = read_clean(os.path.join(ed_dir, 'valid.csv'))
    utterances = [c.utterances for c in conversations if len(c.utterances) >= 2][:32]
    tokenizer = load_tokenizer(tiny_bert)
    contexts = _ids(tokenizer, [u[0].text for u in utterances])
    responses = _ids(tokenizer, [u[1].text for u in utterances])
    assert contexts.size(0) > bi_encoder.TRAINING_CHUNK_ROWS
    model = BiEncoder.from_pretrained(tiny_bert, PLAIN, pooling='mean', similarity='cosine').eval()  # no dropout

    def loss_and_grads(whole_batch: bool):
        model.zero_grad()
        if whole_batch:  # the batch encoded at once, padded to its longest row
            loss = in_batch_loss(
                model.score(
                    model.context_encoder(contexts, contexts != 0), model.candidate_encoder(responses, responses != 0)
                )
            )
        else:
            loss = in_batch_loss(model(contexts, responses))
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    chunked_loss, chunked_grads = loss_and_grads(whole_batch=False)
    whole_loss, whole_grads = loss_and_grads(whole_batch=True)
    assert torch.allclose(chunked_loss, whole_loss, atol=1e-5)
    assert len(chunked_grads) == len(whole_grads)
    for chunked, whole in zip(chunked_grads, whole_grads):
        assert torch.allclose(chunked, whole, atol=1e-5)


def test_mean_pooling_ignores_padding(tiny_bert):
    tokenizer = load_tokenizer(tiny_bert)
    model = BiEncoder.from_pretrained(tiny_bert, PLAIN, pooling='mean').eval()
    alone = _ids(tokenizer, ['no'])
    padded = _ids(tokenizer, ['no', TEXTS[-1]])[:1]
    assert padded.size(1) > alone.size(1)
    with torch.no_grad():
        assert torch.allclose(model.encode_context(alone), model.encode_context(padded), atol=1e-5)


def test_per_example_candidates_match_flat_encoding(tiny_bert):
    """3-D candidates (inline) are deduplicated before encoding; scores must not change."""
    tokenizer = load_tokenizer(tiny_bert)
    model = BiEncoder.from_pretrained(tiny_bert, PLAIN).eval()
    flat = _ids(tokenizer, TEXTS)
    per_example = torch.stack([flat, flat.flip(0)])  # two examples sharing candidates
    ctx = _ids(tokenizer, TEXTS[:2])
    with torch.no_grad():
        scores = model(ctx, per_example)
        expected = model.encode_context(ctx) @ model.encode_candidates(flat).t()
    assert torch.allclose(scores[0], expected[0], atol=1e-5)
    assert torch.allclose(scores[1], expected[1].flip(0), atol=1e-5)


def test_in_batch_training_learns_to_match_pairs(tiny_bert):
    tokenizer = load_tokenizer(tiny_bert)
    # dropout off (a new bi-encoder is in training mode): 15 steps of a tiny BERT, deterministic
    model = BiEncoder.from_pretrained(tiny_bert, PLAIN, pooling='mean').eval()
    ctx, cand = _ids(tokenizer, TEXTS), _ids(tokenizer, [t + ' indeed' for t in TEXTS])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(15):
        loss = in_batch_loss(model(ctx, cand))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.5
    assert (model(ctx, cand).argmax(1) == torch.arange(len(TEXTS))).all()


def test_bf16_autocast_keeps_float32_weights_vectors_and_rankings(tiny_bert):
    tokenizer = load_tokenizer(tiny_bert)
    model = BiEncoder.from_pretrained(tiny_bert, PLAIN, pooling='mean').eval()  # no dropout: comparable outputs
    ctx, cand = _ids(tokenizer, TEXTS), _ids(tokenizer, [t + ' indeed' for t in TEXTS])
    with torch.no_grad():
        exact = model(ctx, cand)
        model.set_bf16(True)
        fast = model(ctx, cand)
    assert fast.dtype == torch.float32 and all(p.dtype == torch.float32 for p in model.parameters())
    assert not torch.equal(fast, exact)  # the products really ran in bfloat16 ...
    assert torch.allclose(fast, exact, rtol=0.05, atol=0.05 * exact.abs().max().item())  # ... closely
    loss = in_batch_loss(model(ctx, cand))  # and it trains: float32 gradients reach every weight
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and g.dtype == torch.float32 for g in grads)
    model.set_bf16(False)
    with torch.no_grad():
        assert torch.equal(model(ctx, cand), exact)


def test_checksum_follows_the_weights(tiny_bert):
    model = BiEncoder.from_pretrained(tiny_bert, PLAIN)
    before = state_checksum(model)
    assert before == state_checksum(BiEncoder.from_pretrained(tiny_bert, PLAIN))
    with torch.no_grad():
        next(model.parameters())[0, 0] += 1e-3
    assert state_checksum(model) != before


def test_model_dir_without_tokenizer_files_is_a_clear_error(tiny_bert, tmp_path):
    weights_only = tmp_path / 'weights_only'
    weights_only.mkdir()
    for name in ('config.json', 'model.safetensors'):
        shutil.copy(os.path.join(tiny_bert, name), weights_only / name)
    with pytest.raises(ModelFilesError, match='has no tokenizer files'):
        load_tokenizer(str(weights_only))
    with pytest.raises(ModelFilesError, match='does not exist'):
        load_tokenizer(str(tmp_path / 'missing'))


def test_encoding_cache_rejects_other_keys_and_foreign_files(tmp_path):
    path = str(tmp_path / 'pool.encs')
    key = {'model_checksum': 'a', 'candidates_sha256': 'b', 'vectorizer': 'c'}
    encs = torch.randn(5, 8)
    assert load_encodings(path, key) is None
    save_encodings(path, key, encs)
    assert torch.equal(load_encodings(path, key), encs)
    assert load_encodings(path, dict(key, model_checksum='other')) is None
    assert load_encodings(path, dict(key, candidates_sha256='other')) is None
    foreign = tmp_path / 'foreign.encs'
    torch.save({'something': torch.zeros(2)}, foreign)
    with pytest.raises(CacheFormatError, match='foreign.encs'):
        load_encodings(str(foreign), key)
    (tmp_path / 'garbage.encs').write_bytes(b'not a torch file')
    with pytest.raises(CacheFormatError, match='garbage.encs'):
        load_encodings(str(tmp_path / 'garbage.encs'), key)


def test_response_pool_is_deduplicated_listener_turns(ed_dir):
    train = response_pool.train_csv_path(ed_dir)
    pool = response_pool.listener_responses(train, max_tokens=0)
    short = response_pool.listener_responses(train, max_tokens=20)
    assert len(pool) == len(set(pool)) > 30000
    assert set(short) <= set(pool) and len(short) < len(pool)
    assert all(response_pool.count_tokens(r) <= 20 for r in short)
    # the first conversation's listener turn (utterance 2), never its speaker turn (utterance 1)
    assert pool[0] == 'Was this a friend you were in love with, or just a best friend?'
    assert not any(r.startswith('I remember going to see the fireworks') for r in pool)


def _real_pairs(ed_dir, tokenizer, n=24):
    """Contexts and responses of real ED conversations: lengths vary, as in training batches."""
    from parlai_empathy.data.ed_raw import read_clean

    conversations, _ = read_clean(os.path.join(ed_dir, 'valid.csv'))
    utterances = [c.utterances for c in conversations if len(c.utterances) >= 2][:n]
    return _ids(tokenizer, [u[0].text for u in utterances]), _ids(tokenizer, [u[1].text for u in utterances])


def _without_dropout(model):
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model.train()


def _loss_and_grads(model, loss_of):
    model.zero_grad()
    loss = loss_of()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _gradient_cached_loss(model, contexts, responses, chunk_rows):
    context, candidates = model.gradient_cached(contexts, responses, chunk_rows)
    loss = in_batch_loss(model.score(context.vectors, candidates.vectors))
    loss.backward()
    context.backward()
    candidates.backward()
    return loss


@pytest.mark.parametrize('share_encoders', [False, True])
def test_gradient_cache_gives_the_whole_batch_loss_and_gradients(tiny_bert, ed_dir, share_encoders):
    contexts, responses = _real_pairs(ed_dir, load_tokenizer(tiny_bert))
    model = _without_dropout(
        BiEncoder.from_pretrained(tiny_bert, PLAIN, share_encoders=share_encoders, projection_dim=300)
    )

    def whole_batch():  # both sides encoded at once, each padded to its longest row
        loss = in_batch_loss(
            model.score(
                model.context_encoder(contexts, contexts != 0), model.candidate_encoder(responses, responses != 0)
            )
        )
        loss.backward()
        return loss

    whole_loss, whole_grads = _loss_and_grads(model, whole_batch)
    for chunk_rows in (5, 24):  # uneven chunks, and one chunk of the whole batch
        loss, grads = _loss_and_grads(
            model, lambda chunk_rows=chunk_rows: _gradient_cached_loss(model, contexts, responses, chunk_rows)
        )
        assert torch.allclose(loss, whole_loss, atol=1e-5)
        assert grads.keys() == whole_grads.keys() and len(grads) > 10
        for name, grad in grads.items():
            assert torch.allclose(grad, whole_grads[name], atol=1e-5), name


def test_gradient_cache_replays_each_chunks_dropout(tiny_bert, ed_dir, monkeypatch):
    """With dropout on, both passes of a chunk draw the same masks: the gradients are those of the
    loss computed, equal to one graph over the same chunks with the same random state."""
    from parlai_empathy.models import bi_encoder

    contexts, responses = _real_pairs(ed_dir, load_tokenizer(tiny_bert))
    model = BiEncoder.from_pretrained(tiny_bert, PLAIN, pooling='mean').train()
    monkeypatch.setattr(bi_encoder, 'TRAINING_CHUNK_ROWS', 6)

    def one_graph():  # BiEncoder.forward: length-sorted chunks of TRAINING_CHUNK_ROWS, one graph
        loss = in_batch_loss(model(contexts, responses))
        loss.backward()
        return loss

    torch.manual_seed(3)
    plain_loss, plain_grads = _loss_and_grads(model, one_graph)
    after_plain = torch.rand(1)
    torch.manual_seed(3)
    cached_loss, cached_grads = _loss_and_grads(model, lambda: _gradient_cached_loss(model, contexts, responses, 6))
    assert torch.equal(torch.rand(1), after_plain), 'the replays leave the random stream where one pass would'
    torch.manual_seed(4)
    other_loss, _ = _loss_and_grads(model, one_graph)
    assert not torch.allclose(other_loss, plain_loss), 'dropout is really on'
    assert torch.allclose(cached_loss, plain_loss, atol=1e-5)
    for name, grad in cached_grads.items():
        assert torch.allclose(grad, plain_grads[name], atol=1e-5), name


def test_gradient_cache_backward_needs_the_loss_first(tiny_bert, ed_dir):
    contexts, responses = _real_pairs(ed_dir, load_tokenizer(tiny_bert), n=6)
    context, _ = BiEncoder.from_pretrained(tiny_bert, PLAIN).gradient_cached(contexts, responses, 2)
    assert not context.vectors.grad_fn and context.vectors.requires_grad  # no graph was kept
    with pytest.raises(RuntimeError, match='back-propagate the loss'):
        context.backward()


@pytest.mark.parametrize('share_encoders', [False, True])
def test_frozen_word_embeddings_get_no_gradient_and_redrawn_tokens_are_shared(tiny_bert, share_encoders):
    tokenizer = load_tokenizer(tiny_bert)
    model = BiEncoder.from_pretrained(tiny_bert, PLAIN, share_encoders=share_encoders)
    pretrained = model.word_embeddings()[0].detach().clone()
    unused = tokenizer.convert_tokens_to_ids('[unused1]')
    model.redraw_token_embeddings([unused])
    tables = model.word_embeddings()
    assert len(tables) == (1 if share_encoders else 2)
    assert not torch.equal(tables[0][unused], pretrained[unused])
    assert all(torch.equal(t[unused], tables[0][unused]) for t in tables)  # one draw for both encoders
    others = torch.arange(len(pretrained)) != unused
    assert torch.equal(tables[0][others], pretrained[others])
    model.freeze_word_embeddings()
    ids = _ids(tokenizer, TEXTS)
    in_batch_loss(model(ids, ids)).backward()
    assert all(not t.requires_grad and t.grad is None for t in tables)
    trained = [p for p in model.parameters() if p.requires_grad]
    assert trained and all(p.grad is not None for p in trained)


def test_a_new_bi_encoder_trains_with_dropout_from_its_first_step(tiny_bert):
    """from_pretrained leaves HuggingFace's modules in eval mode: train() must still reach them."""
    model = BiEncoder.from_pretrained(tiny_bert, PLAIN)
    assert all(m.training for m in model.modules())
    model.train()
    ids = _ids(load_tokenizer(tiny_bert), TEXTS)
    assert not torch.equal(model.encode_context(ids), model.encode_context(ids))  # dropout draws differ
