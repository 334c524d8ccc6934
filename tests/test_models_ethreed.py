"""ETHREED as a plain torch module: shapes, the equations' invariants, the extended vocabulary,
the reference's initialisation and loss weights, ablations, overfitting real ED conversations (the
embedded sample) and the paper-config parameter count."""

import os

import pytest
import torch
import torch.nn.functional as F

from parlai_empathy.data import ed_raw, ed_source
from parlai_empathy.data.emotions import NUM_EMOTIONS, emotion_to_id
from parlai_empathy.models.attention import (
    Bilinear,
    BilinearAttention,
    SimpleAttention,
    coverage_loss,
    masked_softmax,
)
from parlai_empathy.models.embeddings import WordEmbedding
from parlai_empathy.models.ethreed import (
    IGNORE,
    LISTENER,
    SPEAKER,
    Ethreed,
    EthreedConfig,
    classifier_kl,
)

PAD, START, END, UNK = 0, 1, 2, 3
STEPS = 80  # Adam steps to memorize six real listener responses


class Vocab:
    """Whitespace words of real ED text; ids 0-3 are the special tokens. Words in ``hidden``
    stay out of the vocabulary (they are the out-of-vocabulary words of the tests)."""

    def __init__(self, texts, hidden=()):
        self.ids = {'__null__': PAD, '__start__': START, '__end__': END, '__unk__': UNK}
        for text in texts:
            for word in text.lower().split():
                if word not in hidden:
                    self.ids.setdefault(word, len(self.ids))

    def __len__(self):
        return len(self.ids)

    def encode(self, text):
        return [self.ids.get(w, UNK) for w in text.lower().split()]

    def extend(self, text):
        """The ids with the text's unknown words numbered from len(vocab), as the agent does."""
        oov, out = [], []
        for word in text.lower().split():
            if word in self.ids:
                out.append(self.ids[word])
            else:
                oov.append(word) if word not in oov else None
                out.append(len(self) + oov.index(word))
        return out, oov


@pytest.fixture(scope='module')
def conversations():
    convs, _ = ed_raw.read_clean(os.path.join(ed_source.sample_dir(), 'train.csv'))
    return convs


def make_batch(vocab, examples):
    """examples: (context texts, response text, speaker emotion) -> model inputs, ys, labels.

    Utterances end with the end token; the answered one is also given with extended ids, and
    response words that are unknown words of it get those ids."""
    utterances = [vocab.encode(t) + [END] for ctx, _, _ in examples for t in ctx]
    lengths = torch.tensor([len(u) for u in utterances])
    tokens = torch.zeros(len(utterances), int(lengths.max()), dtype=torch.long)
    for i, u in enumerate(utterances):
        tokens[i, : len(u)] = torch.tensor(u, dtype=torch.long)
    turns = max(len(ctx) for ctx, _, _ in examples)
    roles = torch.zeros(len(examples), turns, dtype=torch.long)
    answered = torch.full((len(examples),), IGNORE)
    sources, responses = [], []
    for b, (ctx, response, emotion) in enumerate(examples):
        for t in range(len(ctx)):
            roles[b, t] = SPEAKER if (len(ctx) - 1 - t) % 2 == 0 else LISTENER
        answered[b] = emotion_to_id(emotion)
        source, oov = vocab.extend(ctx[-1])
        sources.append(source + [END])
        ys = [len(vocab) + oov.index(w) if w in oov else vocab.ids.get(w, UNK) for w in response.lower().split()[:20]]
        responses.append(ys + [END])
    source_tokens = torch.zeros(len(examples), int(lengths.max()), dtype=torch.long)
    for b, s in enumerate(sources):
        source_tokens[b, : len(s)] = torch.tensor(s)
    ys = torch.zeros(len(examples), max(len(r) for r in responses), dtype=torch.long)
    for b, r in enumerate(responses):
        ys[b, : len(r)] = torch.tensor(r)
    xs = (tokens, lengths, torch.tensor([len(ctx) for ctx, _, _ in examples]), roles, source_tokens)
    return xs, ys, answered, torch.full((len(examples),), IGNORE)


