"""The one transformer encoder and decoder of the project (MIME and Multi-TR).

They follow the MoEL/MIME reference code (declare-lab/MIME @ 7c34f3a, ``model/common_layer.py``,
``transformer_mulexpert.py``), which the MIME paper's figures come from:

* every stack first maps its input with a bias-free linear layer (the reference's
  ``embedding_proj``) and adds the fixed sinusoidal timing signal; the word embeddings it gets
  are scaled by sqrt(d) beforehand, as the reference's ``Embeddings`` does (``embeddings.py``);
* pre-layer-norm blocks with a separate attention width ``attn_dim`` (the reference's "total
  key/value depth": 40 for D_h = 300) and bias-free query/key/value/output maps;
* the position-wise feed-forward layer is two 1-D convolutions of width ``ffn_kernel`` (3) with a
  ReLU between (width ``ffn_dim``, the reference's "filter": 50); the decoder's convolutions are
  causal (left-padded), the encoder's centred. The reference's ``PositionwiseFeedForward.forward``
  also applies its ReLU after the *last* convolution (its test ``if i < len(self.layers)`` is
  always true), so what each block adds to its residual stream is non-negative;
  ``ffn_final_relu=True`` (the default) does the same. the weight transplant
  (``projects/majumder2020_mime/diagnostics/mime_transplant.py``) finds this the one difference of
  function between the reference MIME and ours; models saved without it keep that form
  (``--ffn-final-relu``);
* a final layer norm closes each stack.

Deviations, on purpose (each keeps the reference's function on unpadded input):

* the encoder zeroes padded positions before each convolution, so a token's features never depend
  on how much padding its batch has (the reference convolves over padding, so the last real tokens
  of a short context see the states of the padding after them; ``conv_over_padding=True`` does the
  same, for measuring what the deviation changes);
* ``nn.LayerNorm`` (biased variance, eps inside the square root) stands for the reference's
  hand-written LayerNorm (unbiased std, eps 1e-6 added to the std).

Attention runs through torch's fused ``scaled_dot_product_attention``. The decoder supports
incremental decoding: its cache holds each layer's self-attention keys/values, the
cross-attention keys/values of the memory and the last ``ffn_kernel - 1`` inputs of both causal
convolutions, so a beam step costs one token; :func:`reorder_cache` follows ParlAI's beam
reordering.

Masks: ``keep`` tensors are ``[B, S]`` booleans, True at real tokens.
"""

import math
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn


def sinusoidal_positions(n_positions, dim):
    """The fixed sine/cosine timing signal of Vaswani et al. (no parameters to train)."""
    position = torch.arange(n_positions, dtype=torch.float32).unsqueeze(1)
    rate = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(n_positions, dim)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate[: dim // 2])
    return table


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

    def forward(
        self,
        query: torch.Tensor,
        keys_values: Tuple[torch.Tensor, torch.Tensor],
        keep: Optional[torch.Tensor] = None,
        causal: bool = False,
    ) -> torch.Tensor:
        q = self._heads(self.q(query))
        k, v = keys_values
        mask = keep[:, None, None, :] if keep is not None else None
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            is_causal=causal and mask is None,
            dropout_p=self.dropout if self.training else 0.0,
        )
        return self.out(out.transpose(1, 2).flatten(2))  # flatten: also for a batch of no rows


