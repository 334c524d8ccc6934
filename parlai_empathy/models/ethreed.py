"""ETHREED: emotion tracking and constraint-guided empathetic response generation (Li et al.).

A hierarchical recurrent encoder-decoder over a multi-turn dialogue. Read top to bottom with the
paper's method section (party ids: 0 = ED Speaker, 1 = ED Listener):

1. Utterance encoding. A Bi-GRU over word embeddings; u_i = [forward last ; backward first].
   All utterances of all dialogues of a batch go through it in one packed call.
2. Dialogue tracking, one step per utterance u_t said by party s (:class:`DialogueTracker`):
   - global:  g_t = GRU_g(g_{t-1}, u_t)
   - party:   a_t = sum_j alpha_j g_j over the earlier global states, alpha = softmax(u_t^T W g_j);
              p_t = GRU_p(q_{other}, [u_t ; a_t]), the hidden state being the other party's last
              party state; p_t becomes party s's state
   - emotion: e^s_t = GRU_e(e^s_{t-1}, p_t), one emotion track per party
   - content: c_t = GRU_c(c_{t-1}, g_t)
3. L1, emotion classification of both parties at every turn: softmax(FFN(e^s_t)) against the
   speaker's ED label or the listener's tagged label.
4. L2, empathetic policy network: sta = FFN(P_e_t) on the last emotion state of the party that
   just spoke, mu = W_mu sta, log sigma^2 = W_s sta, R_e_t = mu + sigma * eps (mu at inference):
   the responder's predicted emotion representation. Constraint-based guided policy search:
   L2 = KL(q || p), q the emotion classifier's distribution for R_e_t and p for the real
   responder representation (the tracker run one more step on the gold response; training and
   teacher-forced evaluation only -- decoding never sees it).
5. L3, decoding (:class:`PointerGeneratorDecoder`). A GRU started from tanh(W c_T). At every
   step an emotion attention over [R_e_t ; e_1..e_T] gives emo_t, gated into the input by
   sigmoid(W_g [h ; emo_t]); a bilinear attention with coverage over the answered utterance
   (the speaker's) gives the context; a pointer-generator mixes the vocabulary distribution with
   copying from that utterance: P = p_gen P_vocab + (1 - p_gen) sum_{j: x_j = w} a_j.
   L3 is the NLL (computed by the agent through ParlAI).
6. L4, coverage loss sum_j min(a_j, cov_j) per target token.
Total: L1 + L2 + L3 + L4.

Ablations (:class:`EthreedConfig`): ``policy=False`` (w/o emp-policy: the responder's tracked
emotion state replaces R_e_t, no L2), ``gps=False`` (w/o GPS: the policy is kept, L2 = 0),
``party_gru=False`` (p_t = tanh(W [u_t ; a_t])), ``emotion_gru=False`` (e_t = tanh(W p_t)),
``emotion_track=False`` (w/o emo-track: no emotion reaches the decoder and no policy; L1 still
trains the tracker so that emotion accuracy stays measurable).

Nothing here imports ParlAI; the ParlAI generator contract comes from ``generator_interface``.
"""
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from parlai_empathy.data.emotions import NUM_EMOTIONS
from parlai_empathy.models.attention import BilinearAttention, coverage_loss
from parlai_empathy.models.generator_interface import EncoderStates, GeneratorModel

SPEAKER, LISTENER = 0, 1
IGNORE = -100  # label of a turn whose emotion is unknown (skipped by L1)


class EthreedConfig(NamedTuple):
    """Sizes (paper: all 300) and ablation switches (all True = the full model)."""

    hidden: int = 300
    dropout: float = 0.0
    policy: bool = True
    gps: bool = True
    party_gru: bool = True
    emotion_gru: bool = True
    emotion_track: bool = True


# ----- 1. utterance encoding --------------------------------------------------------------------
class UtteranceEncoder(nn.Module):
    """Bi-GRU over the words of every utterance; packed by real length (no padding to 40)."""

    def __init__(self, words, hidden):
        super().__init__()
        self.words = words
        self.gru = nn.GRU(words.d_model, hidden, batch_first=True, bidirectional=True)
        self.output_dim = 2 * hidden

    def forward(self, tokens, lengths):
        """``tokens [N, L]``, ``lengths [N]`` (0 allowed: an empty turn) ->
        ``(u [N, 2H], outputs [N, L, 2H])`` with u = [forward last ; backward first]."""
        embedded = self.words(tokens)
        packed = pack_padded_sequence(embedded, lengths.clamp(min=1).cpu(), batch_first=True,
                                      enforce_sorted=False)
        outputs, last = self.gru(packed)  # last [2, N, H]: forward at the end, backward at token 1
        outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=tokens.size(1))
        return torch.cat([last[0], last[1]], dim=-1), outputs