def listener_examples(conversations, n):
    """Listener responses with their whole preceding dialogue, from real conversations."""
    out = []
    for conv in conversations:
        texts = [u.text for u in conv.utterances]
        for position in range(1, len(texts), 2):
            out.append((texts[:position], texts[position], conv.emotion))
        if len(out) >= n:
            return out[:n]
    return out


def build(vocab, hidden=24, **switches):
    torch.manual_seed(0)
    config = EthreedConfig(hidden_size=hidden, **{'dropout': 0.0, **switches})
    return Ethreed(WordEmbedding(len(vocab), hidden, PAD), len(vocab), config, PAD, START, END, UNK)


@pytest.fixture(scope='module')
def data(conversations):
    examples = listener_examples(conversations, 6)
    vocab = Vocab([t for ctx, r, _ in examples for t in ctx + [r]])
    return vocab, examples


@pytest.fixture(scope='module')
def copy_data(conversations):
    """A real example whose response repeats a word of the speaker's utterance, that word kept
    out of the vocabulary."""
    for ctx, response, emotion in listener_examples(conversations, 200):
        shared = [
            w for w in response.lower().split()[:20] if w in ctx[-1].lower().split() and len(w) > 4 and w.isalpha()
        ]
        if shared:
            examples = [(ctx, response, emotion)]
            return Vocab([t for t in ctx + [response]], hidden={shared[0]}), examples, shared[0]
    raise AssertionError('no listener response in the sample repeats a word of its context')


def test_shapes_and_distribution_sums_to_one_over_the_extended_vocabulary(data):
    vocab, examples = data
    model = build(vocab).eval()
    xs, ys, answered, responder = make_batch(vocab, examples)
    enc = model.encoder(*xs)
    log_probs, preds = model.decode_forced(enc, ys)
    batch = xs[3].size(0)
    assert log_probs.shape[:2] == ys.shape and log_probs.size(2) >= len(vocab)
    assert enc.aux.speaker_logits.shape == enc.aux.responder_logits.shape == (batch, NUM_EMOTIONS)
    # P = (1 - p_ptr) P_vocab + p_ptr P_copy is a distribution over the extended vocabulary
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(ys.shape))
    # the memory is the answered (last) utterance, with its extended ids as copy source
    assert torch.equal(enc.aux.source_tokens, xs[4][:, : enc.memory.size(1)])
    # the loss path scores targets without building P over the whole vocabulary: same numbers
    response = model.response_loss(enc, ys)
    real = ys.ne(PAD)
    gathered = log_probs.gather(2, ys.unsqueeze(2)).squeeze(2)
    torch.testing.assert_close(response.nll, -(gathered * real).sum(1))
    torch.testing.assert_close(response.correct, ((preds == ys) & real).sum(1).float())
    total, parts = model.extra_losses(enc, answered, responder)
    assert torch.isfinite(total) and set(parts) == {'emo', 'kl', 'cov'}
    assert float(parts['kl']) >= 0 and float(parts['cov']) >= 0