class FeedForward(nn.Module):
    """conv(d_model -> ffn_dim, k) -> ReLU -> conv(ffn_dim -> d_model, k) [-> ReLU] along time.

    ``kernel=1`` is the usual position-wise linear network. ``causal`` pads on the left only, so
    position t sees t-k+1..t (the reference decoder's ``padding='left'``).
    """

    def __init__(self, d_model, ffn_dim, kernel=3, causal=False, dropout=0.0, final_relu=True):
        super().__init__()
        self.conv_in = nn.Conv1d(d_model, ffn_dim, kernel)
        self.conv_out = nn.Conv1d(ffn_dim, d_model, kernel)
        self.kernel, self.causal, self.final_relu = kernel, causal, final_relu
        self.padding = (kernel - 1, 0) if causal else (kernel // 2, (kernel - 1) // 2)
        self.dropout = nn.Dropout(dropout)

    def _conv(self, conv, x, past=None):
        """``conv`` along time of ``x`` [B, T, C]; ``past`` [B, k-1, C] replaces the left padding."""
        if past is None:
            x = F.pad(x.transpose(1, 2), self.padding)
        else:
            x = torch.cat([past, x], dim=1).transpose(1, 2)
        return conv(x).transpose(1, 2)

    def forward(
        self, x: torch.Tensor, keep: Optional[torch.Tensor] = None, cache: Optional[Dict[str, torch.Tensor]] = None
    ) -> torch.Tensor:
        """``keep`` zeroes padded positions (encoder); ``cache`` (causal, incremental decoding) is a
        dict holding the last k-1 inputs of each convolution, updated in place."""
        if cache is None or self.kernel == 1:
            if keep is not None:
                x = x * keep.unsqueeze(-1).to(x.dtype)
            hidden = self.dropout(F.relu(self._conv(self.conv_in, x)))
            if keep is not None:
                hidden = hidden * keep.unsqueeze(-1).to(hidden.dtype)
            return self._out(self._conv(self.conv_out, hidden))
        if not self.causal:
            raise ValueError('incremental decoding needs a causal feed-forward layer')
        past = self.kernel - 1
        if 'ffn_in' not in cache:
            cache['ffn_in'] = x.new_zeros(x.size(0), past, x.size(2))
            cache['ffn_mid'] = x.new_zeros(x.size(0), past, self.conv_in.out_channels)
        hidden = self.dropout(F.relu(self._conv(self.conv_in, x, cache['ffn_in'])))
        out = self._out(self._conv(self.conv_out, hidden, cache['ffn_mid']))
        cache['ffn_in'] = torch.cat([cache['ffn_in'], x], dim=1)[:, -past:]
        cache['ffn_mid'] = torch.cat([cache['ffn_mid'], hidden], dim=1)[:, -past:]
        return out

    def _out(self, x):
        """The reference's ReLU after the last convolution (and its dropout), when kept."""
        return self.dropout(F.relu(x)) if self.final_relu else x


class EncoderBlock(nn.Module):
    """x + SelfAttn(LN(x)), then x + FFN(LN(x))."""

    def __init__(
        self,
        d_model,
        n_heads,
        attn_dim,
        ffn_dim,
        dropout=0.0,
        ffn_kernel=3,
        ffn_final_relu=True,
        conv_over_padding=False,
    ):
        super().__init__()
        self.conv_over_padding = conv_over_padding
        self.norm_attn = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads, attn_dim, dropout)
        self.norm_ffn = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, ffn_dim, ffn_kernel, causal=False, dropout=dropout, final_relu=ffn_final_relu)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        h = self.norm_attn(x)
        x = x + self.dropout(self.attn(h, self.attn.keys_values(h), keep))
        return x + self.dropout(self.ffn(self.norm_ffn(x), None if self.conv_over_padding else keep))


class DecoderBlock(nn.Module):
    """Causal self-attention, attention over the memory, causal FFN; each pre-normed and residual."""

    def __init__(self, d_model, n_heads, attn_dim, ffn_dim, dropout=0.0, ffn_kernel=3, ffn_final_relu=True):
        super().__init__()
        self.norm_self = nn.LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, n_heads, attn_dim, dropout)
        self.norm_cross = nn.LayerNorm(d_model)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, attn_dim, dropout)
        self.norm_ffn = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, ffn_dim, ffn_kernel, causal=True, dropout=dropout, final_relu=ffn_final_relu)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        memory_keep: torch.Tensor,
        cache: Optional[Dict[str, torch.Tensor]] = None,
    ) -> torch.Tensor:
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
        return x + self.dropout(self.ffn(self.norm_ffn(x), cache=cache))


class _Stack(nn.Module):
    """Input projection + timing signal, then blocks, then a final layer norm."""

    def __init__(self, d_model, input_dim, max_positions, project_input=True):
        super().__init__()
        # the reference's embedding_proj (bias-free); None when the caller projects already
        self.in_proj = nn.Linear(input_dim or d_model, d_model, bias=False) if project_input else None
        self.register_buffer('timing', sinusoidal_positions(max_positions, d_model), persistent=False)
        self.norm = nn.LayerNorm(d_model)

    def _inputs(self, x, offset=0):
        if self.in_proj is not None:
            x = self.in_proj(x)
        if offset + x.size(1) > self.timing.size(0):
            raise ValueError(
                f'sequence of {offset + x.size(1)} tokens is longer than max_positions='
                f'{self.timing.size(0)}; truncate the input'
            )
        return x + self.timing[offset : offset + x.size(1)].to(x.dtype)


