"""The one transformer encoder block and decoder block of the project (MIME and Multi-TR).

Pre-layer-norm blocks (as in the MIME/MoEL reference code) with a separate attention width
``attn_dim`` (the reference's "total key/value depth": 40 for MIME's D_h = 300) and FFN width
``ffn_dim`` (the reference's "filter": 50). Attention uses torch's fused
``scaled_dot_product_attention``. The decoder supports incremental decoding: its cache holds each
layer's self-attention keys/values and the cross-attention keys/values of the memory, so a beam
step costs one token, and :func:`reorder_cache` follows ParlAI's beam reordering.

Masks: ``keep`` tensors are ``[B, S]`` booleans, True at real tokens.
"""
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn


class MultiHeadAttention(nn.Module):
    """Multi-head attention of width ``attn_dim`` over ``n_heads`` heads, output ``d_model``."""

    def __init__(self, d_model, n_heads, attn_dim=None, dropout=0.0):
        super().__init__()
        attn_dim = attn_dim or d_model
        if attn_dim % n_heads:
            raise ValueError(f'attn_dim={attn_dim} is not divisible by n_heads={n_heads}')
        self.n_heads = n_heads
        self.q = nn.Linear(d_model, attn_dim, bias=False)
        self.kv = nn.Linear(d_model, 2 * attn_dim, bias=False)
        self.out = nn.Linear(attn_dim, d_model, bias=False)
        self.dropout = dropout

    def _heads(self, x):
        batch, length, width = x.shape
        return x.view(batch, length, self.n_heads, width // self.n_heads).transpose(1, 2)

    def keys_values(self, source):
        """Per-head keys and values of ``source`` ([B, H, S, attn_dim / H] each)."""
        k, v = self.kv(source).chunk(2, dim=-1)
        return self._heads(k), self._heads(v)

    def forward(self, query, keys_values, keep=None, causal=False):
        q = self._heads(self.q(query))
        k, v = keys_values
        mask = keep[:, None, None, :] if keep is not None else None
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal and mask is None,
            dropout_p=self.dropout if self.training else 0.0,
        )
        batch, _, length, _ = out.shape
        return self.out(out.transpose(1, 2).reshape(batch, length, -1))


class FeedForward(nn.Module):
    """Position-wise two-layer ReLU network."""

    def __init__(self, d_model, ffn_dim, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, ffn_dim), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ffn_dim, d_model)
        )

    def forward(self, x):
        return self.net(x)


class EncoderBlock(nn.Module):
    """x + SelfAttn(LN(x)), then x + FFN(LN(x))."""

    def __init__(self, d_model, n_heads, attn_dim, ffn_dim, dropout=0.0):
        super().__init__()
        self.norm_attn = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads, attn_dim, dropout)
        self.norm_ffn = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, ffn_dim, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, keep):
        h = self.norm_attn(x)
        x = x + self.dropout(self.attn(h, self.attn.keys_values(h), keep))
        return x + self.dropout(self.ffn(self.norm_ffn(x)))


class DecoderBlock(nn.Module):
    """Causal self-attention, attention over the memory, FFN; each pre-normed and residual."""

    def __init__(self, d_model, n_heads, attn_dim, ffn_dim, dropout=0.0):
        super().__init__()
        self.norm_self = nn.LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, n_heads, attn_dim, dropout)
        self.norm_cross = nn.LayerNorm(d_model)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, attn_dim, dropout)
        self.norm_ffn = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, ffn_dim, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, memory_keep, cache=None):
        """``cache`` (incremental decoding) is a dict updated in place; None for full sequences."""
        h = self.norm_self(x)
        k, v = self.self_attn.keys_values(h)
        if cache is not None:
            if 'self_k' in cache:
                k = torch.cat([cache['self_k'], k], dim=2)
                v = torch.cat([cache['self_v'], v], dim=2)
            cache['self_k'], cache['self_v'] = k, v
            if 'mem_k' not in cache:
                cache['mem_k'], cache['mem_v'] = self.cross_attn.keys_values(memory)
            memory_kv = cache['mem_k'], cache['mem_v']
            # one new query token attends to every cached position: no causal mask needed
            x = x + self.dropout(self.self_attn(h, (k, v), causal=x.size(1) > 1))
        else:
            memory_kv = self.cross_attn.keys_values(memory)
            x = x + self.dropout(self.self_attn(h, (k, v), causal=True))
        x = x + self.dropout(self.cross_attn(self.norm_cross(x), memory_kv, memory_keep))
        return x + self.dropout(self.ffn(self.norm_ffn(x)))


class TransformerEncoder(nn.Module):
    """A stack of :class:`EncoderBlock` with a final layer norm."""

    def __init__(self, d_model, n_heads, attn_dim, ffn_dim, n_layers=1, dropout=0.0):
        super().__init__()
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, n_heads, attn_dim, ffn_dim, dropout) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x, keep):
        for block in self.blocks:
            x = block(x, keep)
        return self.norm(x)


class TransformerDecoder(nn.Module):
    """A stack of :class:`DecoderBlock` with a final layer norm and an incremental-state cache."""

    def __init__(self, d_model, n_heads, attn_dim, ffn_dim, n_layers=1, dropout=0.0):
        super().__init__()
        self.blocks = nn.ModuleList(
            DecoderBlock(d_model, n_heads, attn_dim, ffn_dim, dropout) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x, memory, memory_keep, cache=None):
        for i, block in enumerate(self.blocks):
            layer_cache = None
            if cache is not None:
                layer_cache = cache.setdefault(i, {})
            x = block(x, memory, memory_keep, layer_cache)
        return self.norm(x)


def reorder_cache(cache, indices):
    """Select/reorder the batch rows of a (nested) decoder cache, as beam search requires."""
    if isinstance(cache, dict):
        return {key: reorder_cache(value, indices) for key, value in cache.items()}
    if torch.is_tensor(cache):
        return cache.index_select(0, indices)
    return cache


class TransformerSize(NamedTuple):
    """Layer sizes. The defaults are MIME's paper/reference configuration (D_h = 300, one layer,
    2 heads, attention width 40, FFN width 50), also used for the Multi-TR baseline."""

    d_model: int = 300
    n_heads: int = 2
    attn_dim: int = 40
    ffn_dim: int = 50
    n_layers: int = 1
    dropout: float = 0.0

    def encoder(self):
        return TransformerEncoder(self.d_model, self.n_heads, self.attn_dim, self.ffn_dim,
                                  self.n_layers, self.dropout)
