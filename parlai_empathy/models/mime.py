"""MIME: MIMicking Emotions for Empathetic Response Generation (Majumder et al., EMNLP 2020).

Read top to bottom with the paper's method section; where the paper is silent, the reference code
(declare-lab/MIME @ 7c34f3a: ``model/trainer.py``, ``VAE_noEmo_posterior.py``,
``emotion_input_attention.py``, ``complex_res_gate.py``) decides.

1. Context encoding. Word + speaker embeddings of the concatenated context, a CTX token first; a
   transformer encoder gives H and c = H_0.
2. User-emotion classification. s = E_E W_E c, with E_E (32 x D_h) the emotion embeddings,
   also used to build the response emotions below; trained with cross-entropy (L_cls).
3. Emotion grouping. The 32 emotions split into 13 positive / 19 negative (Table 1).
4. Stochastic emotion sampling, per group g: the prior h = ReLU(W_h c) (one layer shared by the
   groups), N(mu_g(h), sigma_g(h)); z_g is sampled from it (in training *and* at inference),
   d_g = softmax(FC_g(z_g)) and e_g = d_g E_E[g].
5. Emotion mimicry. m = e_pos if the user emotion is positive, else e_neg; m~ is the other.
   Polarity: the gold label in training, the classifier's prediction at inference (as the
   reference generates); ``polarity='gold'`` at inference scores with the gold one (as the
   reference computes its test perplexity).
6. A second transformer encoder over [H_i (+) m] gives M; another over [H_i (+) m~] gives M~.
7. Fusion. gate = sigmoid(W_1 [M (+) M~]); M_fused = W_2 (gate * [M (+) M~]).
8. A transformer decoder attends to M_fused.

The ELBO term, as the reference trains it: a posterior N(mu'_g, sigma'_g) per group, computed
from [c (+) mean(M_g)] where M_g is the emotion-encoder output of that group's side (M for the
mimicked group, M~ for the other). Its sample is never decoded: both training and inference
decode the prior sample, and the posterior enters the loss only through KL(q_g || p_g).

Loss (reference ``train_one_batch``): the label-smoothed response loss summed over the batch's
tokens + sum_g KL_g summed over batch and latent dimensions + the batch-mean emotion
cross-entropy (alpha = beta = gamma = 1). :meth:`Mime.extra_losses` gives the last two.

Ablations (the paper's Table 4): ``mimicry=False`` (m = e_pos and m~ = e_neg whatever the user's
polarity), ``emotion_grouping=False`` (one distribution over all 32 emotions, one emotion encoder, no
fusion), ``stochastic=False`` (z_g = mu_g: no sampling, no posterior, no KL).

Inference draws each example's z_g from a generator seeded by that example's own context tokens
(:func:`example_seeds`), not from the process's random stream: a reply and its perplexity then do
not depend on which other examples share its batch, on the batch size or on how an evaluation is
sharded across workers (``multiprocessing_eval`` gives the 1-worker figures), and a rerun gives the
same replies. Training samples from the random stream as usual.

Deviations from the reference, on purpose:

* its prior and posterior return the *positive* group's log-variance for the negative group too
  (the negative log-variance layers are built and never used); each group has its own here;
* the posterior's pooled M_g averages real positions only (the reference averages padding too).
  With ``size.conv_over_padding`` (the reference's padding, for measuring the deviation) it
  averages every position, as the reference does.
"""

import hashlib
from dataclasses import dataclass, field
from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from parlai_empathy.data.emotions import NEGATIVE_IDS, NUM_EMOTIONS, POSITIVE_IDS, is_positive_by_id
from parlai_empathy.models.embeddings import DialogueEmbedding, WordEmbedding
from parlai_empathy.models.generator_interface import (
    EmotionReadout,
    EmotionTransformerConfig,
    EncoderStates,
    GeneratorModel,
    build_response_side,
)

POLARITIES = ('predicted', 'gold')


def gaussian_kl(mu_q, logvar_q, mu_p, logvar_p):
    """KL(N(mu_q, var_q) || N(mu_p, var_p)) summed over the latent dimensions: ``[B]``, >= 0."""
    return 0.5 * (logvar_p - logvar_q + (logvar_q.exp() + (mu_q - mu_p).pow(2)) / logvar_p.exp() - 1.0).sum(dim=-1)


