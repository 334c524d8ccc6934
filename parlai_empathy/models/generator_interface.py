"""What ParlAI's ``TorchGeneratorAgent`` expects of a model, without importing ParlAI.

ParlAI's ``TorchGeneratorModel`` contract (parlai/core/torch_generator_agent.py) is duck-typed:
``model.encoder(*xs) -> encoder_states``, ``model.decoder(tokens, encoder_states, incr_state)
-> (hidden, incr_state)``, ``model.output(hidden) -> logits``, ``reorder_encoder_states``,
``reorder_decoder_incremental_state`` and ``forward(*xs, ys=...) -> (scores, preds,
encoder_states)``. :class:`GeneratorModel` provides all of it for a model that builds an
``encoder`` producing :class:`EncoderStates`, so an agent can wrap MIME or Multi-TR directly.

What an encoder reports beside the decoder memory (emotion logits, KL terms, tracker states, ...)
is a typed :class:`ModelOutput` dataclass, one per model, not a string-keyed dict: the fields are
named and documented where the model defines them, and a misspelt one fails at once.
"""

import dataclasses
from dataclasses import dataclass
from typing import Dict, NamedTuple, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

from parlai_empathy.models.transformer_blocks import TransformerSize, reorder_cache


def _select_rows(value, indices):
    """``value`` with its batch rows ``indices``: tensors, tuples (named or not) of them and
    :class:`ModelOutput` s are followed; anything else (None, names) is kept as it is."""
    if torch.is_tensor(value):
        return value.index_select(0, indices)
    if isinstance(value, ModelOutput):
        return value.reorder(indices)
    if isinstance(value, tuple):
        rows = [_select_rows(item, indices) for item in value]
        return type(value)(*rows) if hasattr(value, '_fields') else tuple(rows)
    return value


@dataclass
class ModelOutput:
    """Base of the models' typed encoder extras (the idea of HuggingFace's ``ModelOutput``,
    without its dict behaviour). Every tensor field, also inside a tuple, is batch-first, so beam
    search can reorder an instance with the rest of the encoder states."""

    def reorder(self, indices: torch.Tensor) -> 'ModelOutput':
        """A copy holding the batch rows ``indices`` (in that order) of every tensor field."""
        return dataclasses.replace(
            self, **{field.name: _select_rows(getattr(self, field.name), indices) for field in dataclasses.fields(self)}
        )

    @property
    def batch_size(self) -> Optional[int]:
        """Rows of the first tensor field (None if there is none)."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if torch.is_tensor(value) and value.dim():
                return value.size(0)
        return None


@dataclass
class EmotionReadout(ModelOutput):
    """What Multi-TR's encoder reports beside H (and the start of MIME's report)."""

    emotion_logits: torch.Tensor  # [B, 32] the user-emotion classifier's logits, from c = H_0


class EncoderStates(NamedTuple):
    """Decoder memory ``[B, S, D]``, its ``keep`` mask ``[B, S]`` and the model's extras.

    ``aux`` is the model's :class:`ModelOutput` (what the losses and the agent read: emotion
    logits, KL terms, chosen polarity, ...); it is reordered with the rest.
    """

    memory: torch.Tensor
    keep: torch.Tensor
    aux: Optional[ModelOutput] = None


@dataclass(frozen=True, kw_only=True)
class EmotionTransformerConfig:
    """What MIME and Multi-TR share: the layer sizes and the emotion-classifier side, the paper's by
    default. The one source of these defaults: the agents' options are these fields (and
    :class:`TransformerSize`'s), under the same names; :class:`~parlai_empathy.models.mime.MimeConfig`
    adds MIME's."""

    size: TransformerSize = TransformerSize()
    emotion_loss_weight: float = dataclasses.field(
        default=1.0,
        metadata={  # the batch-mean emotion cross-entropy
            'help': 'alpha: weight of the user-emotion classification loss'
        },
    )
    # gamma, the response loss (MoEL's weight; no option sets it)
    response_weight: float = dataclasses.field(default=1.0, metadata={'option': False})
    reference_tags: bool = dataclasses.field(
        default=True,
        metadata={
            'help': "the CTX and speaker vectors parametrised as the reference's CLS/USR/SYS word "
            'rows: N(0, 0.01) at the start, scaled like words in use (CTX by 2 sqrt(D_h)); same '
            'function, but Adam moves the CTX input ~35x faster (default: true for a new model; '
            'a model saved without this option keeps the form it was trained with)'
        },
    )
    n_speakers: int = dataclasses.field(default=2, metadata={'option': False})  # the user and the model


