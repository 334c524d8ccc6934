"""Training under SIGKILL: work lost per kill against --save-every-n-secs, and the final model loads.

For each model (tiny MIME and ETHREED on the embedded ED sample, ``--ed-datapath sample``), one
``parlai train_model`` run to ``--steps`` updates is SIGKILLed ``--kills`` times at random moments
(uniform in ``[--min-gap, --max-gap]`` seconds after each start) and restarted with the same command
line each time; ParlAI resumes from ``<model>.checkpoint``, which ``--save-every-n-secs`` refreshes.
The run logs every update (``--log-every-n-steps 1``), so for each kill:

* updates done = the last ``total_steps`` the run printed before the kill;
* updates kept = ``train_steps`` in ``<model>.checkpoint.trainstats`` at the moment of the kill;
* work lost = done - kept updates, and the seconds since that checkpoint was written (goal: never
  more than one ``--save-every-n-secs`` interval, plus the update in flight).

At the end the final model is loaded by ``parlai eval_model`` on a few test examples.

    nice -n 19 .venv/bin/python bench/training_kills.py --models mime ethreed --kills 10 --save-every 20
"""

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

PARLAI = os.path.join(os.path.dirname(sys.executable), 'parlai')
ED = ['-t', 'empathy_ed_clean', '--ed-datapath', 'sample']
TINY = {
    'mime': [
        '-m',
        'empathy/mime',
        '--embedding-size',
        '32',
        '--attention-size',
        '16',
        '--ffn-size',
        '32',
        '--latent-size',
        '16',
        '--n-heads',
        '2',
        '-bs',
        '8',
        '-lr',
        '1e-3',
    ],
    'ethreed': [
        '-m',
        'empathy/ethreed',
        '--listener-emotions',
        'none',
        '--glove-init',
        'false',
        '--hidden-size',
        '16',
        '--embedding-size',
        '16',
        '--dict-maxtokens',
        '1500',
        '-bs',
        '4',
    ],
}
# the per-update log line, and ParlAI's last line when the run reaches --max-train-steps (the
# update that ends the run prints no per-update line)
STEPS_RE = re.compile(r'total_steps:(\d+)|max_train_steps elapsed:(\d+)')


def train_command(model: str, model_file: str, steps: int, save_every: float):
    return [
        PARLAI,
        'train_model',
        *ED,
        *TINY[model],
        '-mf',
        model_file,
        '--max-train-steps',
        str(steps),
        '--save-every-n-secs',
        str(save_every),
        '--log-every-n-steps',
        '1',
        '-vtim',
        '-1',
        '-veps',
        '-1',
        '-vme',
        '16',
        '--short-final-eval',
        'true',
        '-vmt',
        'ppl',
        '-vmm',
        'min',
        '--skip-generation',
        'true',
    ]


def checkpoint_state(model_file: str):
    """(train_steps, mtime) of the checkpoint now on disk, or (0, None)."""
    path = model_file + '.checkpoint.trainstats'
    try:
        with open(path) as f:
            steps = json.load(f).get('train_steps', 0)
        return steps, os.path.getmtime(model_file + '.checkpoint')
    except (OSError, ValueError):
        return 0, None


def run_once(command, log_path, kill_after=None):
    """Run the command; SIGKILL it after ``kill_after`` s. Returns (exit code, last total_steps,
    checkpoint state at the kill, kill time)."""
    last = {'steps': None}
    with open(log_path, 'a') as log:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def read():
            for line in proc.stdout:
                log.write(line)
                match = STEPS_RE.search(line)
                if match:
                    last['steps'] = int(match.group(1) or match.group(2))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        state = killed_at = None
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            state = checkpoint_state(command[command.index('-mf') + 1])
            proc.send_signal(signal.SIGKILL)
            killed_at = time.time()
            proc.wait()
        reader.join(timeout=30)
    return proc.returncode, last['steps'], state, killed_at


def bench_model(model: str, workdir: str, steps: int, kills: int, save_every: float, gaps, rng):
    model_file = os.path.join(workdir, model, 'model')
    os.makedirs(os.path.dirname(model_file), exist_ok=True)
    command = train_command(model, model_file, steps, save_every)
    log_path = model_file + '.train.log'
    rows = []
    while len(rows) < kills:
        code, done, state, killed_at = run_once(command, log_path, rng.uniform(*gaps))
        if killed_at is None:  # finished before the kill: too few steps for this many kills
            break
        kept, saved_at = state
        rows.append(
            {
                'updates_done': done or 0,
                'updates_kept': kept,
                'lost_updates': max(0, (done or 0) - kept),
                'seconds_since_checkpoint': None if saved_at is None else killed_at - saved_at,
            }
        )
        print(f'{model} kill {len(rows)}: {rows[-1]}', flush=True)
    code, done, _, _ = run_once(command, log_path)  # run to the end
    finished = code == 0 and done == steps
    evaluated = subprocess.run(
        [
            PARLAI,
            'eval_model',
            *ED,
            '-dt',
            'test',
            '-mf',
            model_file,
            '-ne',
            '8',
            '-bs',
            '4',
            '--skip-generation',
            'true',
        ],
        capture_output=True,
        text=True,
    )
    return {
        'model': model,
        'steps': steps,
        'save_every_n_secs': save_every,
        'kills': rows,
        'finished_all_steps': finished,
        'final_model_loads': evaluated.returncode == 0,
        'eval_tail': evaluated.stdout[-400:] + evaluated.stderr[-400:],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--models', nargs='+', default=['mime', 'ethreed'], choices=sorted(TINY))
    parser.add_argument('--kills', type=int, default=10)
    parser.add_argument('--steps', type=int, default=400)
    parser.add_argument('--save-every', type=float, default=20.0)
    parser.add_argument('--min-gap', type=float, default=30.0, help='seconds after a start')
    parser.add_argument('--max-gap', type=float, default=90.0)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--workdir', default=None)
    parser.add_argument('--json', default=None)
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix='training_kills_')
    rng = random.Random(args.seed)
    results = [
        bench_model(m, workdir, args.steps, args.kills, args.save_every, (args.min_gap, args.max_gap), rng)
        for m in args.models
    ]
    print(
        '| model | kills | lost updates per kill (max / median) | seconds since checkpoint (max) | '
        'save every | finished | final model loads |'
    )
    print('|---|---|---|---|---|---|---|')
    for r in results:
        lost = [k['lost_updates'] for k in r['kills']] or [0]
        since = [k['seconds_since_checkpoint'] for k in r['kills'] if k['seconds_since_checkpoint'] is not None]
        print(
            f'| {r["model"]} | {len(r["kills"])} | {max(lost)} / {statistics.median(lost):g} | '
            f'{max(since) if since else float("nan"):.1f} | {r["save_every_n_secs"]:g} s | '
            f'{r["finished_all_steps"]} | {r["final_model_loads"]} |'
        )
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=1)


if __name__ == '__main__':
    main()
