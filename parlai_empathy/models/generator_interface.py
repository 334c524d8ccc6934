"""What ParlAI's ``TorchGeneratorAgent`` expects of a model, without importing ParlAI.

ParlAI's ``TorchGeneratorModel`` contract (parlai/core/torch_generator_agent.py) is duck-typed:
``model.encoder(*xs) -> encoder_states``, ``model.decoder(tokens, encoder_states, incr_state)
-> (hidden, incr_state)``, ``model.output(hidden) -> logits``, ``reorder_encoder_states``,
``reorder_decoder_incremental_state`` and ``forward(*xs, ys=...) -> (scores, preds,
encoder_states)``. :class:`GeneratorModel` provides all of it for a model that builds an
``encoder`` producing :class:`EncoderStates`, so an agent can wrap MIME or Multi-TR directly.
"""
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn

from parlai_empathy.models.embeddings import DialogueEmbedding
from parlai_empathy.models.transformer_blocks import TransformerDecoder, reorder_cache


class EncoderStates(NamedTuple):
    """Decoder memory ``[B, S, D]``, its ``keep`` mask ``[B, S]`` and per-example extras.

    ``aux`` holds batch-first tensors the losses and the agent read (emotion logits, KL terms,
    chosen polarity, ...); it is reordered with the rest.
    """

    memory: torch.Tensor
    keep: torch.Tensor
    aux: Optional[dict] = None


class ResponseDecoder(nn.Module):
    """Response embedding (shared word table + positions) and a transformer decoder stack.

    Called as ParlAI calls a decoder; with the incremental cache a step runs only the new token.
    """

    def __init__(self, embedding, d_model, n_heads, attn_dim, ffn_dim, n_layers=1, dropout=0.0):
        super().__init__()
        self.embedding = embedding  # a DialogueEmbedding without speakers or CTX
        self.stack = TransformerDecoder(d_model, n_heads, attn_dim, ffn_dim, n_layers, dropout)

    def forward(self, tokens, encoder_states, incr_state=None):
        """One search step as ParlAI calls it: ``incr_state`` None on the first step, then the
        returned cache; only the tokens not yet in the cache are run."""
        incr_state = incr_state or {}
        offset = incr_state.get('length', 0)
        new_tokens = tokens[:, offset:]
        x, _ = self.embedding(new_tokens, position_offset=offset)
        cache = {key: value for key, value in incr_state.items() if key != 'length'}
        hidden = self.stack(x, encoder_states.memory, encoder_states.keep, cache)
        cache['length'] = offset + new_tokens.size(1)
        return hidden, cache

    def forward_full(self, tokens, encoder_states):
        """Teacher-forced pass over whole sequences (training, perplexity), no cache kept."""
        x, _ = self.embedding(tokens)
        return self.stack(x, encoder_states.memory, encoder_states.keep)


class GeneratorModel(nn.Module):
    """Base class providing ParlAI's TorchGeneratorModel interface (subclasses set modules)."""

    def __init__(self, padding_idx=0, start_idx=1, end_idx=2):
        super().__init__()
        self.NULL_IDX, self.START_IDX, self.END_IDX = padding_idx, start_idx, end_idx
        self.register_buffer('START', torch.LongTensor([start_idx]), persistent=False)
        self.longest_label = 1
        self.response_weight = 1.0  # gamma in MIME's loss

    def decode_forced(self, encoder_states, ys):
        """Teacher forcing: logits ``[B, T, V]`` for targets ``ys`` (no START in ys)."""
        inputs = torch.cat([self.START.expand(ys.size(0), 1), ys[:, :-1]], dim=1)
        hidden = self.decoder.forward_full(inputs, encoder_states)
        logits = self.output(hidden)
        return logits, logits.argmax(dim=-1)

    def forward(self, *xs, ys=None, prev_enc=None, maxlen=None, bsz=None):
        if ys is None:
            raise ValueError('forward() needs ys (teacher forcing); generation is done by search')
        self.longest_label = max(self.longest_label, ys.size(1))
        encoder_states = prev_enc if prev_enc is not None else self.encoder(*xs)
        scores, preds = self.decode_forced(encoder_states, ys)
        return scores, preds, encoder_states

    def reorder_encoder_states(self, encoder_states, indices):
        if not torch.is_tensor(indices):
            indices = torch.as_tensor(indices, dtype=torch.long)
        indices = indices.to(encoder_states.memory.device)
        aux = reorder_cache(encoder_states.aux, indices) if encoder_states.aux else None
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
        """Model-specific weighted losses beside the response NLL: ``(total, parts)``."""
        raise NotImplementedError

    def response_loss(self, encoder_states, ys):
        """Token NLL of ``ys`` under teacher forcing, computing logits only at real tokens.

        Padding is typically half of a batch's response positions; skipping it halves the cost
        of the output layer, the most expensive matrix product of these models. Returns
        ``(summed NLL, number of tokens, number predicted correctly)``.
        """
        inputs = torch.cat([self.START.expand(ys.size(0), 1), ys[:, :-1]], dim=1)
        hidden = self.decoder.forward_full(inputs, encoder_states)
        real = ys.ne(self.NULL_IDX)
        logits = self.output(hidden[real])
        targets = ys[real]
        nll = F.cross_entropy(logits, targets, reduction='sum')
        correct = (logits.argmax(dim=-1) == targets).sum()
        return nll, targets.numel(), correct

    def training_loss(self, *xs, ys, emotion):
        """gamma * mean response NLL + the model's extra losses; returns ``(total, parts)``.

        ``xs`` are the encoder inputs (tokens, speakers, gold emotion); agents compute the
        response loss through ParlAI and add :meth:`extra_losses` the same way.
        """
        encoder_states = self.encoder(*xs)
        nll_sum, n_tokens, _ = self.response_loss(encoder_states, ys)
        nll = nll_sum / max(n_tokens, 1)
        extra, parts = self.extra_losses(encoder_states, emotion)
        parts['resp'] = nll.detach()
        return self.response_weight * nll + extra, parts

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


def build_response_side(words, vocab_size, size, padding_idx=0, max_positions=1024):
    """The decoder (sharing the word table ``words``) and output layer both models use."""
    embedding = DialogueEmbedding(words, padding_idx, n_speakers=0, max_positions=max_positions,
                                  dropout=size.dropout)
    decoder = ResponseDecoder(embedding, size.d_model, size.n_heads, size.attn_dim, size.ffn_dim,
                              size.n_layers, size.dropout)
    return decoder, nn.Linear(size.d_model, vocab_size)


def response_nll(scores, ys, padding_idx):
    """Mean token negative log-likelihood of the targets (padding ignored)."""
    return F.cross_entropy(scores.reshape(-1, scores.size(-1)), ys.reshape(-1),
                           ignore_index=padding_idx)
