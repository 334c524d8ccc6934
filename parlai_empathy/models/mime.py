"""MIME: MIMicking Emotions for Empathetic Response Generation (Majumder et al., EMNLP 2020).

Read top to bottom with the paper's method section:

1. Context encoding. Word + position + speaker embeddings of the concatenated context, a CTX
   token first; a transformer encoder gives H and c = H_0.
2. User-emotion classification. s = E_E W_E c, with E_E (32 x D_h) the emotion embeddings,
   also used to build the response emotions below; trained with cross-entropy (L_cls).
3. Emotion grouping. The 32 emotions split into 13 positive / 19 negative (Table 1).
4. Stochastic emotion sampling, per group g: a prior N(mu_g(c), sigma_g(c)) and, in training, a
   posterior N(mu'_g(c, e), sigma'_g(c, e)) given the gold user emotion's embedding e; z_g is
   reparameterized, d_g = softmax(FC_g(z_g)) and e_g = d_g E_E[g]. ELBO_g = KL(q || p) (training)
   + reconstruction -log d_g(gold) when the gold emotion belongs to g.
5. Emotion mimicry. m = e_pos if the user emotion is positive, else e_neg; m~ is the other.
   Polarity: the gold label in training (as in the reference implementation), the classifier's
   prediction at inference.
6. A second transformer encoder over [H_i (+) m] gives M; another over [H_i (+) m~] gives M~.
7. Fusion. gate = sigmoid(W_1 [M (+) M~]); M_fused = W_2 (gate * [M (+) M~]).
8. A transformer decoder attends to M_fused.
Loss: alpha L_cls + beta (ELBO_pos + ELBO_neg) + gamma L_resp (all 1 in the paper).

Ablations (the paper's Table 4): ``mimicry=False`` (m = e_pos and m~ = e_neg whatever the user's
polarity), ``grouping=False`` (one distribution over all 32 emotions, one emotion encoder, no
fusion), ``stochastic=False`` (z_g = mu_g(c): no sampling, no posterior, no KL).

Differences from the reference code, on purpose: its posterior is conditioned on the pooled
emotion-encoder output and its posterior samples never reach the decoder; here the posterior
sees the gold emotion, its sample feeds the decoder in training (a standard conditional VAE),
and the ELBO has the reconstruction term. Both use the prior at inference.
"""
import torch
import torch.nn.functional as F
from torch import nn

from parlai_empathy.data.emotions import NEGATIVE_IDS, NUM_EMOTIONS, POSITIVE_IDS, is_positive_by_id
from parlai_empathy.models.embeddings import DialogueEmbedding, WordEmbedding
from parlai_empathy.models.generator_interface import (
    EncoderStates, GeneratorModel, build_response_side,
)
from parlai_empathy.models.transformer_blocks import TransformerSize


def gaussian_kl(mu_q, logvar_q, mu_p, logvar_p):
    """KL(N(mu_q, var_q) || N(mu_p, var_p)) summed over the latent dimensions: ``[B]``, >= 0."""
    return 0.5 * (
        logvar_p - logvar_q + (logvar_q.exp() + (mu_q - mu_p).pow(2)) / logvar_p.exp() - 1.0
    ).sum(dim=-1)


