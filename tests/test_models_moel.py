"""MoEL as a plain torch module: shapes, the top-k listener gate, the emotion key memory, the
oracle, the loss, decoding and determinism.

Real data: the embedded ED sample (parlai_empathy/data/sample).
"""

import dataclasses
import math
import os

import pytest
import torch
import torch.nn.functional as F

from parlai_empathy.data import ed_tensors
from parlai_empathy.data.ed_source import sample_dir
from parlai_empathy.models.moel import Moel, MoelConfig, listener_weights, oracle_probability
from parlai_empathy.models.transformer_blocks import TransformerSize

TINY = TransformerSize(embedding_size=32, n_heads=2, attention_size=16, ffn_size=32, n_layers=1)


VOCAB = 2000  # above the sample's vocabulary (checked by the fixture)


def tiny_model(seed=0, **fields):
    torch.manual_seed(seed)
    return Moel(VOCAB, MoelConfig(size=TINY, **fields))


@pytest.fixture(scope='module')
def batch():
    """The first 8 Listener turns of the embedded real ED sample, as tensors."""
    path = os.path.join(sample_dir(), 'train.csv')
    vocab = ed_tensors.build_vocab(ed_tensors.listener_pairs(path))
    assert len(vocab) <= VOCAB
    return ed_tensors.to_tensors(ed_tensors.listener_pairs(path, limit=8), vocab)


def test_forward_shapes_and_reordering(batch):
    context, speakers, response, emotion = batch
    model = tiny_model()
    scores, preds, states = model(context, speakers, emotion, ys=response)
    assert scores.shape == (*response.shape, VOCAB) and preds.shape == response.shape
    assert states.memory.shape == (8, context.size(1) + 1, TINY.embedding_size)  # +1: the CTX token
    assert states.aux.emotion_logits.shape == states.aux.listener_weights.shape == (8, 32)
    reordered = model.reorder_encoder_states(states, [3, 3, 0])
    assert torch.equal(reordered.aux.listener_weights[1], states.aux.listener_weights[3])
    assert reordered.aux.batch_size == 3 and reordered.aux.oracle is False


def test_the_listeners_and_their_blocks():
    model = tiny_model()
    stack = model.decoder.stack
    assert len(stack.listeners) == 32 and stack.shared is not None and len(stack.meta.blocks) == 1
    alone = tiny_model(shared_listener=False).decoder.stack
    assert alone.shared is None
    per_block = sum(p.numel() for p in stack.listeners[0].parameters())
    assert (
        sum(p.numel() for p in model.parameters())
        - sum(p.numel() for p in tiny_model(shared_listener=False).parameters())
        == per_block
    )


def test_top_k_gate_is_a_softmax_over_the_k_largest_logits():
    logits = torch.randn(6, 32, generator=torch.Generator().manual_seed(1))
    weights = listener_weights(logits, 5)
    assert torch.allclose(weights.sum(-1), torch.ones(6))
    assert (weights.ne(0).sum(-1) == 5).all()
    top = logits.topk(5, dim=-1)
    assert torch.allclose(weights.gather(1, top.indices), F.softmax(top.values, dim=-1))
    for k in (0, 32):  # every listener
        assert torch.allclose(listener_weights(logits, k), F.softmax(logits, dim=-1))


def test_the_key_memory_is_the_emotion_classifier(batch):
    """logits = K H_0, K bias-free, one key row per listener; p comes from the same logits."""
    context, speakers, _, _ = batch
    model = tiny_model().eval()
    keys = model.encoder.classifier
    assert keys.bias is None and keys.weight.shape == (32, TINY.embedding_size)
    states = model.encoder(context, speakers)
    assert torch.allclose(states.aux.emotion_logits, states.memory[:, 0] @ keys.weight.t(), atol=1e-6)
    assert torch.allclose(states.aux.listener_weights, listener_weights(states.aux.emotion_logits, 5))
    with torch.no_grad():
        keys.weight[7] += torch.randn(TINY.embedding_size, generator=torch.Generator().manual_seed(2))
    changed = model.encoder(context, speakers).aux.emotion_logits - states.aux.emotion_logits
    assert changed[:, 7].abs().min() > 0 and changed[:, [i for i in range(32) if i != 7]].abs().max() == 0


