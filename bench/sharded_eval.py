#!/usr/bin/env python3
"""The evidence step with 1 and with N workers (``parlai empathy_leaderboard --eval-workers N``):
wall seconds of each, their ratio, and whether the figures agree.

    PARLAI_EMPATHY_ED_DIR=... .venv/bin/python bench/sharded_eval.py -mf MODEL --workers 2 \\
        [--eval-args '-bs 64'] [--extra '--ed-datapath sample'] [--out bench/results/sharded_eval.json]

Both runs are child processes of this one, one after the other, on the same machine: run it on a
quiet machine (pause training runs with SIGSTOP) and say the load it ran under. Each run writes
its own board into a temporary folder; the figures compared are those of its ``results.json``
(exactly equal for counts, accuracies, BLEU and corpus Distinct-n; float sums such as PPL to the
4 significant digits ParlAI prints, as ``tests/test_sharded_eval.py`` checks).
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

EXACT = ('exs', 'avg_bleu', 'multi_bleu', 'dist-1', 'dist-2', 'emo_acc', 'p@1,100', 'p@1,100_shuffled', 'accuracy')


def run(model_file, workers, eval_args, extra, folder):
    outdir = os.path.join(folder, f'board{workers}')
    command = [
        'parlai',
        'empathy_leaderboard',
        '--entries',
        f'm={model_file}',
        '--outdir',
        outdir,
        '--bertscore-model',
        'none',
        '--progress',
        'false',
        '--eval-args',
        eval_args,
        '--eval-workers',
        str(workers),
    ] + shlex.split(extra)
    started = time.time()
    subprocess.run(command, check=True, capture_output=True, text=True)
    seconds = time.time() - started
    with open(os.path.join(outdir, 'results.json')) as f:
        values = json.load(f)['results'][0]['values']
    return {'command': shlex.join(command), 'seconds': round(seconds, 1), 'values': values}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('-mf', '--model-file', required=True)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--eval-args', default='-bs 64')
    parser.add_argument('--extra', default='', help='more empathy_leaderboard arguments')
    parser.add_argument('--out', default=None, help='write the measurement here (JSON)')
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        one = run(args.model_file, 1, args.eval_args, args.extra, folder)
        many = run(args.model_file, args.workers, args.eval_args, args.extra, folder)
    differ = {
        k: (one['values'][k], many['values'].get(k))
        for k in EXACT
        if k in one['values'] and one['values'][k] != many['values'].get(k)
    }
    differ.update(
        {
            k: (v, many['values'].get(k))
            for k, v in one['values'].items()
            if k not in EXACT and isinstance(v, float) and f'{v:.4g}' != f'{many["values"].get(k, float("nan")):.4g}'
        }
    )
    result = {
        'workers': args.workers,
        'one': one,
        'many': many,
        'speedup': round(one['seconds'] / many['seconds'], 2),
        'figures_differ': differ,
        'load_average_after': list(os.getloadavg()),
        'cores': os.cpu_count(),
    }
    print(
        f'1 worker {one["seconds"]} s, {args.workers} workers {many["seconds"]} s: '
        f'{result["speedup"]}x; figures {"differ: " + json.dumps(differ) if differ else "agree"}'
    )
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(result, f, indent=1)
    return 1 if differ else 0


if __name__ == '__main__':
    sys.exit(main())