class GroupEmotionSampler(nn.Module):
    """Step 4 for one emotion group: z_g -> d_g -> e_g = d_g E_E[g], with its ELBO terms."""

    def __init__(self, group_ids, d_model, latent_dim, stochastic=True):
        super().__init__()
        self.register_buffer('group_ids', torch.tensor(group_ids), persistent=False)
        # position of each of the 32 emotions inside this group, -1 when not a member
        position = torch.full((NUM_EMOTIONS,), -1, dtype=torch.long)
        position[torch.tensor(group_ids)] = torch.arange(len(group_ids))
        self.register_buffer('position_in_group', position, persistent=False)
        self.stochastic = stochastic
        self.prior = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(),
                                   nn.Linear(d_model, 2 * latent_dim))
        if stochastic:
            self.posterior = nn.Sequential(nn.Linear(2 * d_model, d_model), nn.ReLU(),
                                           nn.Linear(d_model, 2 * latent_dim))
        self.to_distribution = nn.Linear(latent_dim, len(group_ids))  # FC_g, shared by q and p

    def forward(self, c, emotion_table, gold=None, gold_embedding=None):
        mu, logvar = self.prior(c).chunk(2, dim=-1)
        kl = c.new_zeros(c.size(0))
        if not self.stochastic:
            z = mu
        elif self.training and gold_embedding is not None:
            mu_q, logvar_q = self.posterior(torch.cat([c, gold_embedding], dim=-1)).chunk(2, dim=-1)
            z = mu_q + torch.randn_like(mu_q) * (0.5 * logvar_q).exp()
            kl = gaussian_kl(mu_q, logvar_q, mu, logvar)
        else:
            z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        log_d = F.log_softmax(self.to_distribution(z), dim=-1)
        e = log_d.exp() @ emotion_table[self.group_ids]
        recon = c.new_zeros(c.size(0))
        if gold is not None:
            where = self.position_in_group[gold]
            member = where.ge(0)
            picked = log_d.gather(1, where.clamp(min=0).unsqueeze(1)).squeeze(1)
            recon = torch.where(member, -picked, recon)
        return e, log_d.exp(), kl, recon


class EmotionFusion(nn.Module):
    """Step 7: M_fused = W_2 (sigmoid(W_1 [M (+) M~]) * [M (+) M~])."""

    def __init__(self, d_model):
        super().__init__()
        self.gate = nn.Linear(2 * d_model, 2 * d_model)
        self.out = nn.Linear(2 * d_model, d_model)

    def forward(self, m, m_tilde):
        both = torch.cat([m, m_tilde], dim=-1)
        return self.out(torch.sigmoid(self.gate(both)) * both)


class EmotionContextEncoder(nn.Module):
    """Step 6: a transformer encoder over [H_i (+) emotion] (concatenated per position).

    The linear map of the concatenation is computed as W_h H_i + W_m m: the emotion half is one
    product per example instead of one per token (same function, half the work).
    """

    def __init__(self, size):
        super().__init__()
        self.merge_hidden = nn.Linear(size.d_model, size.d_model)
        self.merge_emotion = nn.Linear(size.d_model, size.d_model, bias=False)
        self.encoder = size.encoder()

    def forward(self, hidden, emotion, keep):
        merged = self.merge_hidden(hidden) + self.merge_emotion(emotion).unsqueeze(1)
        return self.encoder(merged, keep)