class ResponseDecoder(nn.Module):
    """Response word embedding (the shared word table) and a transformer decoder stack.

    Called as ParlAI calls a decoder; with the incremental cache a step runs only the new token.
    """

    def __init__(self, words, size):
        super().__init__()
        self.words = words
        self.stack = size.decoder(input_dim=words.d_model)

    def forward(
        self, tokens: torch.Tensor, encoder_states: EncoderStates, incr_state: Optional[Dict] = None
    ) -> Tuple[torch.Tensor, Dict]:
        """One search step as ParlAI calls it: ``incr_state`` None on the first step, then the
        returned cache; only the tokens not yet in the cache are run."""
        incr_state = incr_state or {}
        offset = incr_state.get('length', 0)
        new_tokens = tokens[:, offset:]
        cache = {key: value for key, value in incr_state.items() if key != 'length'}
        hidden = self.stack(self.words(new_tokens), encoder_states.memory, encoder_states.keep, cache, offset)
        cache['length'] = offset + new_tokens.size(1)
        return hidden, cache

    def forward_full(self, tokens: torch.Tensor, encoder_states: EncoderStates) -> torch.Tensor:
        """Teacher-forced pass over whole sequences (training, perplexity), no cache kept."""
        return self.stack(self.words(tokens), encoder_states.memory, encoder_states.keep)


@dataclass
class ResponseLoss:
    """The response term of a batch under teacher forcing (real target tokens only).

    ``smoothed`` is the label-smoothed loss summed over every token of the batch (what the MIME
    reference back-propagates); the per-example figures are plain NLL, for perplexity.
    """

    smoothed: torch.Tensor  # scalar
    nll: torch.Tensor  # [B] summed token NLL per example
    tokens: torch.Tensor  # [B] real target tokens per example
    correct: torch.Tensor  # [B] tokens whose argmax is the target


def smoothed_token_losses(logits, targets, padding_idx, smoothing=0.0):
    """Per-token ``(label-smoothed loss, NLL)`` of ``targets`` [N] under ``logits`` [N, V].

    Label smoothing as in the MoEL/MIME reference (``LabelSmoothing``): the target distribution
    gives 1 - eps to the gold token and eps / (V - 2) to every other token but padding. The
    reference minimizes its KL divergence to the model; that differs from this cross-entropy by
    the target's entropy, a constant, so the gradients are the same.
    """
    logp = F.log_softmax(logits.float(), dim=-1)
    gold = logp.gather(1, targets.unsqueeze(1)).squeeze(1)
    if not smoothing:
        return -gold, -gold
    others = logp.sum(dim=-1) - gold - logp[:, padding_idx]
    smoothed = -(1.0 - smoothing) * gold - smoothing / (logp.size(-1) - 2) * others
    return smoothed, -gold


