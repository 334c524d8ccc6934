"""ETHREED: emotion tracking and constraint-guided empathetic response generation (Li et al.).

A hierarchical recurrent encoder-decoder over a multi-turn dialogue. Read top to bottom with the
paper's method section (party ids: 0 = ED Speaker, 1 = ED Listener; the *answered* party said the
last utterance, the *responder* is the other one):

1. Utterance encoding. A Bi-GRU over word embeddings; u_i = [forward last ; backward first]. Every
   utterance ends with the end token, as in the reference. All utterances of all dialogues of a
   batch go through it in one packed call.
2. Dialogue tracking, one step per utterance u_t said by party s (:class:`DialogueTracker`); every
   new state goes through dropout (0.5) before it is used or kept:
   - global:  g_t = GRU_g(g_{t-1}, u_t)
   - party:   a_t = sum_j alpha_j g_j over the earlier global states, alpha = softmax(w^T g_j)
              (the reference's "simple" attention; ``history_attention='bilinear'`` scores
              u_t^T W g_j as the paper writes it); p_t = GRU_p(q_{other}, [u_t ; a_t]), the hidden
              state being the other party's last party state; p_t becomes party s's state
   - emotion: e^s_t = GRU_e(e^s_{t-1}, p_t), one emotion track per party
   - content: c_t = GRU_c(c_{t-1}, g_t), stepped on the answered party's utterances only
3. L1, emotion classification (a linear layer + softmax over the 32 ED emotions): the answered
   party's emotion state against its label (the ED label for the speaker) and the responder's
   real emotion state -- the tracker stepped once more on the gold response -- against the
   listener tag, 0.5 each (the reference's weights).
4. L2, empathetic policy network: sta = tanh(W2 tanh(W1 e_t)) on the answered party's emotion
   state, mu = W_mu sta, sigma^2 = softplus(W_s sta), R = mu + sigma * eps, sampled in training
   and at test time alike: the responder's planned emotion representation. Constraint-based
   guided policy search, the paper's L2 = KL(q || p): q the classifier's distribution for R
   (after dropout), p for the responder's real representation, summed over the 32 emotions,
   averaged over responses, weight 1.
5. L3, decoding (:class:`PointerGeneratorDecoder`). A GRU started from tanh(W c_T). At step t:
   - attention from h_{t-1}: score_j = tanh(h_{t-1}^T W m_j + b) + w_c log(cov_j + eps) over the
     answered utterance's encoder outputs m_j, cov the element-wise maximum of the earlier
     attention distributions; context ctx_t = sum_j a_j m_j;
   - h_t = GRU([x_t ; ctx_t], h_{t-1}), x_t the previous word's embedding;
   - emotion: R' = tanh(W_r R), emo_t = tanh(bilinear(h_{t-1}, R')) R';
   - P_vocab = softmax(W_o W_p [h_t ; emo_t]);
   - pointer-generator over an extended vocabulary (the answered utterance's out-of-vocabulary
     words get ids V, V+1, ... per example): p_ptr = sigmoid(w^T [x_t ; ctx_t ; h_{t-1}]),
     P(w) = (1 - p_ptr) P_vocab(w) + p_ptr sum_{j: x_j = w} a_j.
   L3 is the NLL of the gold response, averaged over its tokens, then over responses.
6. L4, coverage loss: sum_t sum_j min(a_tj, cov_tj) per response / 40 (the reference's
   max_unroll), averaged over responses.
Total: L1 + L2 + L3 + L4.

Deviations from the reference code (outsider-lj/ethreed @ 397bb20), each on purpose:
- P(w) mixes probabilities. The reference mixes p_gen times the *raw logits* with the copy
  weights and then takes a softmax over the sum, which is not a pointer-generator distribution.
- Source out-of-vocabulary words get their extended ids from the answered utterance, so the
  copy distribution can produce them. The reference assigns them from the *target* utterance,
  which the decoder never copies from, so its extended ids only ever receive exp(0) / Z.
- L2 is the paper's KL(q || p) with weight 1; the released code has it commented out (where it
  is enabled, it is F.kl_div(log q, p): KL(p || q) averaged over the 32 classes too).
- Attention and copying skip padding; the reference pads every utterance to 40 tokens and
  attends to (and can copy) the padding as well. The coverage loss counts the gold response's
  steps only, not the padding steps after its end.
- Modules the reference builds but never uses (an emotion gate, a 300x300 linear layer, a
  600->300 context GRU, the feature cell's content attention) are not built, so the parameter
  count is lower.

``projects/li_ethreed/diagnostics/ethreed_transplant.py`` runs the reference and this model on the same weights and
batch with these deviations equalised: every stage, loss term and gradient agrees to float rounding
(``projects/li_ethreed/runs/diagnostics/transplant/``).

Ablations (:class:`EthreedConfig`): ``emp_policy=False`` (w/o emp-policy: the responder's last
tracked emotion state replaces R, no L2), ``gps=False`` (w/o GPS: the policy is kept, L2 = 0),
``party_gru=False`` (p_t = tanh(W [u_t ; a_t])), ``emotion_gru=False`` (e_t = tanh(W p_t)),
``emo_track=False`` (w/o emo-track: no emotion reaches the decoder and no policy; L1 still
trains the tracker so that emotion accuracy stays measurable).

Weights are initialised in one place, :meth:`Ethreed.init_weights`, as the reference does.
Nothing here imports ParlAI; the ParlAI generator contract comes from ``generator_interface``.
"""