def test_the_mixture_is_of_probabilities_not_logits(data):
    """P(w) = (1 - p_ptr) softmax(z)(w) + p_ptr sum_{j: x_j = w} a_j, exactly (the reference
    mixes p_gen times the raw logits instead)."""
    vocab, examples = data
    model = build(vocab).eval()
    xs, ys, _, _ = make_batch(vocab, examples[:3])
    enc = model.encoder(*xs)
    steps = model._teacher_forced(enc, ys)
    decoder = model.decoder
    features = torch.cat(
        [
            steps.hidden,
            torch.tanh(
                decoder.emotion_gate(
                    steps.previous, enc.aux.response_emotion.unsqueeze(1).expand_as(steps.previous).contiguous()
                )
            )
            * enc.aux.response_emotion.unsqueeze(1),
        ],
        dim=-1,
    )
    p_vocab = torch.softmax(decoder.vocab_output(decoder.pre_output(features)), dim=-1)
    p_ptr = torch.sigmoid(decoder.copy_switch(torch.cat([steps.inputs, steps.context, steps.previous], -1)))
    source = enc.aux.source_tokens
    expected = torch.zeros(*ys.shape, max(len(vocab), int(source.max()) + 1))
    expected[:, :, : len(vocab)] = (1 - p_ptr) * p_vocab
    expected.scatter_add_(2, source.unsqueeze(1).expand(-1, ys.size(1), -1), p_ptr * steps.attention)
    torch.testing.assert_close(decoder.log_probs(steps, enc).exp(), expected)


def test_a_source_word_outside_the_vocabulary_is_scored_and_generated(copy_data):
    vocab, examples, word = copy_data
    model = build(vocab).eval()
    xs, ys, _, _ = make_batch(vocab, examples)
    oov_id = len(vocab)
    assert word not in vocab.ids and int(xs[4].max()) == oov_id  # the answered utterance has it
    assert (ys == oov_id).any()  # ... and so has the gold response, under the same extended id
    assert not (xs[0] >= len(vocab)).any()  # the encoder only ever sees vocabulary ids
    enc = model.encoder(*xs)
    # scored: the target's probability is the copy mass on the word's source positions
    log_probs, _ = model.decode_forced(enc, ys)
    steps = model._teacher_forced(enc, ys)
    at = (ys[0] == oov_id).nonzero()[0, 0]
    p_ptr = torch.sigmoid(model.decoder.copy_switch(torch.cat([steps.inputs, steps.context, steps.previous], -1)))[
        0, at, 0
    ]
    mass = steps.attention[0, at][xs[4][0, : enc.memory.size(1)] == oov_id].sum()
    torch.testing.assert_close(log_probs[0, at, oov_id].exp(), p_ptr * mass)
    response = model.response_loss(enc, ys)
    assert torch.isfinite(response.nll).all()
    # generated: with the switch on copying and attention on the word, greedy decoding emits it
    with torch.no_grad():
        model.decoder.copy_switch.weight.zero_()
        model.decoder.copy_switch.bias.fill_(30.0)
    only_word = xs[4].eq(oov_id).float() * 50.0
    original = model.decoder.attention.forward

    def towards_the_word(query, memory, keep, coverage=None, keys=None):
        weights = masked_softmax(only_word[:, : memory.size(1)], keep)
        return torch.bmm(weights.unsqueeze(1), memory).squeeze(1), weights

    model.decoder.attention.forward = towards_the_word
    tokens, _ = model.greedy_decode(*xs, maxlen=3)
    model.decoder.attention.forward = original
    assert int(tokens[0, 0]) == oov_id


def test_an_empty_turn_does_not_copy(data):
    vocab, examples = data
    model = build(vocab).eval()
    _, ys, _, _ = make_batch(vocab, examples[:1])
    empty = (torch.zeros(1, 1, dtype=torch.long), torch.tensor([0]), torch.tensor([1]), torch.tensor([[SPEAKER]]))
    log_probs, _ = model.decode_forced(model.encoder(*empty), ys)
    assert not model.encoder(*empty).keep.any()
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(1, ys.size(1)))
    tokens, _ = model.greedy_decode(*empty, maxlen=5)
    assert tokens.shape[0] == 1


def test_the_policy_samples_at_test_time_too(data):
    vocab, examples = data
    model = build(vocab).eval()
    xs, _, _, _ = make_batch(vocab, examples)
    with torch.no_grad():
        first = model.encoder(*xs).aux.response_emotion
        second = model.encoder(*xs).aux.response_emotion
        torch.manual_seed(3)
        third = model.encoder(*xs).aux.response_emotion
        torch.manual_seed(3)
        again = model.encoder(*xs).aux.response_emotion
    assert not torch.allclose(first, second)  # R = mu + sigma * eps, eps drawn in eval as well
    torch.testing.assert_close(third, again)
    policy = model.encoder.policy
    assert [type(layer) for layer in policy.state] == [torch.nn.Linear, torch.nn.Tanh] * 2


