"""MoEL: Mixture of Empathetic Listeners (Lin et al., EMNLP 2019).

Read top to bottom with the paper's Section 3; where the paper is silent, the reference code
(HLTCHKUST/MoEL @ 116a37d: ``model/transformer_mulexpert.py``, ``model/common_layer.py``,
``utils/beam_omt_experts.py``, ``utils/config.py`` and the MoEL command of its README, ``main.py
--model experts --label_smoothing --noam --emb_dim 300 --hidden_dim 300 --hop 1 --heads 2 --topk 5
--pretrain_emb --softmax --basic_learner --schedule 10000``) decides.

1. Emotion tracker. Word + speaker embeddings of the concatenated context, a CTX token first (the
   reference's CLS word, whose dialogue-state tag is CLS again); a transformer encoder gives H and
   q = H_0.
2. Emotion key memory. logits = K q, K (32 x D_h) one bias-free key per listener (the reference's
   ``decoder_key``); its rows are the keys, the listeners' outputs the values of the memory.
   The user-emotion classifier is the same map: L_cls = CE(logits, gold emotion), batch mean.
3. Listener weights. p = softmax(logits restricted to their top k; the others -inf), so p_i = 0
   outside the k largest logits (``top_k`` 5; 0 keeps all 32). With ``oracle`` (the reference's
   scheduled oracle, below) p is the one-hot gold emotion instead (its softmax(1000 * one-hot),
   exactly one-hot in float32).
4. Listeners. The response prefix y_<t is embedded (the shared word table), projected and given
   the timing signal: x. Each emotion listener i is one transformer decoder block over x and H:
   V_i = TRS_i(x, H); the shared listener too: V_0 = TRS_0(x, H).
5. Meta listener. V_M = V_0 + sum_i p_i V_i; O = TRS_M(V_M, H) (``n_layers`` decoder blocks, 1
   here), then the final layer norm; P(y_t) = softmax(W_o O + b_o).

Loss (reference ``train_one_batch``): the label-smoothed response loss (0.1) summed over the
batch's tokens + the batch-mean L_cls, weights 1 and 1 (:meth:`Moel.extra_losses` gives the second).

Scheduled oracle (``--schedule 10000``): in training the reference decodes a batch with the oracle
weights with probability 1e-4 + (1 - 1e-4) exp(-n / schedule), the coin thrown after update n for
the next batch (none for the first). :func:`oracle_probability` is that probability; the agent
throws the coin and passes ``oracle`` to the encoder.

Every block is the project's (``transformer_blocks``: pre-norm blocks with bias-free attention
maps of width 40, convolutional feed-forward layers of width 50 and kernel 3, its final ReLU;
``embeddings``: sqrt(D_h)-scaled words, the CTX and speaker rows as the reference's word rows).

Deviations from the reference, on purpose:

* the blocks' own deviations (``transformer_blocks``): ``nn.LayerNorm`` for its hand-written one,
  encoder convolutions that skip padding, a Vaswani-layout timing signal (the weight transplant
  copies the reference's signal in, so that the rest is compared);
* evaluation never uses the oracle. The reference leaves the last training coin in its global
  config, so a validation pass (or its final test run) after a batch that drew the oracle scores
  and decodes every example with its *gold* emotion's listener (as often as the schedule gives at
  that update);
* at inference the reference skips, at batch size 1, listeners whose weight is at most 1e-4 (a
  speed-up); here only those whose weight is exactly 0 (outside the top k) are skipped, at any
  batch size, which changes nothing; in training (and teacher-forced scoring) each listener runs
  on the rows whose top k hold it rather than on the whole batch (:class:`ListenerStack`): the
  same sums for about k/32 of the listeners' arithmetic, the dropout masks drawn for those rows;
* its ``emoji_embedding`` (64 x 300) and ``generator.p_gen_linear`` (300 -> 1) are built and never
  used (no pointer-generator in MoEL); they are not built here (64 x 300 + 300 + 1 parameters fewer
  than its count);
* its vocabulary holds every word of the three splits' contexts, responses and situations, ours is
  the agent's dictionary (train split by default), so the two word tables differ in size.
"""

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import nn

from parlai_empathy.data.emotions import NUM_EMOTIONS
from parlai_empathy.models.embeddings import WordEmbedding
from parlai_empathy.models.generator_interface import (
    EmotionReadout,
    EmotionTransformerConfig,
    EncoderStates,
    GeneratorModel,
    ResponseDecoder,
)
from parlai_empathy.models.multitask_transformer import MultitaskEncoder

ORACLE_FLOOR = 1e-4  # the reference's floor of the oracle probability