def masked_mean(states, keep):
    """Mean of ``states`` [B, S, D] over the positions where ``keep`` [B, S] is True."""
    weights = keep.unsqueeze(-1).to(states.dtype)
    return (states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


def example_seeds(tokens, padding_idx) -> List[int]:
    """One 63-bit seed per row of ``tokens`` [B, S]: a hash of the row's non-padding token ids,
    so it is the same whatever the padding, batch or worker the example is evaluated in."""
    seeds = []
    for row in tokens.tolist():
        ids = [t for t in row if t != padding_idx]
        digest = hashlib.blake2b(repr(ids).encode(), digest_size=8).digest()
        seeds.append(int.from_bytes(digest, 'little') >> 1)
    return seeds


def seeded_normal(seeds: Sequence[int], shape, like: torch.Tensor) -> torch.Tensor:
    """Standard normal noise ``[len(seeds), *shape]``, row i drawn from a generator seeded by
    ``seeds[i]`` (on the CPU, so a row's draw is the same on every device)."""
    rows = [torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) for seed in seeds]
    return torch.stack(rows).to(device=like.device, dtype=like.dtype)


@dataclass(frozen=True, kw_only=True)
class MimeConfig(EmotionTransformerConfig):
    """MIME's settings, the paper's and the reference's by default: the shared ones (sizes, alpha,
    gamma, tags) and these; ``-m empathy/mime``'s options are the fields, under the same names."""

    latent_size: Optional[int] = field(
        default=300,
        metadata={  # the reference: D_h; None: the model width
            'help': 'size of each emotion group latent z_g'
        },
    )
    mimicry: bool = field(default=True, metadata={'help': 'emotion mimicry by user polarity (ablation: false)'})
    emotion_grouping: bool = field(
        default=True, metadata={'help': '13 positive / 19 negative groups (ablation: false, one group)'}
    )
    stochastic: bool = field(
        default=True, metadata={'help': 'sample z_g with prior/posterior (ablation: false, z_g = mu_g)'}
    )
    elbo_weight: float = field(
        default=1.0,
        metadata={  # beta, sum_g KL_g
            'help': 'beta: weight of ELBO_pos + ELBO_neg'
        },
    )


@dataclass
class MimeReadout(EmotionReadout):
    """What MIME's encoder reports beside M_fused (``EncoderStates.aux``); batch first."""

    user_positive: torch.Tensor  # [B] bool: the polarity mimicry followed (step 5)
    distributions: Tuple[torch.Tensor, ...]  # d_g per group (step 4): (pos, neg), or (all,) ungrouped
    kl: Optional[Tuple[torch.Tensor, ...]] = None  # KL(q_g || p_g) [B] per group; training only

    @property
    def group_names(self) -> Tuple[str, ...]:
        return ('pos', 'neg') if len(self.distributions) == 2 else ('all',)


class GroupSample(NamedTuple):
    """Step 4 for one group: the emotion vector e_g, its distribution d_g and the prior."""

    emotion: torch.Tensor  # [B, D]
    distribution: torch.Tensor  # [B, |g|]
    mu: torch.Tensor  # [B, latent]
    logvar: torch.Tensor  # [B, latent]


class ContextReading(NamedTuple):
    """Steps 1, 2 and 4 of one batch (:meth:`MimeEncoder.read_context`)."""

    hidden: torch.Tensor  # [B, S, D] H
    keep: torch.Tensor  # [B, S]
    c: torch.Tensor  # [B, D] H_0
    emotion_logits: torch.Tensor  # [B, 32] s
    samples: List[GroupSample]  # one per group


