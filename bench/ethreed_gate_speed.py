"""ETHREED training updates with the decoder's emotion gate as ``torch.nn.Bilinear`` (the baseline:
``torch.bilinear``, whose CPU kernel builds an ``[N, out, in1, in2]`` product) against
``parlai_empathy.models.attention.Bilinear`` (the same function as one matrix product).

Both run in this process, alternating, through ParlAI's own training loop (``TrainLoop`` of
``parlai train_model -t empathy_ed_clean -m empathy/ethreed``, the paper's settings) on the same
batches (every variant and round starts from the same seeds), ``--listener-emotions conversation``
so that no classifier is needed. Only the updates are timed, after a few warm-up updates.

    .venv/bin/python bench/ethreed_gate_speed.py --updates 30 --rounds 2 --threads 1

Prints seconds per update of each variant and round, and baseline / ours.
"""

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time


def timed_updates(variant: str, updates: int, warmup: int, workdir: str) -> float:
    import numpy as np
    import torch
    from parlai.scripts.train_model import TrainLoop, setup_args

    from parlai_empathy.models import attention, ethreed

    ethreed.Bilinear = torch.nn.Bilinear if variant == 'baseline' else attention.Bilinear
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    opt = setup_args().parse_args(
        [
            '-t',
            'empathy_ed_clean',
            '-m',
            'empathy/ethreed',
            '--listener-emotions',
            'conversation',
            '-mf',
            os.path.join(workdir, variant, 'model'),
            '--log-every-n-secs',
            '100000',
        ]
    )
    loop = TrainLoop(opt)
    gate = type(loop.agent.model.decoder.emotion_gate)
    assert (gate is torch.nn.Bilinear) == (variant == 'baseline'), gate
    for _ in range(warmup):
        loop.world.parley()
    started = time.perf_counter()
    for _ in range(updates):
        loop.world.parley()
    return (time.perf_counter() - started) / updates


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--updates', type=int, default=30)
    parser.add_argument('--warmup', type=int, default=3)
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--out', default='')
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    seconds = {'baseline': [], 'ours': []}
    with tempfile.TemporaryDirectory() as workdir:
        for _ in range(args.rounds):
            for variant in ('baseline', 'ours'):
                seconds[variant].append(timed_updates(variant, args.updates, args.warmup, workdir))
                print(f'{variant}: {seconds[variant][-1]:.3f} s/update', flush=True)
    ratio = statistics.median(seconds['baseline']) / statistics.median(seconds['ours'])
    print(f'baseline / ours (medians): {ratio:.2f}')
    report = {
        'command': ['python'] + sys.argv,
        'seconds_per_update': seconds,
        'ratio': ratio,
        'threads': args.threads,
        'updates': args.updates,
        'load_at_end': os.getloadavg(),
        'machine': {'platform': platform.platform(), 'processor': platform.processor(), 'cpu_count': os.cpu_count()},
        'date': time.strftime('%Y-%m-%d %H:%M:%S %z'),
    }
    if args.out:
        with open(args.out, 'w') as handle:
            json.dump(report, handle, indent=1)


if __name__ == '__main__':
    main()