def test_gru_initialisation_is_the_references(data):
    vocab, _ = data
    model = build(vocab, hidden=12)
    grus = [m for m in model.modules() if isinstance(m, (torch.nn.GRU, torch.nn.GRUCell))]
    assert len(grus) == 6  # utterance Bi-GRU, global, party, emotion, content, decoder
    for module in grus:
        for name, param in module.named_parameters():
            if name.startswith('weight_hh'):  # [3H, H] with orthonormal columns
                torch.testing.assert_close(param.t() @ param, torch.eye(param.size(1)), atol=1e-5, rtol=0)
            if name.startswith('bias_hh'):
                size = param.size(0) // 3
                assert torch.all(param[size : 2 * size] == 2.0)  # the update gate z
                assert not torch.all(param[:size] == 2.0) and not torch.all(param[2 * size :] == 2.0)
    assert 0 <= float(model.decoder.attention.coverage_weight.detach()) < 1


def test_dropout_reaches_every_tracker_state_and_the_planned_emotion(data):
    vocab, examples = data
    model = build(vocab, dropout=0.5)
    xs, _, _, _ = make_batch(vocab, examples)
    model.train()
    aux = model.encoder(*xs).aux
    for name in ('global_last', 'content'):
        assert (getattr(aux.tracker, name) == 0).float().mean() > 0.3, name  # about half the units dropped
    for name in ('party', 'emotion'):
        assert (getattr(aux.tracker, name)[:, SPEAKER] == 0).float().mean() > 0.3, name
    model.eval()
    aux = model.encoder(*xs).aux
    assert (aux.tracker.content == 0).float().mean() < 0.05


def test_loss_weights_are_the_references_and_kl_is_the_papers(data):
    vocab, examples = data
    model = build(vocab).train()
    xs, ys, answered, _ = make_batch(vocab, examples)
    responder = torch.tensor([5, IGNORE, 7, 1, IGNORE, 30])
    response, _, enc = model(*xs, ys=ys, loss_smoothing=0.0)
    total, parts = model.extra_losses(enc, answered, responder)
    aux = enc.aux
    l1 = 0.5 * F.cross_entropy(aux.answered_logits, answered) + 0.5 * F.cross_entropy(
        aux.real_responder_logits, responder, ignore_index=IGNORE
    )
    q = torch.softmax(aux.responder_logits, -1)  # the policy's
    p = torch.softmax(aux.real_responder_logits, -1)  # the real listener's
    l2 = (q * (q.log() - p.log())).sum(-1).mean()  # KL(q || p), weight 1
    l4 = (aux.coverage_loss / 40).mean()
    torch.testing.assert_close(parts['emo'], l1.detach())
    torch.testing.assert_close(parts['kl'], l2.detach())
    torch.testing.assert_close(parts['cov'], l4.detach())
    torch.testing.assert_close(total, l1 + l2 + l4)
    # the coverage loss is the overlap with the running maximum of earlier attention, real steps only
    steps = model._teacher_forced(enc, ys)
    coverage = torch.zeros_like(steps.attention[:, 0])
    expected = torch.zeros(ys.shape)
    for t in range(ys.size(1)):
        expected[:, t] = coverage_loss(steps.attention[:, t], coverage)
        coverage = torch.maximum(coverage, steps.attention[:, t])
    torch.testing.assert_close(aux.coverage_loss, (expected * ys.ne(PAD)).sum(1), atol=1e-4, rtol=1e-4)


