"""A Hugging Face model folder with float16 weights for the trip to the GPU machine, and back to
float32 there (the weights keep float16's precision: about 3 significant digits).

Only torch and safetensors are imported, so the GPU machine's own Python runs this before anything
of ours is installed (``mpnet_pieces.py join``).
"""

import json
import os
import re
import shutil
from typing import Dict, Optional

WEIGHTS = 'model.safetensors'


def half_tensors(tensors, where: str):
    """``(float16 copies of the floating tensors, the others as they are; the largest rounding)``;
    a value outside float16's range stops it, naming ``where`` and the tensor."""
    import torch

    half, worst = {}, 0.0
    for key, tensor in tensors.items():
        tensor = tensor.detach().cpu().contiguous()
        half[key] = tensor.to(torch.float16) if tensor.is_floating_point() else tensor
        if tensor.is_floating_point() and tensor.numel():
            if not torch.isfinite(half[key]).all():
                raise ValueError(f'{where}: {key} has values outside float16 range')
            worst = max(worst, float((half[key].float() - tensor.float()).abs().max()))
    return half, worst


def half_model(src: str, out: str, skip=('README.md',)) -> Dict[str, float]:
    """``src`` copied to ``out`` with float16 weights; returns the largest rounding error."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, out, ignore=shutil.ignore_patterns(WEIGHTS, *skip), dirs_exist_ok=True)
    half, worst = half_tensors(load_file(os.path.join(src, WEIGHTS)), src)
    save_file(half, os.path.join(out, WEIGHTS), metadata={'format': 'pt'})
    return {'max_abs_rounding': worst}


def float32_model(src: str, out: str, layers: Optional[int] = None) -> str:
    """``src`` (float16 weights) as a float32 model folder ``out``, done once; ``layers`` keeps the
    first encoder layers only (a tiny model for the CPU tests)."""
    marker = os.path.join(out, '.float32')
    if os.path.isfile(marker):
        return out
    import torch
    from safetensors.torch import load_file, save_file

    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out, ignore=shutil.ignore_patterns(WEIGHTS))
    weights = {}
    for key, tensor in load_file(os.path.join(src, WEIGHTS)).items():
        match = re.match(r'(?:\w+\.)?encoder\.layers?\.(\d+)\.', key)
        if layers is not None and match and int(match.group(1)) >= layers:
            continue
        weights[key] = tensor.to(torch.float32) if tensor.is_floating_point() else tensor
    save_file(weights, os.path.join(out, WEIGHTS), metadata={'format': 'pt'})
    if layers is not None:
        with open(os.path.join(out, 'config.json')) as f:
            config = json.load(f)
        config['num_hidden_layers'] = layers
        with open(os.path.join(out, 'config.json'), 'w') as f:
            json.dump(config, f, indent=2)
    open(marker, 'w').close()
    return out