def _decoder_output(model, batch):
    context, speakers, response, _ = batch
    states = model.encoder(context, speakers)
    return model.decoder.forward_full(torch.cat([model.START.expand(8, 1), response[:, :-1]], 1), states), states


def test_only_the_weighted_listeners_and_the_shared_one_shape_the_reply(batch):
    model = tiny_model().eval()
    with torch.no_grad():
        before, states = _decoder_output(model, batch)
        unused = [i for i in range(32) if not states.aux.listener_weights[:, i].any()]
        used = int(states.aux.listener_weights[0].argmax())
        assert unused
        for i in unused:
            for p in model.decoder.stack.listeners[i].parameters():
                p.add_(1.0)
        assert torch.equal(_decoder_output(model, batch)[0], before)  # they add nothing
        for p in model.decoder.stack.listeners[used].parameters():
            p.add_(0.1)
        after = _decoder_output(model, batch)[0]
        assert (after[0] - before[0]).abs().max() > 1e-3
        for p in model.decoder.stack.shared.parameters():
            p.add_(0.1)
        assert (_decoder_output(model, batch)[0] - after).abs().max() > 1e-3


def test_oracle_weights_are_the_gold_one_hot(batch):
    context, speakers, _, emotion = batch
    model = tiny_model()
    states = model.encoder(context, speakers, emotion, oracle=True)
    assert torch.equal(states.aux.listener_weights, F.one_hot(emotion, 32).float()) and states.aux.oracle
    with pytest.raises(ValueError, match='gold emotion'):
        model.encoder(context, speakers, None, oracle=True)


def test_oracle_schedule_is_the_references():
    assert oracle_probability(0, 10000) == pytest.approx(1.0)
    assert oracle_probability(10000, 10000) == pytest.approx(1e-4 + (1 - 1e-4) * math.exp(-1))
    assert oracle_probability(10**9, 10000) == pytest.approx(1e-4)
    assert oracle_probability(0, 10) == 0.0  # the reference never draws at --schedule 10 or less


def test_loss_is_summed_response_nll_plus_batch_mean_emotion_ce(batch):
    context, speakers, response, emotion = batch
    model = tiny_model()
    loss, parts = model.training_loss(context, speakers, emotion, ys=response, emotion=emotion, smoothing=0.0)
    scores, _, states = model(context, speakers, emotion, ys=response)
    real = response.ne(0)
    expected = F.cross_entropy(scores[real], response[real], reduction='sum') + F.cross_entropy(
        states.aux.emotion_logits, emotion
    )
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert parts['cls'].item() == pytest.approx(F.cross_entropy(states.aux.emotion_logits, emotion).item(), rel=1e-5)
    smoothed, _ = model.training_loss(context, speakers, emotion, ys=response, emotion=emotion, smoothing=0.1)
    # the reference's LabelSmoothing(0.1): 0.9 on the gold token, 0.1 / (V - 2) on every other but padding
    logp = F.log_softmax(scores[real], dim=-1)
    gold = logp.gather(1, response[real].unsqueeze(1)).squeeze(1)
    spread = logp.sum(-1) - gold - logp[:, 0]
    response_term = -(0.9 * gold + 0.1 / (VOCAB - 2) * spread).sum()
    assert smoothed.item() == pytest.approx((response_term + parts['cls']).item(), rel=1e-5)


def test_training_gives_every_listener_a_gradient_as_the_reference(batch):
    """All 32 listeners run in training: one outside every top k gets a zero gradient (not None),
    so Adam keeps moving it by its momentum as the reference's optimizer does."""
    context, speakers, response, emotion = batch
    model = tiny_model()
    loss, _ = model.training_loss(context, speakers, emotion, ys=response, emotion=emotion)
    loss.backward()
    weights = model.encoder(context, speakers).aux.listener_weights
    unused = [i for i in range(32) if not weights[:, i].any()]
    assert unused and all(p.grad is not None for p in model.parameters())
    assert all(p.grad.abs().max() == 0 for i in unused for p in model.decoder.stack.listeners[i].parameters())
    assert model.encoder.classifier.weight.grad.abs().max() > 0


