"""ETHREED as a plain torch module: shapes, the equations' invariants, ablations, overfitting
real ED conversations (the embedded sample) and the paper-config parameter count."""
import os

import pytest
import torch

from parlai_empathy.data import ed_raw, ed_source
from parlai_empathy.data.emotions import NUM_EMOTIONS, emotion_to_id
from parlai_empathy.models.attention import BilinearAttention, coverage_loss, masked_softmax
from parlai_empathy.models.embeddings import WordEmbedding
from parlai_empathy.models.ethreed import (
    IGNORE, LISTENER, SPEAKER, Ethreed, EthreedConfig, classifier_kl,
)

PAD, START, END, UNK = 0, 1, 2, 3
STEPS = 80  # Adam steps to memorize six real listener responses


class Vocab:
    """Whitespace words of real ED text; ids 0-3 are the special tokens."""

    def __init__(self, texts):
        self.ids = {'__null__': PAD, '__start__': START, '__end__': END, '__unk__': UNK}
        for text in texts:
            for word in text.lower().split():
                self.ids.setdefault(word, len(self.ids))

    def __len__(self):
        return len(self.ids)

    def encode(self, text):
        return [self.ids.get(w, UNK) for w in text.lower().split()]


@pytest.fixture(scope='module')
def conversations():
    convs, _ = ed_raw.read_clean(os.path.join(ed_source.sample_dir(), 'train.csv'))
    return convs


def make_batch(vocab, examples):
    """examples: (context texts, response text, speaker emotion) -> model inputs, ys, labels."""
    utterances = [vocab.encode(t) for ctx, _, _ in examples for t in ctx]
    lengths = torch.tensor([len(u) for u in utterances])
    tokens = torch.zeros(len(utterances), max(int(lengths.max()), 1), dtype=torch.long)
    for i, u in enumerate(utterances):
        tokens[i, : len(u)] = torch.tensor(u, dtype=torch.long)
    turns = max(len(ctx) for ctx, _, _ in examples)
    roles = torch.zeros(len(examples), turns, dtype=torch.long)
    turn_labels = torch.full((len(examples), turns), IGNORE)
    for b, (ctx, _, emotion) in enumerate(examples):
        for t in range(len(ctx)):
            roles[b, t] = SPEAKER if t % 2 == 0 else LISTENER
            if t % 2 == 0:
                turn_labels[b, t] = emotion_to_id(emotion)
    responses = [vocab.encode(r)[:20] + [END] for _, r, _ in examples]
    ys = torch.zeros(len(examples), max(len(r) for r in responses), dtype=torch.long)
    for b, r in enumerate(responses):
        ys[b, : len(r)] = torch.tensor(r)
    xs = (tokens, lengths, torch.tensor([len(ctx) for ctx, _, _ in examples]), roles)
    return xs, ys, turn_labels, torch.full((len(examples),), IGNORE)


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
    config = EthreedConfig(hidden=hidden, **switches)
    return Ethreed(WordEmbedding(len(vocab), hidden, PAD), len(vocab), config, PAD, START, END)


@pytest.fixture(scope='module')
def data(conversations):
    examples = listener_examples(conversations, 6)
    vocab = Vocab([t for ctx, r, _ in examples for t in ctx + [r]])
    return vocab, examples


def test_shapes_and_distribution_sums_to_one(data):
    vocab, examples = data
    model = build(vocab)
    xs, ys, turn_labels, response_labels = make_batch(vocab, examples)
    log_probs, preds, enc = model(*xs, ys=ys)
    batch, turns = xs[3].shape
    assert log_probs.shape == (batch, ys.size(1), len(vocab)) and preds.shape == ys.shape
    assert enc.aux['turn_emotion_logits'].shape == (batch, turns, NUM_EMOTIONS)
    assert enc.aux['speaker_logits'].shape == enc.aux['responder_logits'].shape == (batch, NUM_EMOTIONS)
    # pointer-generator: p_gen P_vocab + (1 - p_gen) P_copy is a distribution
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(batch, ys.size(1)))
    # the memory is the answered (last) utterance
    last = torch.cumsum(xs[2], 0) - 1
    assert torch.equal(enc.aux['source_tokens'], xs[0][last, : enc.memory.size(1)])
    total, parts = model.extra_losses(enc, turn_labels, response_labels, int(ys.ne(PAD).sum()))
    assert torch.isfinite(total) and set(parts) == {'emo', 'kl', 'cov'}
    assert float(parts['kl']) >= 0 and float(parts['cov']) >= 0


