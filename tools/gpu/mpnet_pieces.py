"""all-mpnet-base-v2 to the GPU machine in float16 pieces.

Its weights (438 MB in float32, 220 MB in float16) exceed what one device command carries (64 MiB
with the working tree), but files an earlier command left on the machine stay while it is held.
So the float16 weights travel as pieces, one per command, and are joined and checked there.

    # here, once (DIR: the all-mpnet-base-v2 folder, e.g. the one --bert-model offline-mpnet
    # assembles under ParlAI's datapath from the [mpnet] extra):
    .venv/bin/python tools/gpu/mpnet_pieces.py split --model-dir DIR --out .gpu-mpnet
    # there, after every piece has been copied into one folder (tools/gpu/README.md):
    python3 tools/gpu/mpnet_pieces.py join --pieces ~/mpnet-pieces --out ~/all-mpnet-base-v2

``split`` writes ``.gpu-mpnet/p0 .. pN``: each holds one slice of the float16 ``model.safetensors``
(``PIECE_MIB`` at most) and ``pieces.json`` (the sha256 of every slice and of the whole); ``p0``
also the small files (config, tokenizer) as ``small.tar``. ``join`` checks every slice and the
whole, and writes a float32 model folder that ``--bert-model`` takes. It imports only torch and
safetensors, so the machine's own ``python3`` runs it.
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile

from halves import WEIGHTS, float32_model, half_model

PIECE_MIB = 56  # + the working tree (about 2 MiB) + the bundle's absence: under one command's 64 MiB
MANIFEST, SMALL = 'pieces.json', 'small.tar'


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def split(model_dir: str, out: str, piece_mib: int = PIECE_MIB) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        half = os.path.join(tmp, 'half')
        rounding = half_model(model_dir, half)
        with open(os.path.join(half, WEIGHTS), 'rb') as f:
            weights = f.read()
        size = piece_mib * 2**20
        slices = [weights[i : i + size] for i in range(0, len(weights), size)]
        manifest = {
            'whole_sha256': sha256_bytes(weights),
            'whole_bytes': len(weights),
            'pieces': [sha256_bytes(s) for s in slices],
            'source': os.path.basename(model_dir.rstrip('/')),
            **rounding,
        }
        shutil.rmtree(out, ignore_errors=True)
        for number, data in enumerate(slices):
            folder = os.path.join(out, f'p{number}')
            os.makedirs(folder)
            with open(os.path.join(folder, f'{WEIGHTS}.{number:02d}'), 'wb') as f:
                f.write(data)
            with open(os.path.join(folder, MANIFEST), 'w') as f:
                json.dump(manifest, f, indent=1)
        with tarfile.open(os.path.join(out, 'p0', SMALL), 'w') as tar:
            for name in sorted(os.listdir(half)):
                if name != WEIGHTS:
                    tar.add(os.path.join(half, name), name)
    return manifest


def join(pieces: str, out: str) -> str:
    with open(os.path.join(pieces, MANIFEST)) as f:
        manifest = json.load(f)
    chunks = []
    for number, expected in enumerate(manifest['pieces']):
        path = os.path.join(pieces, f'{WEIGHTS}.{number:02d}')
        if not os.path.isfile(path):
            raise FileNotFoundError(f'{path} is missing: copy piece p{number} first')
        with open(path, 'rb') as f:
            chunks.append(f.read())
        if sha256_bytes(chunks[-1]) != expected:
            raise ValueError(f'{path}: sha256 differs from {MANIFEST}: the piece was damaged, send it again')
    weights = b''.join(chunks)
    if sha256_bytes(weights) != manifest['whole_sha256']:
        raise ValueError('the joined weights differ from what was split')
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(out))) as tmp:
        with tarfile.open(os.path.join(pieces, SMALL)) as tar:
            tar.extractall(tmp, filter='data')
        with open(os.path.join(tmp, WEIGHTS), 'wb') as f:
            f.write(weights)
        return float32_model(tmp, out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = parser.add_subparsers(dest='command', required=True)
    one = sub.add_parser('split', help='here: float16 pieces of a model folder')
    one.add_argument('--model-dir', required=True)
    one.add_argument('--out', default='.gpu-mpnet')
    one.add_argument('--piece-mib', type=int, default=PIECE_MIB)
    two = sub.add_parser('join', help='there: check and join the pieces into a float32 model folder')
    two.add_argument('--pieces', required=True, help='the folder every piece was copied into')
    two.add_argument('--out', required=True)
    args = parser.parse_args(argv)
    if args.command == 'split':
        manifest = split(args.model_dir, args.out, args.piece_mib)
        print(
            f'{len(manifest["pieces"])} pieces of at most {args.piece_mib} MiB in {args.out} '
            f'({manifest["whole_bytes"] / 2**20:.1f} MiB of float16 weights, largest rounding '
            f'{manifest["max_abs_rounding"]:.2e})'
        )
    else:
        print(f'float32 model folder: {join(args.pieces, args.out)}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