@dataclass(frozen=True, kw_only=True)
class MoelConfig(EmotionTransformerConfig):
    """MoEL's settings, the paper's and the reference's by default: the shared ones (sizes: D_h 300,
    1 layer, 2 heads, attention width 40, filter 50; alpha = gamma = 1; tags) and these;
    ``-m empathy/moel``'s options are the fields, under the same names."""

    top_k: int = field(
        default=5,
        metadata={  # README's MoEL command: --topk 5 (config.py's default 0)
            'help': 'listeners weighted per example: the k largest emotion logits (reference: 5; 0: all 32)'
        },
    )
    shared_listener: bool = field(
        default=True,
        metadata={  # --basic_learner
            'help': 'a shared listener V_0 added to the weighted emotion listeners (reference: true)'
        },
    )
    oracle_schedule: float = field(
        default=10000.0,
        metadata={  # --schedule 10000
            'help': 'training decodes a batch with the gold emotion listener with probability '
            '1e-4 + (1 - 1e-4) exp(-updates / this) (reference: 10000; at most 10: never)'
        },
    )
    n_listeners: int = field(default=NUM_EMOTIONS, metadata={'option': False})  # one per ED emotion


def oracle_probability(updates: int, schedule: float) -> float:
    """The reference's chance that the batch after update ``updates`` (0-based) is decoded with the
    oracle weights; 0 when ``schedule`` is at most 10 (the reference then never draws)."""
    if schedule <= 10:
        return 0.0
    return ORACLE_FLOOR + (1 - ORACLE_FLOOR) * math.exp(-updates / schedule)


def listener_weights(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Step 3: softmax over each row's ``top_k`` largest logits, 0 elsewhere (all of them when
    ``top_k`` is 0 or covers every listener)."""
    if 0 < top_k < logits.size(-1):
        values, index = logits.topk(top_k, dim=-1)
        logits = torch.full_like(logits, float('-inf')).scatter(-1, index, values)
    return F.softmax(logits, dim=-1)


@dataclass
class MoelReadout(EmotionReadout):
    """What MoEL's encoder reports beside H; batch first."""

    listener_weights: torch.Tensor  # [B, 32] p (step 3), or the one-hot gold emotion under the oracle
    oracle: bool = False  # p is the oracle's


class MoelEncoder(MultitaskEncoder):
    """Steps 1-3: Multi-TR's encoder, its classifier the bias-free key memory K."""

    def __init__(
        self, words, size, padding_idx=0, n_speakers=2, n_listeners=NUM_EMOTIONS, top_k=5, reference_tags=True
    ):
        super().__init__(words, size, padding_idx, n_speakers, n_listeners, reference_tags)
        self.classifier = nn.Linear(size.embedding_size, n_listeners, bias=False)  # K
        self.top_k = top_k

    def forward(
        self,
        tokens: torch.Tensor,
        speakers: Optional[torch.Tensor] = None,
        emotion: Optional[torch.Tensor] = None,
        oracle: bool = False,
    ) -> EncoderStates:
        """``emotion`` (gold ids) is read only with ``oracle``: the listener weights are then its one-hot."""
        states = super().forward(tokens, speakers)
        logits = states.aux.emotion_logits
        if oracle:
            if emotion is None:
                raise ValueError('oracle=True needs the gold emotion ids')
            weights = F.one_hot(emotion, logits.size(-1)).to(logits.dtype)
        else:
            weights = listener_weights(logits, self.top_k)
        return states._replace(aux=MoelReadout(emotion_logits=logits, listener_weights=weights, oracle=oracle))


def decoder_blocks(size, n):
    """``n`` decoder blocks of ``size``: the blocks of a decoder stack ``n`` deep (its input map,
    timing signal and final norm are not kept)."""
    return dataclasses.replace(size, n_layers=n, max_positions=1).decoder().blocks