def test_copy_puts_mass_on_source_words_and_empty_turn_does_not_copy(data):
    vocab, examples = data
    model = build(vocab).eval()
    with torch.no_grad():
        model.decoder.copy_switch.bias.fill_(-50.0)  # p_gen ~ 0: copy only
    xs, ys, _, _ = make_batch(vocab, examples[:2])
    log_probs, _, enc = model(*xs, ys=ys)
    source = enc.aux['source_tokens'][0]
    on_source = log_probs[0].exp()[:, source[source.ne(PAD)].unique()].sum(-1)
    assert (on_source > 0.999).all()

    # an empty turn (length 0): nothing to copy, the vocabulary distribution takes over
    empty = (torch.zeros(1, 1, dtype=torch.long), torch.tensor([0]), torch.tensor([1]),
             torch.tensor([[SPEAKER]]))
    log_probs, _, enc = model(*empty, ys=ys[:1])
    assert not enc.keep.any()
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(1, ys.size(1)))
    tokens, _ = model.greedy_decode(*empty, maxlen=5)
    assert tokens.shape[0] == 1


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
    model = build(vocab).eval()
    short = [e for e in examples if len(e[0]) == 1][0]
    long = max(examples, key=lambda e: len(e[0]))
    assert len(long[0]) > 1
    with torch.no_grad():
        xs, ys, _, _ = make_batch(vocab, [short])
        alone, _, _ = model(*xs, ys=ys)
        xs, ys2, _, _ = make_batch(vocab, [short, long])
        together, _, _ = model(*xs, ys=ys2)
    torch.testing.assert_close(together[0, : ys.size(1)], alone[0], atol=1e-5, rtol=1e-4)


def test_incremental_decoding_matches_teacher_forcing(data):
    vocab, examples = data
    model = build(vocab).eval()
    xs, ys, _, _ = make_batch(vocab, examples[:3])
    with torch.no_grad():
        forced, _, enc = model(*xs, ys=ys)
        inputs = torch.cat([torch.full((3, 1), START), ys[:, :-1]], dim=1)
        state, steps = None, []
        for t in range(inputs.size(1)):
            scores, state = model.decoder(inputs[:, : t + 1], enc, state)
            steps.append(model.output(scores[:, -1]))
    torch.testing.assert_close(torch.stack(steps, 1), forced, atol=1e-5, rtol=1e-4)


def test_attention_coverage_and_kl_behaviour():
    keep = torch.tensor([[True, True, False]])
    weights = masked_softmax(torch.tensor([[1.0, 2.0, 9.0]]), keep)
    assert weights[0, 2] == 0 and abs(float(weights.sum()) - 1) < 1e-6
    assert masked_softmax(torch.zeros(1, 2), torch.zeros(1, 2, dtype=torch.bool)).abs().sum() == 0
    # coverage loss: 0 on fresh positions, the overlap min(a, c) on covered ones
    assert float(coverage_loss(torch.tensor([[0.5, 0.5]]), torch.zeros(1, 2))) == 0
    assert abs(float(coverage_loss(torch.tensor([[0.7, 0.3]]), torch.tensor([[1.0, 0.1]]))) - 0.8) < 1e-6
    # a negative coverage weight steers attention away from what is covered
    attention = BilinearAttention(4, 4, coverage=True)
    memory, query = torch.randn(1, 3, 4), torch.randn(1, 4)
    keep = torch.ones(1, 3, dtype=torch.bool)
    with torch.no_grad():
        attention.coverage_weight.fill_(-5.0)
    fresh = attention(query, memory, keep, torch.zeros(1, 3))[1]
    covered = attention(query, memory, keep, torch.tensor([[1.0, 0.0, 0.0]]))[1]
    assert covered[0, 0] < fresh[0, 0]
    logits = torch.randn(4, NUM_EMOTIONS)
    assert torch.allclose(classifier_kl(logits, logits), torch.zeros(4), atol=1e-6)
    assert (classifier_kl(logits, torch.randn(4, NUM_EMOTIONS)) > 0).all()