def test_utterance_vector_is_forward_last_backward_first_and_padding_free(data):
    vocab, examples = data
    model = build(vocab).eval()
    encoder = model.encoder.utterances
    sentence = torch.tensor([vocab.encode(examples[0][0][0])])
    u_alone, _ = encoder(sentence, torch.tensor([sentence.size(1)]))
    outputs, _ = encoder.gru(encoder.words(sentence))
    hidden = encoder.gru.hidden_size
    torch.testing.assert_close(u_alone[0], torch.cat([outputs[0, -1, :hidden], outputs[0, 0, hidden:]]))
    padded = torch.zeros(2, sentence.size(1) + 7, dtype=torch.long)
    padded[0, : sentence.size(1)] = sentence[0]
    padded[1, :] = 5
    u_batched, _ = encoder(padded, torch.tensor([sentence.size(1), padded.size(1)]))
    torch.testing.assert_close(u_batched[0], u_alone[0])


def test_dialogue_is_encoded_the_same_alone_or_beside_a_longer_one(data):
    vocab, examples = data
    model = build(vocab, emp_policy=False).eval()  # the policy samples: compare without it
    short = [e for e in examples if len(e[0]) == 1][0]
    long = max(examples, key=lambda e: len(e[0]))
    assert len(long[0]) > 1
    with torch.no_grad():
        xs, ys, _, _ = make_batch(vocab, [short])
        alone, _ = model.decode_forced(model.encoder(*xs), ys)
        xs, ys2, _, _ = make_batch(vocab, [short, long])
        together, _ = model.decode_forced(model.encoder(*xs), ys2)
    width = min(alone.size(2), together.size(2))
    torch.testing.assert_close(together[0, : ys.size(1), :width].exp(), alone[0, :, :width].exp(), atol=1e-5, rtol=1e-4)


def test_incremental_decoding_matches_teacher_forcing(data):
    vocab, examples = data
    model = build(vocab).eval()
    xs, ys, _, _ = make_batch(vocab, examples[:3])
    with torch.no_grad():
        enc = model.encoder(*xs)
        forced, _ = model.decode_forced(enc, ys)
        inputs = torch.cat([torch.full((3, 1), START), ys[:, :-1]], dim=1)
        state, steps = None, []
        for t in range(inputs.size(1)):
            scores, state = model.decoder(inputs[:, : t + 1], enc, state)
            steps.append(model.output(scores[:, -1]))
    torch.testing.assert_close(torch.stack(steps, 1).exp(), forced.exp(), atol=1e-5, rtol=1e-4)


def test_mixing_at_the_source_positions_gives_the_whole_vocabularys_values(copy_data, data):
    """log_probs mixes the copy mass in at the source's words only; the values must be those of
    the mixture written over every word of the extended vocabulary (what it did before) up to the
    last bit of logaddexp, whose vectorised and scalar CPU loops round differently (which loop an
    element gets depends on its offset in the tensor), and with the same best word everywhere."""
    from parlai_empathy.models.ethreed import _log_or_minus_inf

    for vocab, examples in (copy_data[:2], data):
        model = build(vocab).eval()
        xs, ys, _, _ = make_batch(vocab, examples)
        with torch.no_grad():
            enc = model.encoder(*xs)
            steps = model._teacher_forced(enc, ys)
            generate, copy = model.decoder.distributions(steps, enc.aux, enc.keep)
            source = enc.aux.source_tokens
            size = max(len(vocab), int(source.max()) + 1)
            copied = generate.new_zeros(*generate.shape[:2], size).scatter_add_(
                2, source.unsqueeze(1).expand(-1, ys.size(1), -1), steps.attention
            )
            whole = torch.logaddexp(
                F.pad(generate, (0, size - len(vocab)), value=float('-inf')),
                copy.unsqueeze(2) + _log_or_minus_inf(copied),
            )
            mixed = model.decoder.log_probs(steps, enc)
            assert torch.equal(mixed.isinf(), whole.isinf())
            finite = whole.isfinite()
            torch.testing.assert_close(mixed[finite], whole[finite], rtol=2**-22, atol=0)
            assert torch.equal(mixed.argmax(-1), whole.argmax(-1))