# ----- 2. dialogue tracking ---------------------------------------------------------------------
class TrackerState(NamedTuple):
    """Everything the tracker carries from one utterance to the next (batch first)."""

    global_states: torch.Tensor  # [B, t, H] g_1..g_t
    global_keep: torch.Tensor  # [B, t] which of them are real turns
    global_last: torch.Tensor  # [B, H] g_{t}
    party: torch.Tensor  # [B, 2, H] each party's last party state
    emotion: torch.Tensor  # [B, 2, H] each party's last emotion state
    content: torch.Tensor  # [B, H] c_t


def _of_party(per_party, who):
    """Row ``who[b]`` of ``per_party[b]``: ``[B, 2, H]`` x ``[B]`` -> ``[B, H]``."""
    return per_party.gather(1, who.view(-1, 1, 1).expand(-1, 1, per_party.size(2))).squeeze(1)


def _set_party(per_party, who, value, live):
    """``per_party`` with row ``who[b]`` replaced by ``value[b]`` where ``live[b]``."""
    slot = F.one_hot(who, 2).bool() & live.unsqueeze(1)  # [B, 2]
    return torch.where(slot.unsqueeze(2), value.unsqueeze(1), per_party)


class DialogueTracker(nn.Module):
    """The global, party, emotion and content GRUs, stepped one utterance at a time."""

    def __init__(self, utterance_dim, hidden, party_gru=True, emotion_gru=True):
        super().__init__()
        self.hidden = hidden
        self.global_gru = nn.GRUCell(utterance_dim, hidden)
        self.history_attention = BilinearAttention(utterance_dim, hidden)
        party_input = utterance_dim + hidden
        self.party_gru = nn.GRUCell(party_input, hidden) if party_gru else None
        self.party_ffn = None if party_gru else nn.Linear(party_input, hidden)
        self.emotion_gru = nn.GRUCell(hidden, hidden) if emotion_gru else None
        self.emotion_ffn = None if emotion_gru else nn.Linear(hidden, hidden)
        self.content_gru = nn.GRUCell(hidden, hidden)

    def initial_state(self, batch, device):
        zeros = torch.zeros(batch, self.hidden, device=device)
        return TrackerState(
            zeros.new_zeros(batch, 0, self.hidden), torch.zeros(batch, 0, dtype=torch.bool, device=device),
            zeros, zeros.new_zeros(batch, 2, self.hidden), zeros.new_zeros(batch, 2, self.hidden), zeros,
        )

    def step(self, state, u_t, who, live):
        """Track utterance ``u_t [B, Du]`` said by party ``who [B]``; rows with ``live`` False
        (dialogues that have ended) keep their state. Returns ``(state, e_t [B, H])``."""
        a_t, _ = self.history_attention(u_t, state.global_states, state.global_keep)
        g_t = self.global_gru(u_t, state.global_last)
        party_input = torch.cat([u_t, a_t], dim=-1)
        if self.party_gru is not None:
            p_t = self.party_gru(party_input, _of_party(state.party, 1 - who))
        else:
            p_t = torch.tanh(self.party_ffn(party_input))
        if self.emotion_gru is not None:
            e_t = self.emotion_gru(p_t, _of_party(state.emotion, who))
        else:
            e_t = torch.tanh(self.emotion_ffn(p_t))
        c_t = self.content_gru(g_t, state.content)
        keep = live.unsqueeze(1)
        return TrackerState(
            torch.cat([state.global_states, g_t.unsqueeze(1)], dim=1),
            torch.cat([state.global_keep, live.unsqueeze(1)], dim=1),
            torch.where(keep, g_t, state.global_last),
            _set_party(state.party, who, p_t, live),
            _set_party(state.emotion, who, e_t, live),
            torch.where(keep, c_t, state.content),
        ), e_t