class TransformerEncoder(_Stack):
    """proj(x) + timing, a stack of :class:`EncoderBlock`, a final layer norm."""

    def __init__(
        self,
        d_model,
        n_heads,
        attn_dim,
        ffn_dim,
        n_layers=1,
        dropout=0.0,
        ffn_kernel=3,
        input_dim=None,
        max_positions=1024,
        project_input=True,
        ffn_final_relu=True,
        conv_over_padding=False,
    ):
        super().__init__(d_model, input_dim, max_positions, project_input)
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, n_heads, attn_dim, ffn_dim, dropout, ffn_kernel, ffn_final_relu, conv_over_padding)
            for _ in range(n_layers)
        )

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        x = self._inputs(x)
        for block in self.blocks:
            x = block(x, keep)
        return self.norm(x)


class TransformerDecoder(_Stack):
    """proj(x) + timing, a stack of :class:`DecoderBlock`, a final layer norm; incremental cache."""

    def __init__(
        self,
        d_model,
        n_heads,
        attn_dim,
        ffn_dim,
        n_layers=1,
        dropout=0.0,
        ffn_kernel=3,
        input_dim=None,
        max_positions=1024,
        ffn_final_relu=True,
    ):
        super().__init__(d_model, input_dim, max_positions)
        self.blocks = nn.ModuleList(
            DecoderBlock(d_model, n_heads, attn_dim, ffn_dim, dropout, ffn_kernel, ffn_final_relu)
            for _ in range(n_layers)
        )

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        memory_keep: torch.Tensor,
        cache: Optional[Dict[int, Dict[str, torch.Tensor]]] = None,
        offset: int = 0,
    ) -> torch.Tensor:
        """``offset``: how many positions the cache already holds (incremental decoding)."""
        x = self._inputs(x, offset)
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


@dataclass(frozen=True, kw_only=True)
class TransformerSize:
    """Layer sizes. The defaults are MIME's paper/reference configuration (D_h = 300, one layer,
    2 heads, attention width 40, FFN width 50, convolution width 3), also Multi-TR's. The field
    names are the agents' option names; ``help`` is the option's help text."""

    embedding_size: int = field(
        default=300, metadata={'help': 'D_h, the model width (paper: 300)', 'aliases': ('-esz',)}
    )
    n_heads: int = 2
    attention_size: int = field(
        default=40, metadata={'help': 'total key/value width of attention (MIME reference: 40)'}
    )
    ffn_size: int = field(default=50, metadata={'help': 'FFN width (MIME reference: 50)'})
    n_layers: int = 1
    dropout: float = 0.0
    ffn_kernel: int = field(
        default=3, metadata={'help': 'width of the feed-forward convolutions (reference: 3; 1 = linear)'}
    )
    # the agent sizes the timing signal to its truncation lengths
    max_positions: int = field(default=1024, metadata={'option': False})
    ffn_final_relu: bool = field(
        default=True,
        metadata={
            'help': "a ReLU after the feed-forward layer's last convolution too, as the "
            "reference's PositionwiseFeedForward applies it (default: true for a new model; "
            'a model saved without this option keeps the form it was trained with, none)'
        },
    )
    conv_over_padding: bool = field(
        default=False,
        metadata={  # a deviation of ours, see the top
            'help': "the reference's padding: encoder convolutions run over padded positions "
            "and MIME's posterior averages them (ours by default: padding is zeroed and "
            "skipped, so a token's features do not depend on its batch)"
        },
    )

    def encoder(self, input_dim=None, project_input=True):
        return TransformerEncoder(
            self.embedding_size,
            self.n_heads,
            self.attention_size,
            self.ffn_size,
            self.n_layers,
            self.dropout,
            self.ffn_kernel,
            input_dim,
            self.max_positions,
            project_input,
            self.ffn_final_relu,
            self.conv_over_padding,
        )

    def decoder(self, input_dim=None):
        return TransformerDecoder(
            self.embedding_size,
            self.n_heads,
            self.attention_size,
            self.ffn_size,
            self.n_layers,
            self.dropout,
            self.ffn_kernel,
            input_dim,
            self.max_positions,
            self.ffn_final_relu,
        )