def test_the_attention_keys_are_projected_once_per_search(data):
    """The decoder state carries W m; a step gives the same scores as projecting it anew."""
    vocab, examples = data
    model = build(vocab).eval()
    xs, _, _, _ = make_batch(vocab, examples[:3])
    calls = []
    project = model.decoder.attention.project
    model.decoder.attention.project = lambda memory: calls.append(1) or project(memory)
    with torch.no_grad():
        enc = model.encoder(*xs)
        tokens, state = torch.full((3, 1), START), None
        for _ in range(4):
            scores, state = model.decoder(tokens, enc, state)
            tokens = torch.cat([tokens, scores[:, -1:].argmax(-1)], dim=1)
        assert len(calls) == 1
        assert torch.equal(state['keys'], project(enc.memory))


def test_attention_coverage_and_kl_behaviour():
    keep = torch.tensor([[True, True, False]])
    weights = masked_softmax(torch.tensor([[1.0, 2.0, 9.0]]), keep)
    assert weights[0, 2] == 0 and abs(float(weights.sum()) - 1) < 1e-6
    assert masked_softmax(torch.zeros(1, 2), torch.zeros(1, 2, dtype=torch.bool)).abs().sum() == 0
    # coverage loss: 0 on fresh positions, the overlap min(a, c) on covered ones
    assert float(coverage_loss(torch.tensor([[0.5, 0.5]]), torch.zeros(1, 2))) == 0
    assert abs(float(coverage_loss(torch.tensor([[0.7, 0.3]]), torch.tensor([[1.0, 0.1]]))) - 0.8) < 1e-6
    # w_c log(c + eps): the same for every position at the start (no effect), then a positive
    # weight favours covered positions and a negative one steers away from them
    attention = BilinearAttention(4, 4, coverage=True, bias=True, squash=True)
    memory, query = torch.randn(1, 3, 4), torch.randn(1, 4)
    keep = torch.ones(1, 3, dtype=torch.bool)
    with torch.no_grad():
        attention.coverage_weight.fill_(-0.5)
    plain = BilinearAttention(4, 4, bias=True, squash=True)
    plain.load_state_dict({k: v for k, v in attention.state_dict().items() if k != 'coverage_weight'})
    torch.testing.assert_close(attention(query, memory, keep, torch.zeros(1, 3))[1], plain(query, memory, keep)[1])
    fresh = attention(query, memory, keep, torch.full((1, 3), 0.3))[1]
    covered = attention(query, memory, keep, torch.tensor([[0.9, 0.3, 0.3]]))[1]
    assert covered[0, 0] < fresh[0, 0]
    # the simple attention ignores its query
    simple = SimpleAttention(4)
    torch.testing.assert_close(simple(query, memory, keep)[1], simple(-query, memory, keep)[1])
    logits = torch.randn(4, NUM_EMOTIONS)
    assert torch.allclose(classifier_kl(logits, logits), torch.zeros(4), atol=1e-6)
    assert (classifier_kl(logits, torch.randn(4, NUM_EMOTIONS)) > 0).all()