@pytest.mark.parametrize('switch', ['policy', 'gps', 'party_gru', 'emotion_gru', 'emotion_track'])
def test_each_ablation_changes_the_computation(data, switch):
    vocab, examples = data
    full, ablated = build(vocab), build(vocab, **{switch: False})
    xs, ys, turn_labels, response_labels = make_batch(vocab, examples)
    shapes = {name: value.shape for name, value in full.state_dict().items()}
    shared = {k: v for k, v in ablated.state_dict().items() if shapes.get(k) == v.shape}
    full.load_state_dict(shared, strict=False)  # every weight both have is equal
    full.eval(), ablated.eval()
    with torch.no_grad():
        lp_full, _, enc_full = full(*xs, ys=ys)
        lp_abl, _, enc_abl = ablated(*xs, ys=ys)
    n = int(ys.ne(PAD).sum())
    _, parts_full = full.extra_losses(enc_full, turn_labels, response_labels, n)
    _, parts_abl = ablated.extra_losses(enc_abl, turn_labels, response_labels, n)
    if switch == 'gps':
        assert float(parts_full['kl']) > 0 and float(parts_abl['kl']) == 0
        assert ablated.encoder.policy is not None
    else:
        assert not torch.allclose(lp_full, lp_abl)
    if switch in ('policy', 'emotion_track'):
        assert ablated.encoder.policy is None and float(parts_abl['kl']) == 0
    if switch == 'emotion_track':
        assert ablated.decoder.emotion_attention is None
    if switch == 'party_gru':
        assert ablated.encoder.tracker.party_gru is None
    if switch == 'emotion_gru':
        assert ablated.encoder.tracker.emotion_gru is None


def test_loss_decreases_overfitting_real_conversations(data):
    vocab, examples = data
    model = build(vocab, hidden=32)
    xs, ys, turn_labels, response_labels = make_batch(vocab, examples)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    real = ys.ne(PAD)
    history = []
    for _ in range(STEPS):
        log_probs, _, enc = model(*xs, ys=ys)
        nll = -(log_probs.gather(2, ys.unsqueeze(2)).squeeze(2) * real).sum() / real.sum()
        extra, parts = model.extra_losses(enc, turn_labels, response_labels, int(real.sum()))
        loss = nll + extra
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append((float(nll.detach()), float(parts["emo"])))
    assert history[-1][0] < 0.2 * history[0][0]  # L3 memorized
    assert history[-1][1] < 0.3 * history[0][1]  # L1 fits the speaker labels
    model.eval()
    tokens, _ = model.greedy_decode(*xs, maxlen=ys.size(1))
    assert (tokens[:, :3] == ys[:, :3]).float().mean() > 0.8


def test_parameter_count_in_paper_config_is_near_the_papers():
    vocab_size = 8648  # the reference implementation's ED vocabulary
    model = Ethreed(WordEmbedding(vocab_size, 300), vocab_size, EthreedConfig(hidden=300))
    count = sum(p.numel() for p in model.parameters())
    assert abs(count - 11.98e6) / 11.98e6 < 0.10, count
    smaller = Ethreed(WordEmbedding(vocab_size, 300), vocab_size,
                      EthreedConfig(hidden=300, party_gru=False, emotion_gru=False))
    assert sum(p.numel() for p in smaller.parameters()) < count