# ----- 3./4. emotion classifier and empathetic policy -------------------------------------------
class EmotionClassifierHead(nn.Module):
    """FFN + softmax over the 32 ED emotions, shared by L1 and by L2's two distributions."""

    def __init__(self, hidden, n_classes=NUM_EMOTIONS):
        super().__init__()
        self.ffn = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))

    def forward(self, emotion_states):
        return self.ffn(emotion_states)


class EmpatheticPolicy(nn.Module):
    """sta = FFN(P_e_t); R_e_t ~ N(mu(sta), sigma^2(sta)), reparameterized (mu when not training)."""

    def __init__(self, hidden):
        super().__init__()
        self.state = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU())
        self.mu = nn.Linear(hidden, hidden)
        self.logvar = nn.Linear(hidden, hidden)

    def forward(self, emotion_state):
        sta = self.state(emotion_state)
        mu, logvar = self.mu(sta), self.logvar(sta)
        if not self.training:
            return mu
        return mu + torch.exp(0.5 * logvar) * torch.randn_like(mu)


def classifier_kl(q_logits, p_logits):
    """KL(q || p) per row between two emotion classifier distributions: ``[B]``, >= 0."""
    log_q, log_p = F.log_softmax(q_logits, dim=-1), F.log_softmax(p_logits, dim=-1)
    return (log_q.exp() * (log_q - log_p)).sum(dim=-1)


# ----- encoder: steps 1-4 -------------------------------------------------------------------------
class EthreedEncoder(nn.Module):
    """Utterances of a batch of dialogues -> decoder memory and emotion states.

    Inputs: ``utt_tokens [N, L]`` and ``utt_lengths [N]`` hold every utterance of every dialogue
    (dialogue 0's first, in order), ``dialogue_lengths [B]`` how many belong to each dialogue
    (>= 1), ``roles [B, T]`` the party of each (0 speaker, 1 listener). The decoder attends to and
    copies from each dialogue's last utterance, the one being answered.
    """

    def __init__(self, words, config):
        super().__init__()
        hidden = config.hidden
        self.config = config
        self.utterances = UtteranceEncoder(words, hidden)
        self.tracker = DialogueTracker(self.utterances.output_dim, hidden, config.party_gru,
                                       config.emotion_gru)
        self.classifier = EmotionClassifierHead(hidden)
        self.policy = EmpatheticPolicy(hidden) if config.policy and config.emotion_track else None
        self.decoder_init = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, utt_tokens, utt_lengths, dialogue_lengths, roles):
        if int(dialogue_lengths.min()) < 1:
            raise ValueError('every dialogue needs at least one utterance (an empty one will do)')
        batch, turns = roles.shape
        device = utt_tokens.device
        u_flat, outputs = self.utterances(utt_tokens, utt_lengths)
        valid = torch.arange(turns, device=device).unsqueeze(0) < dialogue_lengths.unsqueeze(1)
        u = u_flat.new_zeros(batch, turns, u_flat.size(1))
        u[valid] = self.dropout(u_flat)

        state = self.tracker.initial_state(batch, device)
        turn_emotions = []
        for t in range(turns):
            state, e_t = self.tracker.step(state, u[:, t], roles[:, t], valid[:, t])
            turn_emotions.append(e_t)
        turn_emotions = torch.stack(turn_emotions, dim=1)  # [B, T, H]

        # the answered utterance: decoder memory and copy source
        last = torch.cumsum(dialogue_lengths, 0) - 1
        source_lengths = utt_lengths[last]
        width = max(int(source_lengths.max()), 1)
        source_tokens = utt_tokens[last, :width]
        memory = outputs[last, :width]
        keep = torch.arange(width, device=device).unsqueeze(0) < source_lengths.unsqueeze(1)

        # 4. the responder's predicted emotion representation R_e_t
        last_party = roles.gather(1, (dialogue_lengths - 1).unsqueeze(1)).squeeze(1)
        responder = 1 - last_party
        if self.policy is not None:
            responder_emotion = self.policy(_of_party(state.emotion, last_party))
        else:
            responder_emotion = _of_party(state.emotion, responder)
        aux = {
            'source_tokens': source_tokens,
            'decoder_init': torch.tanh(self.decoder_init(state.content)),
            'emotion_memory': torch.cat([responder_emotion.unsqueeze(1), turn_emotions], dim=1),
            'emotion_keep': torch.cat([valid.new_ones(batch, 1), valid], dim=1),
            'turn_emotion_logits': self.classifier(turn_emotions),
            'speaker_logits': self.classifier(state.emotion[:, SPEAKER]),
            'responder_logits': self.classifier(responder_emotion),
            'responder': responder,
        }
        aux.update({f'tracker_{name}': value for name, value in state._asdict().items()})
        return EncoderStates(memory, keep, aux)

    def real_responder_logits(self, encoder_states, response_tokens, response_lengths):
        """Classifier logits of the responder's real emotion representation: the tracker stepped
        once more on the gold response (the constraint side of L2, and its L1 term)."""
        aux = encoder_states.aux
        state = TrackerState(**{name: aux[f'tracker_{name}'] for name in TrackerState._fields})
        u_response, _ = self.utterances(response_tokens, response_lengths)
        live = torch.ones_like(aux['responder'], dtype=torch.bool)
        _, e_real = self.tracker.step(state, u_response, aux['responder'], live)
        return self.classifier(e_real)