class EmotionSampler(nn.Module):
    """Step 4 for every group, and the posterior KL of the ELBO."""

    def __init__(self, groups, d_model, latent_dim, stochastic=True):
        super().__init__()
        self.stochastic, self.latent_dim = stochastic, latent_dim
        for i, ids in enumerate(groups):
            self.register_buffer(f'group_ids_{i}', torch.tensor(ids), persistent=False)
        self.n_groups = len(groups)
        self.prior_hidden = nn.Linear(d_model, d_model)  # shared by the groups
        self.prior = nn.ModuleList(nn.Linear(d_model, 2 * latent_dim) for _ in groups)  # mu, logvar
        if stochastic:
            self.posterior = nn.ModuleList(
                nn.Sequential(nn.Linear(2 * d_model, d_model), nn.ReLU(), nn.Linear(d_model, 2 * latent_dim))
                for _ in groups
            )
        self.to_distribution = nn.ModuleList(nn.Linear(latent_dim, len(ids)) for ids in groups)  # FC_g

    def group_ids(self, i):
        return getattr(self, f'group_ids_{i}')

    def forward(self, c, emotion_table, seeds: Optional[Sequence[int]] = None) -> List[GroupSample]:
        """``seeds``: one per example; each example's noise then comes from its own generator
        (inference), else from the random stream (training)."""
        hidden = F.relu(self.prior_hidden(c))
        samples = []
        noise = None
        if self.stochastic and seeds is not None:
            noise = seeded_normal(seeds, (self.n_groups, self.latent_dim), c)
        for i in range(self.n_groups):
            mu, logvar = self.prior[i](hidden).chunk(2, dim=-1)
            eps = torch.randn_like(mu) if noise is None else noise[:, i]
            z = mu + eps * (0.5 * logvar).exp() if self.stochastic else mu
            d = F.softmax(self.to_distribution[i](z), dim=-1)
            samples.append(GroupSample(d @ emotion_table[self.group_ids(i)], d, mu, logvar))
        return samples

    def kl(self, c, pooled_sides, samples):
        """KL(q_g || p_g) per example ``[B]`` for each group, q_g from [c (+) pooled M_g]."""
        out = []
        for i, (pooled, sample) in enumerate(zip(pooled_sides, samples)):
            mu_q, logvar_q = self.posterior[i](torch.cat([c, pooled], dim=-1)).chunk(2, dim=-1)
            out.append(gaussian_kl(mu_q, logvar_q, sample.mu, sample.logvar))
        return out


class EmotionFusion(nn.Module):
    """Step 7: M_fused = W_2 (sigmoid(W_1 [M (+) M~]) * [M (+) M~])."""

    def __init__(self, d_model):
        super().__init__()
        self.gate = nn.Linear(2 * d_model, 2 * d_model)
        self.out = nn.Linear(2 * d_model, d_model)

    def forward(self, m: torch.Tensor, m_tilde: torch.Tensor) -> torch.Tensor:
        both = torch.cat([m, m_tilde], dim=-1)
        return self.out(torch.sigmoid(self.gate(both)) * both)


