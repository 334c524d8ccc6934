"""BERT's encoder layers repacked into PyTorch's fused ``TransformerEncoderLayer``, for inference.

One interactive query encodes one short context (about 20 word pieces). At that size a HuggingFace
BERT layer is bound by Python and per-operator dispatch (some 30 small operators per layer), not by
arithmetic. In eval mode without gradients, ``nn.TransformerEncoderLayer`` runs a whole post-norm
layer as one native call (PyTorch's "fast path"): 1.05-1.2x faster encodings of one context on
this project's CPU (`git show b613b10:bench/RESULTS.md`). An unpadded input (one interactive query) skips even the
module's per-call fast-path checks (~0.15 ms per layer, ~15% of a short query's encoding) and calls
the native kernel those checks lead to, ``torch._transformer_encoder_layer_fwd``, directly; a
PyTorch without that operator, and padded batches, go through the module. The copy is rebuilt
whenever the source weights change (training steps, ``load_state_dict``, a dtype cast), so it can
never answer with stale weights.

Only plain BERT layers qualify (absolute positions, exact GELU, no cross-attention): MiniLM and
BERT-base do; other families keep the HuggingFace path.
"""

from typing import Callable, List, Optional, Tuple

import torch
from torch import nn


def supports(transformer: nn.Module) -> bool:
    """Whether ``transformer`` is a HuggingFace BERT whose layers the fused path reproduces."""
    config = getattr(transformer, 'config', None)
    layers = getattr(getattr(transformer, 'encoder', None), 'layer', None)
    return (
        config is not None
        and layers is not None
        and getattr(config, 'model_type', None) == 'bert'
        and getattr(config, 'hidden_act', None) == 'gelu'
        and getattr(config, 'position_embedding_type', 'absolute') == 'absolute'
        and not getattr(config, 'is_decoder', False)
        and not getattr(config, 'add_cross_attention', False)
        # the module's own fast path refuses odd head counts; the direct kernel call must too
        and getattr(config, 'num_attention_heads', 1) % 2 == 0
    )


def _fused_layer(layer: nn.Module, config) -> nn.TransformerEncoderLayer:
    """One HuggingFace ``BertLayer`` as a post-norm ``TransformerEncoderLayer`` with equal weights."""
    attention, weight = layer.attention, next(layer.parameters())
    fused = nn.TransformerEncoderLayer(
        config.hidden_size,
        config.num_attention_heads,
        config.intermediate_size,
        dropout=0.0,
        activation='gelu',
        layer_norm_eps=config.layer_norm_eps,
        batch_first=True,
        device=weight.device,
        dtype=weight.dtype,
    )
    q, k, v = attention.self.query, attention.self.key, attention.self.value
    pairs = [
        (fused.self_attn.in_proj_weight, torch.cat([q.weight, k.weight, v.weight])),
        (fused.self_attn.in_proj_bias, torch.cat([q.bias, k.bias, v.bias])),
        (fused.self_attn.out_proj.weight, attention.output.dense.weight),
        (fused.self_attn.out_proj.bias, attention.output.dense.bias),
        (fused.norm1.weight, attention.output.LayerNorm.weight),
        (fused.norm1.bias, attention.output.LayerNorm.bias),
        (fused.linear1.weight, layer.intermediate.dense.weight),
        (fused.linear1.bias, layer.intermediate.dense.bias),
        (fused.linear2.weight, layer.output.dense.weight),
        (fused.linear2.bias, layer.output.dense.bias),
        (fused.norm2.weight, layer.output.LayerNorm.weight),
        (fused.norm2.bias, layer.output.LayerNorm.bias),
    ]
    with torch.no_grad():
        for target, source in pairs:
            target.copy_(source)
    fused.requires_grad_(False)
    return fused.eval()


def _fast_path_allowed() -> bool:
    """PyTorch's switch for its fused attention paths (``torch.backends.mha``), honoured here too."""
    mha = getattr(torch.backends, 'mha', None)
    return mha is None or not hasattr(mha, 'get_fastpath_enabled') or mha.get_fastpath_enabled()


# the kernel the module's fast path ends in; None in a PyTorch without it (then: the module)
_LAYER_KERNEL = getattr(torch, '_transformer_encoder_layer_fwd', None)


def _native_layer_call(layer: nn.TransformerEncoderLayer) -> Callable[[torch.Tensor], torch.Tensor]:
    """``layer``'s fused kernel bound to its weights, for unpadded inputs."""
    attention = layer.self_attn
    weights = (
        attention.embed_dim,
        attention.num_heads,
        attention.in_proj_weight,
        attention.in_proj_bias,
        attention.out_proj.weight,
        attention.out_proj.bias,
        True,  # GELU
        False,  # post-norm, as BERT
        layer.norm1.eps,
        layer.norm1.weight,
        layer.norm1.bias,
        layer.norm2.weight,
        layer.norm2.bias,
        layer.linear1.weight,
        layer.linear1.bias,
        layer.linear2.weight,
        layer.linear2.bias,
    )
    return lambda hidden: torch._transformer_encoder_layer_fwd(hidden, *weights, None, None)


class FusedBertInference:
    """Fused-layer inference for one HuggingFace BERT; not an ``nn.Module``, so its copy of the
    weights never enters a state dict, a checksum or an optimizer."""

    def __init__(self, transformer: nn.Module):
        if not supports(transformer):
            raise ValueError(f'{type(transformer).__name__} is not a plain BERT encoder')
        self.transformer = transformer
        # dtype casts and load_state_dict keep these Parameter objects and change their data
        self._source_parameters = list(transformer.encoder.parameters())
        self._layers: List[nn.TransformerEncoderLayer] = []
        self._native_calls: List[Callable[[torch.Tensor], torch.Tensor]] = []  # empty without the kernel
        self._signature: Optional[Tuple] = None

    def _weights_signature(self) -> Tuple:
        """Changes on every in-place update (version counter) and every re-allocation (pointer)."""
        return tuple((p.data_ptr(), p._version) for p in self._source_parameters)

    def _current_layers(self) -> List[nn.TransformerEncoderLayer]:
        signature = self._weights_signature()
        if signature != self._signature:
            config = self.transformer.config
            self._layers = [_fused_layer(layer, config) for layer in self.transformer.encoder.layer]
            self._native_calls = [_native_layer_call(layer) for layer in self._layers] if _LAYER_KERNEL else []
            self._signature = signature
        return self._layers

    def __call__(self, token_ids: torch.LongTensor, mask: torch.Tensor) -> torch.Tensor:
        """Last hidden states ``[batch, len, hidden]``, as ``transformer(...).last_hidden_state``
        (positions under padding hold other values, which pooling ignores)."""
        hidden = self.transformer.embeddings(input_ids=token_ids)
        padding = None if bool(mask.all()) else ~mask.bool()
        layers = self._current_layers()
        if padding is None and self._native_calls and _fast_path_allowed():
            for call in self._native_calls:
                hidden = call(hidden)
            return hidden
        for layer in layers:
            hidden = layer(hidden, src_key_padding_mask=padding)
        return hidden