# ----- 5./6. decoder ------------------------------------------------------------------------------
class PointerGeneratorDecoder(nn.Module):
    """GRU decoder with emotion gating, bilinear attention with coverage and copying.

    Called as ParlAI calls a decoder (``forward(tokens, encoder_states, incr_state)``); it
    returns log-probabilities of the final (mixed) distribution, so the model's ``output`` is the
    identity and ParlAI's cross-entropy on them is exactly the NLL.
    """

    def __init__(self, words, hidden, memory_dim, vocab_size, emotion=True, dropout=0.0):
        super().__init__()
        self.words = words  # shared with the utterance encoder
        emb = words.d_model
        self.emotion_attention = BilinearAttention(hidden, hidden) if emotion else None
        self.emotion_gate = nn.Linear(2 * hidden, hidden) if emotion else None
        input_dim = emb + (hidden if emotion else 0)
        self.cell = nn.GRUCell(input_dim, hidden)
        self.attention = BilinearAttention(hidden, memory_dim, coverage=True)
        self.pre_output = nn.Linear(hidden + memory_dim, hidden)
        self.vocab_output = nn.Linear(hidden, vocab_size)
        self.copy_switch = nn.Linear(memory_dim + hidden + input_dim, 1)
        self.dropout = nn.Dropout(dropout)

    def initial_state(self, encoder_states):
        return {
            'hidden': encoder_states.aux['decoder_init'],
            'coverage': torch.zeros_like(encoder_states.keep, dtype=encoder_states.memory.dtype),
        }

    def run(self, tokens, encoder_states, state):
        """Feed ``tokens [B, T]`` (previous outputs, START first) from ``state``.

        Returns ``(log_probs [B, T, V], state, coverage_losses [B, T])``.
        """
        memory, keep, aux = encoder_states
        keys = self.attention.project(memory)
        if self.emotion_attention is not None:
            emotion_keys = self.emotion_attention.project(aux['emotion_memory'])
        hidden, coverage = state['hidden'], state['coverage']
        embedded = self.dropout(self.words(tokens))
        steps = {'hidden': [], 'context': [], 'input': [], 'attention': [], 'coverage_loss': []}
        for t in range(tokens.size(1)):
            x_t = embedded[:, t]
            if self.emotion_attention is not None:
                emo_t, _ = self.emotion_attention(hidden, aux['emotion_memory'], aux['emotion_keep'],
                                                  keys=emotion_keys)
                gate = torch.sigmoid(self.emotion_gate(torch.cat([hidden, emo_t], dim=-1)))
                x_t = torch.cat([x_t, gate * emo_t], dim=-1)
            hidden = self.cell(x_t, hidden)
            context, weights = self.attention(hidden, memory, keep, coverage, keys=keys)
            steps['coverage_loss'].append(coverage_loss(weights, coverage))
            coverage = coverage + weights
            for name, value in (('hidden', hidden), ('context', context), ('input', x_t),
                                ('attention', weights)):
                steps[name].append(value)
        stacked = {name: torch.stack(values, dim=1) for name, values in steps.items()}
        log_probs = self.mix(stacked, aux['source_tokens'], keep)
        return log_probs, {'hidden': hidden, 'coverage': coverage}, stacked['coverage_loss']

    def mix(self, steps, source_tokens, keep):
        """P = p_gen P_vocab + (1 - p_gen) P_copy for all steps at once; log P ``[B, T, V]``."""
        hidden, context = steps['hidden'], steps['context']
        features = self.dropout(torch.tanh(self.pre_output(torch.cat([hidden, context], dim=-1))))
        vocab_probs = torch.softmax(self.vocab_output(features), dim=-1)
        p_gen = torch.sigmoid(self.copy_switch(torch.cat([context, hidden, steps['input']], dim=-1)))
        has_source = keep.any(dim=1).view(-1, 1, 1)
        p_gen = torch.where(has_source, p_gen, torch.ones_like(p_gen))  # empty turn: no copying
        index = source_tokens.unsqueeze(1).expand(-1, hidden.size(1), -1)
        copy_probs = torch.zeros_like(vocab_probs).scatter_add_(2, index, steps['attention'])
        probs = p_gen * vocab_probs + (1 - p_gen) * copy_probs
        return torch.log(probs.clamp_min(1e-12))

    def forward(self, tokens, encoder_states, incr_state=None):
        if incr_state is None:
            incr_state = self.initial_state(encoder_states)
        else:
            tokens = tokens[:, -1:]  # earlier tokens are already in the recurrent state
        log_probs, state, _ = self.run(tokens, encoder_states, incr_state)
        return log_probs, state