@pytest.mark.parametrize('out_features,bias', [(1, True), (3, True), (2, False)])
def test_bilinear_is_nn_bilinear(out_features, bias):
    """The decoder's emotion gate: our matrix-product Bilinear computes nn.Bilinear's function and
    gradients (to float rounding) with the same parameters and state dict."""
    torch.manual_seed(0)
    ours = Bilinear(5, 7, out_features, bias=bias)
    theirs = torch.nn.Bilinear(5, 7, out_features, bias=bias)
    theirs.load_state_dict(ours.state_dict())
    assert list(ours.state_dict()) == list(theirs.state_dict())
    x1, x2 = torch.randn(4, 6, 5, requires_grad=True), torch.randn(4, 6, 7, requires_grad=True)
    mine, reference = ours(x1, x2), theirs(x1, x2)
    torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-6)
    grads = torch.autograd.grad(mine.sin().sum(), [x1, x2, *ours.parameters()])
    expected = torch.autograd.grad(reference.sin().sum(), [x1, x2, *theirs.parameters()])
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    # a single example without the batch dimensions, as nn.Bilinear accepts it
    torch.testing.assert_close(ours(x1[0, 0], x2[0, 0]), theirs(x1[0, 0], x2[0, 0]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('switch', ['emp_policy', 'gps', 'party_gru', 'emotion_gru', 'emo_track'])
def test_each_ablation_changes_the_computation(data, switch):
    vocab, examples = data
    full, ablated = build(vocab), build(vocab, **{switch: False})
    xs, ys, answered, responder = make_batch(vocab, examples)
    shapes = {name: value.shape for name, value in full.state_dict().items()}
    shared = {k: v for k, v in ablated.state_dict().items() if shapes.get(k) == v.shape}
    full.load_state_dict(shared, strict=False)  # every weight both have is equal
    full.eval(), ablated.eval()
    with torch.no_grad():
        torch.manual_seed(1)
        lp_full, _, enc_full = full(*xs, ys=ys, loss_smoothing=0.0)
        torch.manual_seed(1)
        lp_abl, _, enc_abl = ablated(*xs, ys=ys, loss_smoothing=0.0)
    _, parts_full = full.extra_losses(enc_full, answered, responder)
    _, parts_abl = ablated.extra_losses(enc_abl, answered, responder)
    if switch == 'gps':
        assert float(parts_full['kl']) > 0 and float(parts_abl['kl']) == 0
        assert ablated.encoder.policy is not None
    else:
        assert not torch.equal(lp_full.nll, lp_abl.nll)
    if switch in ('party_gru', 'emotion_gru'):  # the tracked emotions themselves change
        assert not torch.allclose(enc_full.aux.answered_logits, enc_abl.aux.answered_logits)
    if switch in ('emp_policy', 'emo_track'):
        assert ablated.encoder.policy is None and float(parts_abl['kl']) == 0
    if switch == 'emo_track':
        assert ablated.decoder.emotion_gate is None
    if switch == 'party_gru':
        assert ablated.encoder.tracker.party_gru is None
    if switch == 'emotion_gru':
        assert ablated.encoder.tracker.emotion_gru is None


def test_loss_decreases_overfitting_real_conversations(data):
    vocab, examples = data
    model = build(vocab, hidden=32)
    xs, ys, answered, responder = make_batch(vocab, examples)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    history = []
    for _ in range(STEPS):
        response, _, enc = model(*xs, ys=ys, loss_smoothing=0.0)
        nll = (response.nll / response.tokens).mean()
        extra, parts = model.extra_losses(enc, answered, responder)
        loss = nll + extra
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        history.append((float(nll.detach()), float(parts['emo'])))
    assert history[-1][0] < 0.2 * history[0][0]  # L3 memorized
    assert history[-1][1] < 0.3 * history[0][1]  # L1 fits the speaker labels
    model.eval()
    tokens, _ = model.greedy_decode(*xs, maxlen=ys.size(1))
    assert (tokens[:, :3] == ys[:, :3]).float().mean() > 0.8


def test_parameter_count_in_paper_config_is_near_the_papers():
    vocab_size = 8648  # the reference implementation's ED vocabulary
    model = Ethreed(WordEmbedding(vocab_size, 300), vocab_size, EthreedConfig(hidden_size=300))
    count = sum(p.numel() for p in model.parameters())
    assert abs(count - 11.98e6) / 11.98e6 < 0.10, count
    smaller = Ethreed(
        WordEmbedding(vocab_size, 300), vocab_size, EthreedConfig(hidden_size=300, party_gru=False, emotion_gru=False)
    )
    assert sum(p.numel() for p in smaller.parameters()) < count
