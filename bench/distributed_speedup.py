"""Training throughput of 1 worker vs N CPU workers (gloo) for ``empathy/mime``.

The same tiny MIME on the embedded ED sample, the same batch per worker and the same number of
updates: once with ``parlai train_model`` (1 worker, all the threads) and once with ``parlai
multiprocessing_train`` (N workers sharing the cores, threads split between them). Each update of N
workers consumes N batches. Throughput is training examples per second of the training loop
(ParlAI's own "max_train_steps elapsed ... time elapsed" line: start-up and the final evaluation
are left out).

    .venv/bin/python bench/distributed_speedup.py [--workers 2] [--threads 2] [--steps 60] [--bs 16]
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

PARLAI = os.path.join(os.path.dirname(sys.executable), 'parlai')
TINY_MIME = [
    '--embedding-size',
    '64',
    '--attention-size',
    '32',
    '--ffn-size',
    '64',
    '--n-heads',
    '2',
    '--latent-size',
    '32',
    '--dict-maxtokens',
    '1500',
    '--glove-init',
    'false',
]


def train(workers, threads_per_worker, steps, batch_size, folder):
    command = ['train_model'] if workers == 1 else ['multiprocessing_train', '--distributed-world-size', str(workers)]
    args = [
        PARLAI,
        *command,
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-m',
        'empathy/mime',
        *TINY_MIME,
        '-mf',
        os.path.join(folder, 'model'),
        '-bs',
        str(batch_size),
        '--max-train-steps',
        str(steps),
        '-vme',
        '100000',
        '--validation-max-exs',
        '8',
        '--short-final-eval',
        'true',
        '-vmt',
        'ppl',
        '-vmm',
        'min',
        '--skip-generation',
        'true',
        '--log-every-n-secs',
        '-1',
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads_per_worker), HF_HUB_OFFLINE='1')
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=folder)
    log = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f'{" ".join(command)} failed:\n{log[-3000:]}')
    found = re.search(r'max_train_steps elapsed:(\d+) time elapsed:([\d.]+)s', log)
    if not found:
        raise RuntimeError(f'no "max_train_steps elapsed" line in the log:\n{log[-3000:]}')
    updates, seconds = int(found.group(1)), float(found.group(2))
    examples = updates * batch_size * workers
    return {
        'workers': workers,
        'threads_per_worker': threads_per_worker,
        'updates': updates,
        'examples': examples,
        'loop_s': seconds,
        'examples_per_s': examples / seconds,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--threads', type=int, default=os.cpu_count(), help='threads in all')
    parser.add_argument('--steps', type=int, default=60)
    parser.add_argument('--bs', type=int, default=16, help='batch size per worker')
    args = parser.parse_args()
    rows = []
    for workers in (1, args.workers):
        with tempfile.TemporaryDirectory() as folder:
            rows.append(train(workers, max(1, args.threads // workers), args.steps, args.bs, folder))
    print('| workers | threads each | updates | examples | loop seconds | examples/s |')
    print('|---|---|---|---|---|---|')
    for r in rows:
        print(
            f'| {r["workers"]} | {r["threads_per_worker"]} | {r["updates"]} | {r["examples"]} | '
            f'{r["loop_s"]:.1f} | {r["examples_per_s"]:.1f} |'
        )
    print(
        f'speed-up of {args.workers} workers over 1: {rows[1]["examples_per_s"] / rows[0]["examples_per_s"]:.2f}x '
        f'(examples/s); per update: {rows[0]["loop_s"] / rows[1]["loop_s"]:.2f}x'
    )


if __name__ == '__main__':
    main()
