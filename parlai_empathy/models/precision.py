"""When bfloat16 autocast pays: ``--bf16 true|false|auto``.

bfloat16 autocast halves the cost of the encoders' matrix products only where the hardware
multiplies bfloat16 natively: CPUs with AVX-512 BF16 or AMX, and GPUs that support it. On a CPU
without either (AVX2 only) PyTorch emulates it and the same work takes several times
longer (``bench/bf16_speed.py`` measures the ratio on the machine it runs on). ``auto`` asks the
hardware, so that one command line (a row's plan) runs at its best on both kinds of machine; the
agents write the resolved ``true``/``false`` into the options they save, so a model records the
precision it was trained in.
"""

import argparse
from typing import Union

import torch

Bf16Option = Union[bool, str]
AUTO = 'auto'


def native_bf16(use_cuda: bool = False) -> bool:
    """Whether this machine multiplies bfloat16 natively (the GPU when ``use_cuda``, else the CPU)."""
    if use_cuda:
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    cpu = getattr(torch, 'cpu', None)
    probes = ('_is_avx512_bf16_supported', '_is_amx_tile_supported')
    return any(bool(getattr(cpu, name, lambda: False)()) for name in probes)


def bf16_option(value) -> Bf16Option:
    """Command-line type of ``--bf16``: ``true``/``false`` (as ParlAI's ``bool``) or ``auto``."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text == AUTO:
        return AUTO
    if text in ('true', 't', 'yes', 'y', '1'):
        return True
    if text in ('false', 'f', 'no', 'n', '0', 'none', ''):
        return False
    raise argparse.ArgumentTypeError(f'--bf16 takes true, false or auto, not {value!r}')


def resolve_bf16(value: Bf16Option, use_cuda: bool = False) -> bool:
    """``auto`` -> :func:`native_bf16`; anything else as a boolean option."""
    value = bf16_option(value) if value is not None else False
    return native_bf16(use_cuda) if value == AUTO else bool(value)


def resolve_bf16_option(opt: dict) -> bool:
    """Resolve an agent's ``opt['bf16']`` in place for the device it will run on (the GPU unless
    ``--no-cuda`` or none is available), so that the saved options hold ``true``/``false``."""
    use_cuda = not opt.get('no_cuda') and torch.cuda.is_available()
    opt['bf16'] = resolve_bf16(opt.get('bf16'), use_cuda=use_cuda)
    return opt['bf16']