def test_listeners_on_their_rows_give_the_whole_batch_sums_and_gradients(batch):
    """The whole-sequence pass runs each listener on the rows that weigh it; the cached path runs
    it on every row (0 p_i V_i where p_i = 0). Outputs and every gradient agree to float rounding."""
    context, speakers, response, _ = batch
    inputs = torch.cat([tiny_model().START.expand(8, 1), response[:, :-1]], 1)
    results = []
    for whole_batch in (False, True):
        model = tiny_model()  # training mode, dropout 0
        states = model.encoder(context, speakers)
        stack = model.decoder.stack
        hidden = stack(
            model.decoder.words(inputs),
            states.memory,
            states.keep,
            states.aux.listener_weights,
            cache={} if whole_batch else None,
        )
        hidden.pow(2).sum().backward()
        results.append((hidden.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (ours, ours_grads), (whole, whole_grads) = results
    assert torch.allclose(ours, whole, atol=1e-6)
    assert ours_grads.keys() == whole_grads.keys()
    for name, grad in whole_grads.items():  # None there: a listener no row weighs (the cached path skips it)
        if name.startswith('output.'):
            continue  # outside the stack
        assert ours_grads[name] is not None, name
        expected = torch.zeros_like(ours_grads[name]) if grad is None else grad
        assert torch.allclose(ours_grads[name], expected, atol=1e-5, rtol=1e-4), name
    assert any(grad is None for grad in whole_grads.values())


def test_the_response_loss_trains_the_keys_except_under_the_oracle(batch):
    context, speakers, response, emotion = batch
    for oracle in (False, True):
        model = tiny_model()
        model.response_loss(model.encoder(context, speakers, emotion, oracle=oracle), response).smoothed.backward()
        grad = model.encoder.classifier.weight.grad
        assert (grad is None or grad.abs().max() == 0) == oracle


def test_incremental_decoding_matches_the_full_pass_and_is_deterministic(batch):
    context, speakers, response, _ = batch
    model = tiny_model().eval()
    with torch.no_grad():
        full, states = _decoder_output(model, batch)
        inputs = torch.cat([model.START.expand(8, 1), response[:, :-1]], 1)
        state, steps = None, []
        for t in range(1, inputs.size(1) + 1):
            hidden, state = model.decoder(inputs[:, :t], states, state)
            steps.append(hidden[:, -1])
        assert torch.allclose(torch.stack(steps, 1), full, atol=1e-5)
        # a beam reorder keeps every cache in step (listeners' too)
        rows = torch.tensor([2, 2, 5])
        sub = model.reorder_encoder_states(states, rows)
        state = None
        for t in range(1, 4):
            hidden, state = model.decoder(
                inputs[:, :t] if t == 1 else inputs[rows, :t], states if t == 1 else sub, state
            )
            if t == 1:
                state = model.reorder_decoder_incremental_state(state, rows)
        assert torch.allclose(hidden[:, -1], full[rows, 2], atol=1e-5)
    first, _ = model.greedy_decode(context, speakers, maxlen=8)
    again, _ = tiny_model().eval().greedy_decode(context, speakers, maxlen=8)
    assert torch.equal(first, again) and first.shape[0] == 8


def test_config_defaults_are_the_references_moel_command():
    config = MoelConfig()
    size = config.size
    assert (size.embedding_size, size.n_layers, size.n_heads, size.attention_size, size.ffn_size) == (300, 1, 2, 40, 50)
    assert (config.top_k, config.shared_listener, config.oracle_schedule, config.n_listeners) == (5, True, 10000.0, 32)
    assert (config.emotion_loss_weight, config.response_weight, size.dropout) == (1.0, 1.0, 0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.top_k = 3
