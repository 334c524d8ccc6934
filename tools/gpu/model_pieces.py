"""A model trained on the GPU machine comes back in float16 pieces, so that a converged model's
weights can join the model zoo.

What comes back from a device command is at most 8 files of 16 MiB each, so the runbook
(``run.sh ... GPU_WEIGHTS=project/row,...``) writes, for each named row, its ParlAI model file with
float16 weights (``model.safetensors``), its ``model.opt`` and ``model.dict`` as one plain tar,
split into ``<project>.<row>.model.NN`` files of at most :data:`PIECE_BYTES`; ``summary.json``
records the pieces, the whole tar's sha256 and the largest rounding of a weight. Here:

    .venv/bin/python tools/gpu/model_pieces.py join --pieces FOLDER --name li_ethreed.ethreed \\
        --summary FOLDER/summary.json --out ~/parlai-empathy-runs/li_ethreed/ethreed_gpu

writes ``model`` (a ParlAI model file with float32 weights: float16 rounding, about 3 significant
digits), ``model.opt`` and ``model.dict``, so that ``parlai interactive -mf .../model`` and
``parlai eval_model -mf .../model`` run it. The optimizer state stays behind (a model that comes
back is for evaluation and chat; resuming its training needs its checkpoint).

Loading never unpickles: the weights travel as safetensors; the model file is read with the
package's weights-only loader, and written here by ``torch.save`` of tensors and plain numbers.
"""

import argparse
import glob
import hashlib
import io
import json
import os
import sys
import tarfile
from typing import Dict, List, Optional

PIECE_BYTES = 15 * 2**20  # < the 16 MiB a returned file may have
WEIGHTS, OPT, DICT = 'model.safetensors', 'model.opt', 'model.dict'


def _pieces_of(folder: str, name: str) -> List[str]:
    return sorted(glob.glob(os.path.join(folder, f'{glob.escape(name)}.model.[0-9][0-9]')))


def split(model_file: str, out: str, name: str, piece_bytes: int = PIECE_BYTES) -> Dict:
    """``model_file`` (+ ``.opt``, ``.dict``) as float16 pieces ``<name>.model.NN`` in ``out``."""
    from halves import half_tensors
    from safetensors.torch import save

    from parlai_empathy.integration.safe_loading import load_checkpoint

    states = load_checkpoint(model_file)
    half, worst = half_tensors(states['model'], model_file)
    scalars = {k: v for k, v in states.items() if isinstance(v, (bool, int, float, str))}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode='w') as tar:

        def add(arcname: str, data: bytes) -> None:
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        add(WEIGHTS, save(half, metadata={'format': 'pt', 'scalars': json.dumps(scalars)}))
        for suffix, arcname in (('.opt', OPT), ('.dict', DICT)):
            if os.path.isfile(model_file + suffix):
                with open(model_file + suffix, 'rb') as f:
                    add(arcname, f.read())
    data = buffer.getvalue()
    os.makedirs(out, exist_ok=True)
    pieces = []
    for i, start in enumerate(range(0, len(data), piece_bytes)):
        path = os.path.join(out, f'{name}.model.{i:02d}')
        with open(path, 'wb') as f:
            f.write(data[start : start + piece_bytes])
        pieces.append(os.path.basename(path))
    return {
        'pieces': pieces,
        'bytes': len(data),
        'sha256': hashlib.sha256(data).hexdigest(),
        'max_abs_rounding': worst,
        'scalars': scalars,
    }


def join(folder: str, name: str, out: str, sha256: Optional[str] = None) -> str:
    """The pieces ``<name>.model.NN`` in ``folder`` as a ParlAI model folder ``out``; returns the
    model file's path. ``sha256``: the whole's, from ``summary.json`` (checked when given)."""
    import torch
    from safetensors import safe_open

    paths = _pieces_of(folder, name)
    if not paths:
        raise FileNotFoundError(f'{folder}: no pieces {name}.model.NN')
    numbers = [int(p.rsplit('.', 1)[1]) for p in paths]
    if numbers != list(range(len(paths))):
        raise FileNotFoundError(f'{folder}: pieces of {name} missing (have {numbers})')
    data = b''.join(open(p, 'rb').read() for p in paths)
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f'{folder}: the pieces of {name} are damaged or incomplete (sha256 differs)')
    os.makedirs(out, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
        if WEIGHTS not in names or set(names) - {WEIGHTS, OPT, DICT}:
            raise ValueError(f'{folder}: the pieces of {name} hold {names}, not {WEIGHTS} [+ {OPT}, {DICT}]')
        tar.extractall(out, filter='data')
    weights = os.path.join(out, WEIGHTS)
    with safe_open(weights, framework='pt') as f:
        scalars = json.loads((f.metadata() or {}).get('scalars', '{}'))
        model = {k: (t.float() if t.is_floating_point() else t) for k in f.keys() for t in [f.get_tensor(k)]}
    path = os.path.join(out, 'model')
    torch.save({**scalars, 'model': model}, path)
    os.remove(weights)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = parser.add_subparsers(dest='command', required=True)
    p = sub.add_parser('split', help='a model file as float16 pieces')
    p.add_argument('--model-file', required=True)
    p.add_argument('--name', required=True)
    p.add_argument('--out', required=True)
    p = sub.add_parser('join', help='the pieces back as a ParlAI model folder (float32)')
    p.add_argument('--pieces', required=True, help='the folder holding <name>.model.NN')
    p.add_argument('--name', required=True, help='<project>.<row>')
    p.add_argument('--out', required=True)
    p.add_argument('--summary', default=None, help="the run's summary.json: its sha256 of the whole is checked")
    args = parser.parse_args(argv)
    if args.command == 'split':
        print(json.dumps(split(args.model_file, args.out, args.name), indent=1))
        return 0
    sha = None
    if args.summary:
        with open(args.summary) as f:
            weights = json.load(f).get('weights', {})
        entry = next((v for k, v in weights.items() if k.replace('/', '.') == args.name), None)
        if entry is None:
            raise SystemExit(f'{args.summary}: no weights for {args.name}')
        sha = entry['sha256']
    print(join(args.pieces, args.name, args.out, sha))
    return 0


if __name__ == '__main__':
    sys.exit(main())