class ListenerStack(nn.Module):
    """Steps 4-5 around the meta listener's stack ``meta`` (a ``TransformerDecoder``: input map,
    timing signal, its blocks TRS_M, final norm), with the emotion listeners and the shared one.

    A whole sequence at once (training, teacher-forced scoring): each listener runs on the rows
    that weigh it, the k of each row under the top-k gate, and its weighted output is added to
    those rows only. The rows left out have p_i = 0, so they would add 0 p_i V_i = 0 and send no
    gradient back (softmax's derivative at a zero weight is zero): the sums are the reference's,
    for about k/32 of its listener arithmetic. In training a listener no row weighs still runs, on
    no rows, so that it gets a zero gradient (not None) and Adam moves it by its momentum, as the
    reference's optimizer does. Incremental decoding keeps every row in each listener's cache (beam
    search reorders whole rows) and skips only a listener whose weight is 0 in every row: a
    listener skipped once stays skipped and its cache is never read stale.
    """

    def __init__(self, meta, size, n_listeners, shared_listener=True):
        super().__init__()
        self.meta = meta
        self.listeners = decoder_blocks(size, n_listeners)
        self.shared = decoder_blocks(size, 1)[0] if shared_listener else None

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        memory_keep: torch.Tensor,
        weights: torch.Tensor,
        cache: Optional[Dict] = None,
        offset: int = 0,
    ) -> torch.Tensor:
        """``weights`` [B, n] (p); ``cache`` (incremental decoding) a dict updated in place, holding
        one dict per listener, the shared listener and each meta block."""

        def run(block, key, inputs):
            return block(inputs, memory, memory_keep, None if cache is None else cache.setdefault(key, {}))

        x = self.meta._inputs(x, offset)
        mixed = torch.zeros_like(x) if self.shared is None else run(self.shared, 'shared', x)
        if cache is None:
            mixed = self._weighted_rows(mixed, x, memory, memory_keep, weights)
        else:
            for i in weights.ne(0).any(dim=0).nonzero().flatten().tolist():
                mixed = mixed + weights[:, i, None, None].to(x.dtype) * run(self.listeners[i], f'listener_{i}', x)
        for i, block in enumerate(self.meta.blocks):
            mixed = run(block, i, mixed)
        return self.meta.norm(mixed)

    def _weighted_rows(self, mixed, x, memory, memory_keep, weights):
        """mixed + sum_i p_i V_i, each V_i computed on the rows with p_i != 0 only."""
        listener, rows = weights.t().nonzero(as_tuple=True)  # sorted by listener, then row
        counts = torch.bincount(listener, minlength=len(self.listeners)).tolist()
        for i, part in enumerate(rows.split(counts)):
            if not counts[i] and not self.training:
                continue
            out = self.listeners[i](x[part], memory[part], memory_keep[part], None)
            mixed = mixed.index_add(0, part, weights[part, i, None, None].to(x.dtype) * out)
        return mixed


class ListenerDecoder(ResponseDecoder):
    """The response side: the shared word table, then :class:`ListenerStack` with the weights of
    the encoder's readout."""

    def __init__(self, words, size, n_listeners=NUM_EMOTIONS, shared_listener=True):
        super().__init__(words, size)
        self.stack = ListenerStack(self.stack, size, n_listeners, shared_listener)

    def forward(self, tokens: torch.Tensor, encoder_states: EncoderStates, incr_state: Optional[Dict] = None):
        """One search step as ParlAI calls it; only the tokens not yet in the cache are run."""
        cache = dict(incr_state or {})
        offset = cache.pop('length', 0)
        hidden = self.stack(
            self.words(tokens[:, offset:]),
            encoder_states.memory,
            encoder_states.keep,
            encoder_states.aux.listener_weights,
            cache,
            offset,
        )
        cache['length'] = tokens.size(1)
        return hidden, cache

    def forward_full(self, tokens: torch.Tensor, encoder_states: EncoderStates) -> torch.Tensor:
        return self.stack(
            self.words(tokens), encoder_states.memory, encoder_states.keep, encoder_states.aux.listener_weights
        )


class Moel(GeneratorModel):
    """MoEL with ParlAI's TorchGeneratorModel interface (see generator_interface.py).

    ``encoder(tokens, speakers=None, emotion=None, oracle=False)``; steps 4-5 are ``decoder`` +
    ``output``. Greedy decoding: :meth:`greedy_decode`; the reference's beam: the agent's
    ``--beam-stop top`` (``parlai_empathy.agents.reference_beam``).
    """

    def __init__(
        self, vocab_size, config: MoelConfig = MoelConfig(), words=None, padding_idx=0, start_idx=1, end_idx=2
    ):
        super().__init__(padding_idx, start_idx, end_idx)
        self.config = config
        size = config.size
        words = words or WordEmbedding(vocab_size, size.embedding_size, padding_idx)
        self.encoder = MoelEncoder(
            words, size, padding_idx, config.n_speakers, config.n_listeners, config.top_k, config.reference_tags
        )
        self.decoder = ListenerDecoder(words, size, config.n_listeners, config.shared_listener)
        self.output = nn.Linear(size.embedding_size, vocab_size)
        self.cls_weight, self.response_weight = config.emotion_loss_weight, config.response_weight
        self.init_weights(keep=[words] + self.encoder.embedding.initialised_tags())

    def extra_losses(self, encoder_states: EncoderStates, emotion: torch.Tensor):
        """alpha * the batch-mean L_cls, on the logits before the top-k mask (as the reference)."""
        cls = F.cross_entropy(encoder_states.aux.emotion_logits, emotion)
        return self.cls_weight * cls, {'cls': cls.detach()}