class GeneratorModel(nn.Module):
    """Base class providing ParlAI's TorchGeneratorModel interface (subclasses set modules)."""

    def __init__(self, padding_idx=0, start_idx=1, end_idx=2):
        super().__init__()
        self.NULL_IDX, self.START_IDX, self.END_IDX = padding_idx, start_idx, end_idx
        self.register_buffer('START', torch.LongTensor([start_idx]), persistent=False)
        self.longest_label = 1
        self.response_weight = 1.0  # gamma in MIME's loss

    def init_weights(self, keep=()):
        """Every weight matrix xavier-uniform, as the reference's main.py does after building the
        model (biases, layer norms and 1-d vectors keep PyTorch's defaults); the modules in
        ``keep`` (the GloVe-initialized word table) are left as they are."""
        kept = {id(p) for module in keep for p in module.parameters()}
        for param in self.parameters():
            if param.dim() > 1 and id(param) not in kept:
                nn.init.xavier_uniform_(param)

    def decode_forced(self, encoder_states, ys):
        """Teacher forcing: logits ``[B, T, V]`` for targets ``ys`` (no START in ys)."""
        inputs = torch.cat([self.START.expand(ys.size(0), 1), ys[:, :-1]], dim=1)
        hidden = self.decoder.forward_full(inputs, encoder_states)
        logits = self.output(hidden)
        return logits, logits.argmax(dim=-1)

    def forward(
        self,
        *xs: torch.Tensor,
        ys: Optional[torch.Tensor] = None,
        prev_enc: Optional[EncoderStates] = None,
        maxlen: Optional[int] = None,
        bsz: Optional[int] = None,
        loss_smoothing: Optional[float] = None,
    ) -> Tuple[Union[torch.Tensor, ResponseLoss], Optional[torch.Tensor], EncoderStates]:
        """ParlAI's teacher-forced call: ``(scores, preds, encoder_states)``.

        With ``loss_smoothing`` (agents' loss path) the first item is a :class:`ResponseLoss`
        computed at real target tokens only, and ``preds`` is None; going through ``forward``
        keeps DistributedDataParallel's gradient hooks in play.
        """
        if ys is None:
            raise ValueError('forward() needs ys (teacher forcing); generation is done by search')
        self.longest_label = max(self.longest_label, ys.size(1))
        encoder_states = prev_enc if prev_enc is not None else self.encoder(*xs)
        if loss_smoothing is not None:
            return self.response_loss(encoder_states, ys, loss_smoothing), None, encoder_states
        scores, preds = self.decode_forced(encoder_states, ys)
        return scores, preds, encoder_states

    def reorder_encoder_states(self, encoder_states, indices):
        if not torch.is_tensor(indices):
            indices = torch.as_tensor(indices, dtype=torch.long)
        indices = indices.to(encoder_states.memory.device)
        aux = encoder_states.aux.reorder(indices) if encoder_states.aux is not None else None
        return EncoderStates(
            encoder_states.memory.index_select(0, indices),
            encoder_states.keep.index_select(0, indices),
            aux,
        )

    def reorder_decoder_incremental_state(self, incremental_state, inds):
        if incremental_state is None:
            return None
        return reorder_cache(incremental_state, inds)

    def extra_losses(self, encoder_states, emotion):
        """Model-specific weighted losses beside the response term: ``(total, parts)``."""
        raise NotImplementedError

    def response_loss(self, encoder_states, ys, smoothing=0.0) -> ResponseLoss:
        """The response term of ``ys`` under teacher forcing, logits only at real tokens.

        Padding is typically half of a batch's response positions; skipping it halves the cost
        of the output layer, the most expensive matrix product of these models.
        """
        inputs = torch.cat([self.START.expand(ys.size(0), 1), ys[:, :-1]], dim=1)
        hidden = self.decoder.forward_full(inputs, encoder_states)
        real = ys.ne(self.NULL_IDX)
        logits = self.output(hidden[real])
        targets = ys[real]
        smoothed, nll = smoothed_token_losses(logits, targets, self.NULL_IDX, smoothing)
        example = real.nonzero()[:, 0]
        per_example = nll.new_zeros(ys.size(0))
        correct = (logits.argmax(dim=-1) == targets).to(nll.dtype)
        return ResponseLoss(
            smoothed=smoothed.sum(),
            nll=per_example.index_add(0, example, nll),
            tokens=real.sum(dim=1),
            correct=per_example.index_add(0, example, correct),
        )

    def training_loss(self, *xs, ys, emotion, smoothing=0.1):
        """The reference's objective: gamma * label-smoothed response loss summed over tokens +
        the model's extra losses (:meth:`extra_losses`); returns ``(total, parts)``.

        ``xs`` are the encoder inputs (tokens, speakers, gold emotion); agents compute the same
        through ``forward(..., loss_smoothing=...)``.
        """
        response, _, encoder_states = self(*xs, ys=ys, loss_smoothing=smoothing)
        extra, parts = self.extra_losses(encoder_states, emotion)
        parts['resp'] = (response.nll.sum() / response.tokens.sum().clamp(min=1)).detach()
        return self.response_weight * response.smoothed + extra, parts

    @torch.no_grad()
    def greedy_decode(self, *xs, maxlen=30):
        """Greedy decoding with the incremental cache (for tests and benchmarks; ParlAI agents use
        ParlAI's own beam search through the same decoder/output/reorder methods)."""
        encoder_states = self.encoder(*xs)
        batch = encoder_states.memory.size(0)
        tokens = self.START.expand(batch, 1)
        state = None
        done = torch.zeros(batch, dtype=torch.bool, device=tokens.device)
        for _ in range(maxlen):
            hidden, state = self.decoder(tokens, encoder_states, state)
            next_token = self.output(hidden[:, -1]).argmax(dim=-1)
            next_token = next_token.masked_fill(done, self.NULL_IDX)
            tokens = torch.cat([tokens, next_token.unsqueeze(1)], dim=1)
            done |= next_token.eq(self.END_IDX)
            if done.all():
                break
        return tokens[:, 1:], encoder_states


def build_response_side(words, vocab_size, size):
    """The decoder (sharing the word table ``words``) and output layer both models use."""
    return ResponseDecoder(words, size), nn.Linear(size.embedding_size, vocab_size)