from dataclasses import dataclass, field
from typing import Dict, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from parlai_empathy.data.emotions import NUM_EMOTIONS
from parlai_empathy.models.attention import Bilinear, BilinearAttention, SimpleAttention, coverage_loss
from parlai_empathy.models.generator_interface import (
    EncoderStates,
    GeneratorModel,
    ModelOutput,
    ResponseLoss,
)

SPEAKER, LISTENER = 0, 1
IGNORE = -100  # label of an utterance whose emotion is unknown (skipped by L1)
NO_COPY = -1e4  # copy-switch logit of an example with nothing to copy from


@dataclass(frozen=True, kw_only=True)
class EthreedConfig:
    """Sizes (paper: all 300), the reference's dropout and loss weights, and the ablations: the
    one source of these defaults (``-m empathy/ethreed``'s options are the fields here, under the
    same names; ``help`` is the option's help text)."""

    hidden_size: int = field(default=300, metadata={'help': 'size of every GRU state and of R (paper: 300)'})
    dropout: float = field(
        default=0.5, metadata={'help': 'dropout on every tracker state and on R before its classifier (reference: 0.5)'}
    )
    history_attention: str = field(
        default='simple',
        metadata={
            'choices': ('simple', 'bilinear'),
            'help': "the party GRU's attention over earlier global states: w^T g_j "
            "(reference) or u_t^T W g_j (the paper's equation)",
        },
    )
    # the loss weights no option sets: the reference's
    answered_weight: float = field(default=0.5, metadata={'option': False})  # L1, the answered party's emotion
    responder_weight: float = field(default=0.5, metadata={'option': False})  # L1, the responder's real emotion
    kl_weight: float = field(default=1.0, metadata={'help': 'weight of L2 (paper: 1)'})
    coverage_weight: float = field(default=1.0, metadata={'option': False})  # L4
    # L4 is divided by the reference's max_unroll
    coverage_steps: int = field(default=40, metadata={'option': False})
    emp_policy: bool = field(
        default=True, metadata={'help': 'empathetic policy network (ablation w/o emp-policy: false)'}
    )
    gps: bool = field(default=True, metadata={'help': 'KL constraint L2 (ablation w/o GPS: false)'})
    party_gru: bool = field(default=True, metadata={'help': 'ablation: false'})
    emotion_gru: bool = field(default=True, metadata={'help': 'ablation: false'})
    emo_track: bool = field(
        default=True, metadata={'help': 'emotion states reach the decoder (ablation w/o emo-track: false)'}
    )