class EmotionContextEncoder(nn.Module):
    """Step 6: a transformer encoder over [H_i (+) emotion] (concatenated per position).

    The reference projects the 2 D_h-wide concatenation with one bias-free linear map; here it is
    computed as W_h H_i + W_m m, so the emotion half is one product per example instead of one per
    token (the same function, half the work). The timing signal is added after it, as the
    reference's encoder does.
    """

    def __init__(self, size):
        super().__init__()
        self.merge_hidden = nn.Linear(size.embedding_size, size.embedding_size, bias=False)
        self.merge_emotion = nn.Linear(size.embedding_size, size.embedding_size, bias=False)
        self.encoder = size.encoder(project_input=False)

    def forward(self, hidden: torch.Tensor, emotion: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        merged = self.merge_hidden(hidden) + self.merge_emotion(emotion).unsqueeze(1)
        return self.encoder(merged, keep)


class MimeEncoder(nn.Module):
    """Steps 1-7: context in, the decoder's memory M_fused out (plus the losses' inputs in aux)."""

    def __init__(
        self,
        words,
        size,
        padding_idx=0,
        n_speakers=2,
        latent_dim=None,
        mimicry=True,
        grouping=True,
        stochastic=True,
        reference_tags=True,
    ):
        super().__init__()
        d_model = size.embedding_size
        self.mimicry, self.grouping, self.stochastic = mimicry, grouping, stochastic
        self.pool_padding = size.conv_over_padding
        self.padding_idx = padding_idx
        # 1. context encoding
        self.embedding = DialogueEmbedding(
            words, padding_idx, n_speakers, prepend_ctx=True, dropout=size.dropout, reference_tags=reference_tags
        )
        self.context_encoder = size.encoder(input_dim=words.d_model)
        # 2. user-emotion classification: s = E_E W_E c
        # its values come from Mime.init_weights (xavier-uniform, as every weight matrix); the draw
        # below only keeps the random stream where seeded runs had it, so the layers built after
        # this one start from the same weights as in the recorded runs
        self.emotion_embedding = nn.Parameter(torch.empty(NUM_EMOTIONS, d_model))
        torch.randn(NUM_EMOTIONS, d_model)
        self.classifier_proj = nn.Linear(d_model, d_model, bias=False)  # W_E
        self.register_buffer('is_positive', torch.tensor(is_positive_by_id()), persistent=False)
        # 3-4. grouping and stochastic sampling
        groups = (POSITIVE_IDS, NEGATIVE_IDS) if grouping else (tuple(range(NUM_EMOTIONS)),)
        self.sampler = EmotionSampler(groups, d_model, latent_dim or d_model, stochastic)
        # 6-7. emotion-conditioned encoders and fusion (one encoder when ungrouped)
        self.mimic_encoder = EmotionContextEncoder(size)
        if grouping:
            self.non_mimic_encoder = EmotionContextEncoder(size)
            self.fusion = EmotionFusion(d_model)

    def forward(
        self,
        tokens: torch.Tensor,
        speakers: Optional[torch.Tensor] = None,
        emotion: Optional[torch.Tensor] = None,
        polarity: Optional[str] = None,
    ) -> EncoderStates:
        """``emotion``: gold ids. In training they set the mimicry polarity and the posterior runs;
        at inference the polarity is the classifier's, unless ``polarity='gold'``. The
        :class:`MimeReadout` is the states' ``aux``."""
        if polarity not in (None,) + POLARITIES:
            raise ValueError(f'polarity must be one of {POLARITIES}, not {polarity!r}')
        if polarity == 'gold' and emotion is None:
            raise ValueError("polarity='gold' needs the gold emotion ids")
        context = self.read_context(tokens, speakers)
        use_gold = emotion is not None and (self.training or polarity == 'gold')
        return self.condition(
            context, emotion if use_gold else None, posterior=self.training and self.stochastic and emotion is not None
        )

    def read_context(self, tokens: torch.Tensor, speakers: Optional[torch.Tensor] = None) -> ContextReading:
        """Steps 1, 2 and 4: what does not depend on the polarity mimicry follows, so that one
        reading serves both polarities (:meth:`Mime.gold_and_predicted_states`)."""
        # 1. H and c = H_0
        x, keep = self.embedding(tokens, speakers)
        hidden = self.context_encoder(x, keep)
        c = hidden[:, 0]
        # 2. s = E_E W_E c
        emotion_logits = self.classifier_proj(c) @ self.emotion_embedding.t()
        # 4. one emotion vector per group
        seeds = None if self.training or not self.stochastic else example_seeds(tokens, self.padding_idx)
        samples = self.sampler(c, self.emotion_embedding, seeds)
        return ContextReading(hidden, keep, c, emotion_logits, samples)

    def condition(
        self, context: ContextReading, emotion: Optional[torch.Tensor] = None, posterior: bool = False
    ) -> EncoderStates:
        """Steps 5-7 on a :meth:`read_context`: mimicry follows the polarity of the gold ids
        ``emotion``, or of the classifier's prediction when None; ``posterior`` adds the KL terms."""
        hidden, keep, c, samples = context.hidden, context.keep, context.c, context.samples
        # 5 (the polarity mimicry follows)
        user_positive = self.is_positive[context.emotion_logits.argmax(dim=-1) if emotion is None else emotion]
        readout = MimeReadout(
            emotion_logits=context.emotion_logits,
            user_positive=user_positive,
            distributions=tuple(sample.distribution for sample in samples),
        )
        if not self.grouping:
            memory = self.mimic_encoder(hidden, samples[0].emotion, keep)
            if posterior:
                readout.kl = tuple(self.sampler.kl(c, [self._pool(memory, keep)], samples))
            return EncoderStates(memory, keep, readout)
        e_pos, e_neg = samples[0].emotion, samples[1].emotion
        # 5. emotion mimicry
        flag = user_positive.unsqueeze(1) if self.mimicry else torch.ones_like(user_positive).unsqueeze(1)
        m, m_tilde = torch.where(flag, e_pos, e_neg), torch.where(flag, e_neg, e_pos)
        # 6. M and M~
        m_out = self.mimic_encoder(hidden, m, keep)
        m_tilde_out = self.non_mimic_encoder(hidden, m_tilde, keep)
        if posterior:
            pooled_m, pooled_tilde = self._pool(m_out, keep), self._pool(m_tilde_out, keep)
            pooled_pos = torch.where(flag, pooled_m, pooled_tilde)  # the positive group's side
            pooled_neg = torch.where(flag, pooled_tilde, pooled_m)
            readout.kl = tuple(self.sampler.kl(c, [pooled_pos, pooled_neg], samples))
        # 7. fusion
        return EncoderStates(self.fusion(m_out, m_tilde_out), keep, readout)

    def _pool(self, states, keep):
        """The posterior's pooled M_g: the mean over real positions, or over every position."""
        return states.mean(dim=1) if self.pool_padding else masked_mean(states, keep)


class Mime(GeneratorModel):
    """MIME with ParlAI's TorchGeneratorModel interface (see generator_interface.py).

    ``encoder(tokens, speakers=None, emotion=None, polarity=None)``; step 8 is ``decoder`` +
    ``output``.
    """

    def __init__(
        self, vocab_size, config: MimeConfig = MimeConfig(), words=None, padding_idx=0, start_idx=1, end_idx=2
    ):
        super().__init__(padding_idx, start_idx, end_idx)
        self.config = config
        size = config.size
        words = words or WordEmbedding(vocab_size, size.embedding_size, padding_idx)
        self.encoder = MimeEncoder(
            words,
            size,
            padding_idx,
            config.n_speakers,
            config.latent_size or size.embedding_size,
            config.mimicry,
            config.emotion_grouping,
            config.stochastic,
            config.reference_tags,
        )
        self.decoder, self.output = build_response_side(words, vocab_size, size)
        self.cls_weight, self.elbo_weight = config.emotion_loss_weight, config.elbo_weight  # alpha, beta
        self.response_weight = config.response_weight  # gamma
        self.init_weights(keep=[words] + self.encoder.embedding.initialised_tags())

    def gold_and_predicted_states(
        self, tokens: torch.Tensor, speakers: Optional[torch.Tensor], emotion: torch.Tensor
    ) -> Tuple[EncoderStates, EncoderStates]:
        """The encoder states for the gold polarity and for the predicted one, from one reading
        of the context: the same values as ``encoder(..., emotion, polarity='gold')`` and
        ``encoder(...)`` at inference, for what evaluation scores both ways (``ppl_ex_gold`` and
        ``ppl_ex``) at the cost of one context encoder."""
        if self.training:
            raise ValueError('gold_and_predicted_states is for evaluation (the model is training)')
        context = self.encoder.read_context(tokens, speakers)
        return self.encoder.condition(context, emotion), self.encoder.condition(context)

    def extra_losses(self, encoder_states: EncoderStates, emotion: torch.Tensor):
        """alpha * batch-mean L_cls + beta * sum_g KL_g summed over the batch (the reference's
        reductions); ``parts`` holds per-example means for logging (``kl_pos``, ``kl_neg`` or
        ``kl_all``, when the posterior ran)."""
        readout = encoder_states.aux
        cls = F.cross_entropy(readout.emotion_logits, emotion)
        parts = {'cls': cls.detach()}
        kl = cls.new_zeros(())
        for name, group_kl in zip(readout.group_names, readout.kl or ()):
            kl = kl + group_kl.sum()
            parts[f'kl_{name}'] = group_kl.mean().detach()
        return self.cls_weight * cls + self.elbo_weight * kl, parts