# ----- the model ----------------------------------------------------------------------------------
class Ethreed(GeneratorModel):
    """ETHREED with ParlAI's generator interface; see the module docstring for the equations."""

    def __init__(self, words, vocab_size, config=EthreedConfig(), padding_idx=0, start_idx=1,
                 end_idx=2):
        super().__init__(padding_idx, start_idx, end_idx)
        self.config = config
        self.encoder = EthreedEncoder(words, config)
        self.decoder = PointerGeneratorDecoder(
            words, config.hidden, self.encoder.utterances.output_dim, vocab_size,
            emotion=config.emotion_track, dropout=config.dropout,
        )

    def output(self, log_probs):
        return log_probs  # the decoder already returns the final distribution

    def forward(self, *xs, ys=None, prev_enc=None, maxlen=None, bsz=None):
        """Teacher forcing: ``(log_probs [B, T, V], preds, encoder_states)``; the encoder states'
        aux also gets the per-example coverage loss sums and the real responder logits."""
        if ys is None:
            raise ValueError('forward() needs ys (teacher forcing); generation is done by search')
        self.longest_label = max(self.longest_label, ys.size(1))
        encoder_states = prev_enc if prev_enc is not None else self.encoder(*xs)
        inputs = torch.cat([self.START.expand(ys.size(0), 1), ys[:, :-1]], dim=1)
        log_probs, _, coverage = self.decoder.run(inputs, encoder_states,
                                                  self.decoder.initial_state(encoder_states))
        real = ys.ne(self.NULL_IDX)
        aux = encoder_states.aux
        aux['coverage_loss'] = (coverage * real).sum(dim=1)
        response_lengths = (real & ys.ne(self.END_IDX)).sum(dim=1)
        aux['real_responder_logits'] = self.encoder.real_responder_logits(
            encoder_states, ys, response_lengths)
        return log_probs, log_probs.argmax(dim=-1), encoder_states

    def extra_losses(self, encoder_states, turn_labels, response_labels, n_tokens):
        """L1 + L2 + L4 beside the agent's L3 (after a teacher-forced :meth:`forward`).

        ``turn_labels [B, T]``: emotion id of the party speaking at each context turn,
        ``response_labels [B]``: of the responder; IGNORE where unknown; ``n_tokens``: real
        target tokens of the batch (L4 is per token, like L3).
        Returns ``(total, {'emo': L1, 'kl': L2, 'cov': L4})``.
        """
        aux = encoder_states.aux
        turn_logits = aux['turn_emotion_logits']
        logits = torch.cat([turn_logits.reshape(-1, turn_logits.size(-1)), aux['real_responder_logits']])
        labels = torch.cat([turn_labels.reshape(-1), response_labels])
        if bool(labels.ne(IGNORE).any()):
            l1 = F.cross_entropy(logits, labels, ignore_index=IGNORE)
        else:
            l1 = logits.sum() * 0.0
        if self.encoder.policy is not None and self.config.gps:
            l2 = classifier_kl(aux['responder_logits'], aux['real_responder_logits']).mean()
        else:
            l2 = l1.new_zeros(())
        l4 = aux['coverage_loss'].sum() / max(int(n_tokens), 1)
        return l1 + l2 + l4, {'emo': l1.detach(), 'kl': l2.detach(), 'cov': l4.detach()}