def in_vocabulary(tokens: torch.Tensor, vocab_size: int, unk_idx: int) -> torch.Tensor:
    """Extended (copied out-of-vocabulary) ids replaced by the unknown token, for embedding."""
    return tokens.masked_fill(tokens >= vocab_size, unk_idx)


# ----- 1. utterance encoding --------------------------------------------------------------------
class UtteranceEncoder(nn.Module):
    """Bi-GRU over the words of every utterance; packed by real length (no padding to 40)."""

    def __init__(self, words, hidden):
        super().__init__()
        self.words = words
        self.gru = nn.GRU(words.d_model, hidden, batch_first=True, bidirectional=True)
        self.output_dim = 2 * hidden

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``tokens [N, L]`` (in-vocabulary ids), ``lengths [N]`` (0 allowed: an empty turn) ->
        ``(u [N, 2H], outputs [N, L, 2H])`` with u = [forward last ; backward first]."""
        embedded = self.words(tokens)
        packed = pack_padded_sequence(embedded, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
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

    def __init__(
        self, utterance_dim, hidden, party_gru=True, emotion_gru=True, history_attention='simple', dropout=0.5
    ):
        super().__init__()
        self.hidden = hidden
        self.global_gru = nn.GRUCell(utterance_dim, hidden)
        if history_attention == 'simple':
            self.history_attention = SimpleAttention(hidden)
        elif history_attention == 'bilinear':
            self.history_attention = BilinearAttention(utterance_dim, hidden)
        else:
            raise ValueError(f"history_attention must be 'simple' or 'bilinear', not {history_attention!r}")
        party_input = utterance_dim + hidden
        self.party_gru = nn.GRUCell(party_input, hidden) if party_gru else None
        self.party_ffn = None if party_gru else nn.Linear(party_input, hidden)
        self.emotion_gru = nn.GRUCell(hidden, hidden) if emotion_gru else None
        self.emotion_ffn = None if emotion_gru else nn.Linear(hidden, hidden)
        self.content_gru = nn.GRUCell(hidden, hidden)
        self.dropout = nn.Dropout(dropout)

    def initial_state(self, batch: int, device) -> TrackerState:
        zeros = torch.zeros(batch, self.hidden, device=device)
        return TrackerState(
            zeros.new_zeros(batch, 0, self.hidden),
            torch.zeros(batch, 0, dtype=torch.bool, device=device),
            zeros,
            zeros.new_zeros(batch, 2, self.hidden),
            zeros.new_zeros(batch, 2, self.hidden),
            zeros,
        )

    def step(
        self, state: TrackerState, u_t: torch.Tensor, who: torch.Tensor, live: torch.Tensor, answered: torch.Tensor
    ) -> Tuple[TrackerState, torch.Tensor]:
        """Track utterance ``u_t [B, Du]`` said by party ``who [B]``; rows with ``live`` False
        (dialogues that have ended) keep their state; the content GRU steps where ``who`` is
        the ``answered`` party. Returns ``(state, e_t [B, H])``."""
        a_t, _ = self.history_attention(u_t, state.global_states, state.global_keep)
        g_t = self.dropout(self.global_gru(u_t, state.global_last))
        party_input = torch.cat([u_t, a_t], dim=-1)
        if self.party_gru is not None:
            p_t = self.party_gru(party_input, _of_party(state.party, 1 - who))
        else:
            p_t = torch.tanh(self.party_ffn(party_input))
        p_t = self.dropout(p_t)
        if self.emotion_gru is not None:
            e_t = self.emotion_gru(p_t, _of_party(state.emotion, who))
        else:
            e_t = torch.tanh(self.emotion_ffn(p_t))
        e_t = self.dropout(e_t)
        c_t = self.dropout(self.content_gru(g_t, state.content))
        keep = live.unsqueeze(1)
        return TrackerState(
            torch.cat([state.global_states, g_t.unsqueeze(1)], dim=1),
            torch.cat([state.global_keep, live.unsqueeze(1)], dim=1),
            torch.where(keep, g_t, state.global_last),
            _set_party(state.party, who, p_t, live),
            _set_party(state.emotion, who, e_t, live),
            torch.where(keep & (who == answered).unsqueeze(1), c_t, state.content),
        ), e_t


# ----- 3./4. emotion classifier and empathetic policy -------------------------------------------
class EmpatheticPolicy(nn.Module):
    """sta = tanh(W2 tanh(W1 e)); R ~ N(mu(sta), softplus(.)(sta)), reparameterized, always sampled."""

    def __init__(self, hidden):
        super().__init__()
        self.state = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.mu = nn.Linear(hidden, hidden)
        self.variance = nn.Linear(hidden, hidden)

    def forward(self, emotion_state: torch.Tensor) -> torch.Tensor:
        sta = self.state(emotion_state)
        mu, variance = self.mu(sta), F.softplus(self.variance(sta))
        return mu + variance.clamp_min(1e-12).sqrt() * torch.randn_like(mu)


def classifier_kl(q_logits: torch.Tensor, p_logits: torch.Tensor) -> torch.Tensor:
    """KL(q || p) per row between two emotion classifier distributions: ``[B]``, >= 0."""
    log_q, log_p = F.log_softmax(q_logits, dim=-1), F.log_softmax(p_logits, dim=-1)
    return (log_q.exp() * (log_q - log_p)).sum(dim=-1)


# ----- encoder: steps 1-4 -------------------------------------------------------------------------
@dataclass
class EthreedReadout(ModelOutput):
    """What the encoder reports beside the decoder memory (``EncoderStates.aux``); batch first."""

    source_tokens: torch.Tensor  # [B, S] the answered utterance (extended ids): copy source
    decoder_init: torch.Tensor  # [B, H] tanh(W c_T), the decoder GRU's first state
    answered_logits: torch.Tensor  # [B, 32] classifier of the answered party's emotion state (L1)
    speaker_logits: torch.Tensor  # [B, 32] classifier of the speaker's emotion state (emotion accuracy)
    responder_logits: torch.Tensor  # [B, 32] classifier of the planned R after dropout (L2's q)
    responder: torch.Tensor  # [B] party id of the responder
    answered: torch.Tensor  # [B] party id of the answered party
    tracker: TrackerState  # the tracker after the last utterance (stepped again on the gold response)
    response_emotion: Optional[torch.Tensor] = None  # [B, H] R' = tanh(W_r R); None w/o emo-track
    # set by Ethreed.response_loss, for extra_losses:
    coverage_loss: Optional[torch.Tensor] = None  # [B] sum over the gold steps of sum_j min(a, cov)
    real_responder_logits: Optional[torch.Tensor] = None  # [B, 32] the real R (L1's 2nd term, L2's p)


class EthreedEncoder(nn.Module):
    """Utterances of a batch of dialogues -> decoder memory and emotion states.

    Inputs: ``utt_tokens [N, L]`` and ``utt_lengths [N]`` hold every utterance of every dialogue
    (dialogue 0's first, in order; in-vocabulary ids), ``dialogue_lengths [B]`` how many belong to
    each dialogue (>= 1), ``roles [B, T]`` the party of each (0 speaker, 1 listener), and
    ``source_tokens [B, S]`` the answered (last) utterance of each dialogue with extended ids for
    its out-of-vocabulary words (None: its in-vocabulary ids). The decoder attends to and copies
    from that utterance.
    """

    def __init__(self, words, config):
        super().__init__()
        hidden = config.hidden_size
        self.config = config
        self.utterances = UtteranceEncoder(words, hidden)
        self.tracker = DialogueTracker(
            self.utterances.output_dim,
            hidden,
            config.party_gru,
            config.emotion_gru,
            config.history_attention,
            config.dropout,
        )
        self.classifier = nn.Linear(hidden, NUM_EMOTIONS)
        self.policy = EmpatheticPolicy(hidden) if config.emp_policy and config.emo_track else None
        self.decoder_init = nn.Linear(hidden, hidden)
        self.response_emotion = nn.Linear(hidden, hidden) if config.emo_track else None
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        utt_tokens: torch.Tensor,
        utt_lengths: torch.Tensor,
        dialogue_lengths: torch.Tensor,
        roles: torch.Tensor,
        source_tokens: Optional[torch.Tensor] = None,
    ) -> EncoderStates:
        if int(dialogue_lengths.min()) < 1:
            raise ValueError('every dialogue needs at least one utterance (an empty one will do)')
        batch, turns = roles.shape
        device = utt_tokens.device
        u_flat, outputs = self.utterances(utt_tokens, utt_lengths)
        valid = torch.arange(turns, device=device).unsqueeze(0) < dialogue_lengths.unsqueeze(1)
        u = u_flat.new_zeros(batch, turns, u_flat.size(1))
        u[valid] = u_flat

        answered = roles.gather(1, (dialogue_lengths - 1).unsqueeze(1)).squeeze(1)
        responder = 1 - answered
        state = self.tracker.initial_state(batch, device)
        for t in range(turns):
            state, _ = self.tracker.step(state, u[:, t], roles[:, t], valid[:, t], answered)

        # the answered utterance: decoder memory and copy source
        last = torch.cumsum(dialogue_lengths, 0) - 1
        source_lengths = utt_lengths[last]
        width = max(int(source_lengths.max()), 1)
        if source_tokens is None:
            source_tokens = utt_tokens[last]
        source_tokens = source_tokens[:, :width]
        memory = outputs[last, :width]
        keep = torch.arange(width, device=device).unsqueeze(0) < source_lengths.unsqueeze(1)

        # 4. the responder's planned emotion representation R
        answered_emotion = _of_party(state.emotion, answered)
        if self.policy is not None:
            planned = self.policy(answered_emotion)
        else:
            planned = _of_party(state.emotion, responder)
        readout = EthreedReadout(
            source_tokens=source_tokens,
            decoder_init=torch.tanh(self.decoder_init(state.content)),
            answered_logits=self.classifier(answered_emotion),
            speaker_logits=self.classifier(state.emotion[:, SPEAKER]),
            responder_logits=self.classifier(self.dropout(planned)),
            responder=responder,
            answered=answered,
            tracker=state,
            response_emotion=(
                torch.tanh(self.response_emotion(planned)) if self.response_emotion is not None else None
            ),
        )
        return EncoderStates(memory, keep, readout)

    def real_responder_logits(
        self, encoder_states: EncoderStates, response_tokens: torch.Tensor, response_lengths: torch.Tensor
    ) -> torch.Tensor:
        """Classifier logits of the responder's real emotion representation: the tracker stepped
        once more on the gold response (in-vocabulary ids; L1's second term, L2's p)."""
        readout = encoder_states.aux
        u_response, _ = self.utterances(response_tokens, response_lengths)
        live = torch.ones_like(readout.responder, dtype=torch.bool)
        _, e_real = self.tracker.step(readout.tracker, u_response, readout.responder, live, readout.answered)
        return self.classifier(e_real)


# ----- 5./6. decoder ------------------------------------------------------------------------------
class DecoderSteps(NamedTuple):
    """Per-step quantities of a decoding run, each ``[B, T, ...]``."""

    inputs: torch.Tensor  # x_t, embedding of the previous word
    previous: torch.Tensor  # h_{t-1}
    hidden: torch.Tensor  # h_t
    context: torch.Tensor  # ctx_t
    attention: torch.Tensor  # a_t over the source
    coverage_loss: torch.Tensor  # [B, T] sum_j min(a_tj, cov_tj)


class PointerGeneratorDecoder(nn.Module):
    """GRU decoder with coverage attention, emotion input before the output layer and copying.

    Called as ParlAI calls a decoder (``forward(tokens, encoder_states, incr_state)``); it returns
    log-probabilities of the final distribution over the extended vocabulary, so the model's
    ``output`` is the identity.
    """

    def __init__(self, words, hidden, memory_dim, vocab_size, unk_idx, emotion=True):
        super().__init__()
        self.words = words  # shared with the utterance encoder
        self.vocab_size, self.unk_idx = vocab_size, unk_idx
        emb = words.d_model
        self.attention = BilinearAttention(hidden, memory_dim, coverage=True, bias=True, squash=True)
        self.cell = nn.GRUCell(emb + memory_dim, hidden)
        self.emotion_gate = Bilinear(hidden, hidden, 1) if emotion else None
        self.pre_output = nn.Linear(hidden * (2 if emotion else 1), emb)
        self.vocab_output = nn.Linear(emb, vocab_size)
        self.copy_switch = nn.Linear(emb + memory_dim + hidden, 1)

    def initial_state(self, encoder_states: EncoderStates) -> Dict[str, torch.Tensor]:
        return {
            'hidden': encoder_states.aux.decoder_init,
            'coverage': torch.zeros_like(encoder_states.keep, dtype=encoder_states.memory.dtype),
            # W m_j depends on the memory alone: projected once per search, not at every step
            'keys': self.attention.project(encoder_states.memory),
        }

    def run(
        self, tokens: torch.Tensor, encoder_states: EncoderStates, state: Dict[str, torch.Tensor]
    ) -> Tuple[DecoderSteps, Dict[str, torch.Tensor]]:
        """Feed ``tokens [B, T]`` (previous outputs, START first; extended ids allowed)."""
        memory, keep, _ = encoder_states
        keys = state['keys']
        hidden, coverage = state['hidden'], state['coverage']
        embedded = self.words(in_vocabulary(tokens, self.vocab_size, self.unk_idx))
        steps = {name: [] for name in DecoderSteps._fields}
        for t in range(tokens.size(1)):
            x_t = embedded[:, t]
            context, weights = self.attention(hidden, memory, keep, coverage, keys=keys)
            steps['coverage_loss'].append(coverage_loss(weights, coverage))
            coverage = torch.maximum(coverage, weights)
            steps['previous'].append(hidden)
            hidden = self.cell(torch.cat([x_t, context], dim=-1), hidden)
            for name, value in (('inputs', x_t), ('hidden', hidden), ('context', context), ('attention', weights)):
                steps[name].append(value)
        stacked = DecoderSteps(**{name: torch.stack(values, dim=1) for name, values in steps.items()})
        return stacked, {'hidden': hidden, 'coverage': coverage, 'keys': keys}

    def distributions(self, steps: DecoderSteps, readout: EthreedReadout, keep: torch.Tensor):
        """``(log P_vocab [B, T, V] + log(1 - p_ptr), log p_ptr [B, T])`` for every step."""
        features = steps.hidden
        if self.emotion_gate is not None:
            planned = readout.response_emotion.unsqueeze(1).expand_as(steps.previous).contiguous()
            gate = torch.tanh(self.emotion_gate(steps.previous.contiguous(), planned))
            features = torch.cat([features, gate * planned], dim=-1)
        vocab = F.log_softmax(self.vocab_output(self.pre_output(features)), dim=-1)
        switch = self.copy_switch(torch.cat([steps.inputs, steps.context, steps.previous], dim=-1))
        switch = switch.squeeze(2).masked_fill(~keep.any(dim=1, keepdim=True), NO_COPY)
        return vocab + F.logsigmoid(-switch).unsqueeze(2), F.logsigmoid(switch)

    def log_probs(self, steps: DecoderSteps, encoder_states: EncoderStates) -> torch.Tensor:
        """log P(w) over the extended vocabulary ``[B, T, V + n_oov]`` (n_oov: the batch's most)."""
        _, keep, readout = encoder_states
        generate, copy = self.distributions(steps, readout, keep)
        source = readout.source_tokens
        size = max(self.vocab_size, int(source.max()) + 1)
        at_source = source.unsqueeze(1).expand(-1, generate.size(1), -1)  # [B, T, S]
        copied = generate.new_zeros(*generate.shape[:2], size).scatter_add_(2, at_source, steps.attention)
        generate = F.pad(generate, (0, size - self.vocab_size), value=float('-inf'))
        # Only the source's words have copy mass; for every other word logaddexp(g, -inf) is g
        # exactly, so the mixture is computed (and written back) at the source positions alone,
        # without a log of every word: the values of the whole-vocabulary mixture up to the last
        # bit of logaddexp (its vector and scalar CPU loops round differently)
        mixed = torch.logaddexp(
            generate.gather(2, at_source), copy.unsqueeze(2) + _log_or_minus_inf(copied.gather(2, at_source))
        )
        return generate.scatter_(2, at_source, mixed)

    def target_log_probs(
        self, steps: DecoderSteps, encoder_states: EncoderStates, targets: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(log P(target) [B, T], argmax of P [B, T])`` without building P over the whole
        extended vocabulary: a word's copy mass is the attention on the source positions
        holding it, and the best word is either P_vocab's best or a source word."""
        _, keep, readout = encoder_states
        generate, copy = self.distributions(steps, readout, keep)
        source = readout.source_tokens

        def mixed(words, copy_mass):  # log P of ``words [B, T, K]`` with their copy mass
            known = words < self.vocab_size
            gen = generate.gather(2, words.masked_fill(~known, 0)).masked_fill(~known, float('-inf'))
            return torch.logaddexp(gen, copy.unsqueeze(2) + _log_or_minus_inf(copy_mass))

        def mass_of(words):  # [B, T, K] -> attention on the source positions holding each word
            return (steps.attention.unsqueeze(2) * (words.unsqueeze(3) == source[:, None, None, :])).sum(-1)

        target = mixed(targets.unsqueeze(2), mass_of(targets.unsqueeze(2))).squeeze(2)
        with torch.no_grad():
            same_word = (source.unsqueeze(2) == source.unsqueeze(1)).to(steps.attention.dtype)  # [B, S, S]
            best_vocab = generate.argmax(dim=2, keepdim=True)
            sources = source.unsqueeze(1).expand(-1, targets.size(1), -1)
            candidates = torch.cat([best_vocab, sources], dim=2)
            scores = torch.cat(
                [mixed(best_vocab, mass_of(best_vocab)), mixed(sources, torch.bmm(steps.attention, same_word))], dim=2
            )
            allowed = torch.cat([keep.new_ones(keep.size(0), 1), keep], dim=1).unsqueeze(1)
            best = candidates.gather(2, scores.masked_fill(~allowed, float('-inf')).argmax(2, keepdim=True))
        return target, best.squeeze(2)

    def forward(
        self, tokens: torch.Tensor, encoder_states: EncoderStates, incr_state: Optional[Dict[str, torch.Tensor]] = None
    ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        if incr_state is None:
            incr_state = self.initial_state(encoder_states)
        else:
            tokens = tokens[:, -1:]  # earlier tokens are already in the recurrent state
        steps, state = self.run(tokens, encoder_states, incr_state)
        return self.log_probs(steps, encoder_states), state


def _log_or_minus_inf(mass):
    """log of a non-negative mass, -inf (with a zero gradient) where it is 0."""
    return torch.where(mass > 0, torch.log(mass.clamp_min(1e-38)), torch.full_like(mass, float('-inf')))


# ----- the model ----------------------------------------------------------------------------------
class Ethreed(GeneratorModel):
    """ETHREED with ParlAI's generator interface; see the module docstring for the equations."""

    def __init__(self, words, vocab_size, config=EthreedConfig(), padding_idx=0, start_idx=1, end_idx=2, unk_idx=3):
        super().__init__(padding_idx, start_idx, end_idx)
        self.config = config
        self.vocab_size, self.UNK_IDX = vocab_size, unk_idx
        self.encoder = EthreedEncoder(words, config)
        self.decoder = PointerGeneratorDecoder(
            words,
            config.hidden_size,
            self.encoder.utterances.output_dim,
            vocab_size,
            unk_idx,
            emotion=config.emo_track,
        )
        self.init_weights()

    def init_weights(self, keep=()):
        """The reference's initialisation: every GRU's recurrent weights orthogonal and its update
        gate's recurrent bias 2.0 (the state is mostly carried over at first); the coverage weight
        uniform in [0, 1); everything else PyTorch's default."""
        for module in self.modules():
            if isinstance(module, (nn.GRU, nn.GRUCell)):
                for name, param in module.named_parameters():
                    if name.startswith('weight_hh'):
                        nn.init.orthogonal_(param)
                    elif name.startswith('bias_hh'):
                        size = param.size(0) // 3  # gates r, z, n
                        with torch.no_grad():
                            param[size : 2 * size].fill_(2.0)
        nn.init.uniform_(self.decoder.attention.coverage_weight)

    def output(self, log_probs):
        return log_probs  # the decoder already returns the final distribution

    def _teacher_forced(self, encoder_states, ys):
        inputs = torch.cat([self.START.expand(ys.size(0), 1), ys[:, :-1]], dim=1)
        steps, _ = self.decoder.run(inputs, encoder_states, self.decoder.initial_state(encoder_states))
        return steps

    def decode_forced(self, encoder_states: EncoderStates, ys: torch.Tensor):
        """Teacher forcing: log P over the extended vocabulary ``[B, T, V + n_oov]`` and its argmax."""
        log_probs = self.decoder.log_probs(self._teacher_forced(encoder_states, ys), encoder_states)
        return log_probs, log_probs.argmax(dim=-1)

    def response_loss(self, encoder_states: EncoderStates, ys: torch.Tensor, smoothing=0.0) -> ResponseLoss:
        """L3 per response under teacher forcing (``ys`` with extended ids for copied words).

        Also fills in the encoder states' :class:`EthreedReadout` what :meth:`extra_losses`
        needs: each response's coverage loss sum and the responder's real emotion logits.
        """
        if smoothing:
            raise ValueError('ETHREED is trained without label smoothing, as the reference')
        steps = self._teacher_forced(encoder_states, ys)
        log_probs, best = self.decoder.target_log_probs(steps, encoder_states, ys)
        real = ys.ne(self.NULL_IDX)
        nll = -(log_probs.masked_fill(~real, 0.0)).sum(dim=1)
        readout = encoder_states.aux
        readout.coverage_loss = (steps.coverage_loss * real).sum(dim=1)
        readout.real_responder_logits = self.encoder.real_responder_logits(
            encoder_states, in_vocabulary(ys, self.vocab_size, self.UNK_IDX), real.sum(dim=1)
        )
        return ResponseLoss(
            smoothed=nll.sum(), nll=nll, tokens=real.sum(dim=1), correct=((best == ys) & real).sum(dim=1).to(nll.dtype)
        )

    def extra_losses(self, encoder_states: EncoderStates, answered_labels: torch.Tensor, response_labels: torch.Tensor):
        """L1 + L2 + L4 beside L3 (after :meth:`response_loss`), each averaged over responses.

        ``answered_labels [B]``: emotion id of the answered party, ``response_labels [B]``: of the
        responder; IGNORE where unknown. Returns ``(total, {'emo': L1, 'kl': L2, 'cov': L4})``.
        """
        config, readout = self.config, encoder_states.aux
        if readout.coverage_loss is None or readout.real_responder_logits is None:
            raise ValueError('extra_losses needs the encoder states response_loss was computed on')
        real = readout.real_responder_logits
        l1 = config.answered_weight * _mean_cross_entropy(
            readout.answered_logits, answered_labels
        ) + config.responder_weight * _mean_cross_entropy(real, response_labels)
        if self.encoder.policy is not None and config.gps:
            l2 = config.kl_weight * classifier_kl(readout.responder_logits, real).mean()
        else:
            l2 = l1.new_zeros(())
        l4 = config.coverage_weight * (readout.coverage_loss / config.coverage_steps).mean()
        return l1 + l2 + l4, {'emo': l1.detach(), 'kl': l2.detach(), 'cov': l4.detach()}


def _mean_cross_entropy(logits, labels):
    """Cross-entropy averaged over the known labels; a zero that keeps the graph when none is."""
    if bool(labels.ne(IGNORE).any()):
        return F.cross_entropy(logits, labels, ignore_index=IGNORE)
    return logits.sum() * 0.0