class MimeEncoder(nn.Module):
    """Steps 1-7: context in, the decoder's memory M_fused out (plus the losses' inputs in aux)."""

    def __init__(self, words, size, padding_idx=0, n_speakers=2, max_positions=1024,
                 latent_dim=None, mimicry=True, grouping=True, stochastic=True):
        super().__init__()
        d_model = size.d_model
        self.mimicry, self.grouping = mimicry, grouping
        # 1. context encoding
        self.embedding = DialogueEmbedding(words, padding_idx, n_speakers, max_positions,
                                           prepend_ctx=True, dropout=size.dropout)
        self.context_encoder = size.encoder()
        # 2. user-emotion classification: s = E_E W_E c
        self.emotion_embedding = nn.Parameter(torch.randn(NUM_EMOTIONS, d_model) * d_model ** -0.5)
        self.classifier_proj = nn.Linear(d_model, d_model, bias=False)  # W_E
        self.register_buffer('is_positive', torch.tensor(is_positive_by_id()), persistent=False)
        # 3-4. grouping and stochastic sampling
        latent_dim = latent_dim or d_model
        groups = (POSITIVE_IDS, NEGATIVE_IDS) if grouping else (tuple(range(NUM_EMOTIONS)),)
        self.samplers = nn.ModuleList(
            GroupEmotionSampler(ids, d_model, latent_dim, stochastic) for ids in groups
        )
        # 6-7. emotion-conditioned encoders and fusion (one encoder when ungrouped)
        self.mimic_encoder = EmotionContextEncoder(size)
        if grouping:
            self.non_mimic_encoder = EmotionContextEncoder(size)
            self.fusion = EmotionFusion(d_model)

    def forward(self, tokens, speakers=None, emotion=None):
        """``emotion`` (gold ids) is given in training; None at inference."""
        # 1. H and c = H_0
        x, keep = self.embedding(tokens, speakers)
        hidden = self.context_encoder(x, keep)
        c = hidden[:, 0]
        # 2. s = E_E W_E c
        emotion_logits = self.classifier_proj(c) @ self.emotion_embedding.t()
        predicted = emotion_logits.argmax(dim=-1)
        # 5 (polarity used for mimicry): gold in training, the classifier's otherwise
        user_positive = self.is_positive[emotion if emotion is not None else predicted]
        # 4. one emotion vector per group
        gold_embedding = self.emotion_embedding[emotion] if emotion is not None else None
        sampled = [s(c, self.emotion_embedding, emotion, gold_embedding) for s in self.samplers]
        aux = {'emotion_logits': emotion_logits, 'user_positive': user_positive}
        names = ('pos', 'neg') if self.grouping else ('all',)
        for name, (_, dist, kl, recon) in zip(names, sampled):
            aux[f'd_{name}'], aux[f'kl_{name}'], aux[f'recon_{name}'] = dist, kl, recon
        if not self.grouping:
            memory = self.mimic_encoder(hidden, sampled[0][0], keep)
            return EncoderStates(memory, keep, aux)
        e_pos, e_neg = sampled[0][0], sampled[1][0]
        # 5. emotion mimicry
        if self.mimicry:
            flag = user_positive.unsqueeze(1)
            m, m_tilde = torch.where(flag, e_pos, e_neg), torch.where(flag, e_neg, e_pos)
        else:
            m, m_tilde = e_pos, e_neg
        # 6-7. M, M~ and their fusion
        memory = self.fusion(self.mimic_encoder(hidden, m, keep),
                             self.non_mimic_encoder(hidden, m_tilde, keep))
        return EncoderStates(memory, keep, aux)


class Mime(GeneratorModel):
    """MIME with ParlAI's TorchGeneratorModel interface (see generator_interface.py).

    ``encoder(tokens, speakers=None, emotion=None)``; step 8 is ``decoder`` + ``output``.
    """

    def __init__(self, vocab_size, padding_idx=0, start_idx=1, end_idx=2, size=TransformerSize(),
                 words=None, n_speakers=2, max_positions=1024, latent_dim=None, mimicry=True,
                 grouping=True, stochastic=True, cls_weight=1.0, elbo_weight=1.0,
                 response_weight=1.0):
        super().__init__(padding_idx, start_idx, end_idx)
        words = words or WordEmbedding(vocab_size, size.d_model, padding_idx)
        self.encoder = MimeEncoder(words, size, padding_idx, n_speakers, max_positions,
                                   latent_dim, mimicry, grouping, stochastic)
        self.decoder, self.output = build_response_side(words, vocab_size, size, padding_idx,
                                                        max_positions)
        self.cls_weight, self.elbo_weight = cls_weight, elbo_weight  # alpha, beta
        self.response_weight = response_weight  # gamma

    def extra_losses(self, encoder_states, emotion):
        """alpha L_cls + beta sum_g ELBO_g (batch means); ``parts`` for logging."""
        aux = encoder_states.aux
        cls = F.cross_entropy(aux['emotion_logits'], emotion)
        parts = {'cls': cls.detach()}
        elbo = cls.new_zeros(())
        for key in aux:
            if key.startswith(('kl_', 'recon_')):
                term = aux[key].mean()
                parts[key] = term.detach()
                elbo = elbo + term
        return self.cls_weight * cls + self.elbo_weight * elbo, parts
