"""Train MIME across two SLURM tasks, cancel the job, resubmit it, and check that it resumed.

Needs a running cluster (``tools/slurm/start.sh``; ``SLURM_CONF`` set or ``--slurm-conf``). The
job is ``srun parlai distributed_train -t empathy_ed_clean -m empathy/mime ...`` with tiny sizes on
the embedded ED sample, gloo on CPU. It validates (and writes ``model.checkpoint``) every
``--valid-steps`` updates; once a checkpoint exists the job is ``scancel``-ed, then the very same
job is submitted again and must go on from the checkpoint to ``--steps`` updates.

    export SLURM_CONF=/tmp/parlai-empathy-slurm/slurm.conf
    .venv/bin/python tools/slurm/mime_resume.py --workdir /tmp/mime-slurm [--tasks 2 --steps 40]

Prints the figures (wall times, steps at the cancel, the resume point, final steps) and writes them
with both jobs' logs to ``<workdir>/figures.json``.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time

PARLAI = os.path.join(os.path.dirname(sys.executable), 'parlai')
TINY_MIME = [
    '--embedding-size',
    '32',
    '--attention-size',
    '16',
    '--ffn-size',
    '32',
    '--n-heads',
    '2',
    '--latent-size',
    '16',
    '--dict-maxtokens',
    '1500',
    '--glove-init',
    'false',
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def train_command(model_file, steps, valid_steps, port, batch_size=8):
    return [
        PARLAI,
        'distributed_train',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-m',
        'empathy/mime',
        *TINY_MIME,
        '-mf',
        model_file,
        '-bs',
        str(batch_size),
        '--max-train-steps',
        str(steps),
        '-vstep',
        str(valid_steps),
        '--save-after-valid',
        'true',
        '-vme',
        '100000',
        '--validation-max-exs',
        '16',
        '--short-final-eval',
        'true',
        '-vmt',
        'ppl',
        '-vmm',
        'min',
        '--skip-generation',
        'true',
        '--port',
        str(port),
    ]


def dict_command(model_file):
    """ParlAI refuses to build a dictionary inside distributed_train: one task builds it first
    (a no-op when it exists)."""
    return [
        PARLAI,
        'build_dict',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-m',
        'empathy/mime',
        '--dict-file',
        model_file + '.dict',
        '--dict-maxtokens',
        '1500',
    ]


def batch_script(command, log, tasks, model_file) -> str:
    quoted = ' '.join(f"'{a}'" for a in command)
    build = ' '.join(f"'{a}'" for a in dict_command(model_file))
    return f"""#!/bin/bash
#SBATCH --job-name=mime-resume
#SBATCH --ntasks={tasks}
#SBATCH --cpus-per-task=1
#SBATCH --output={log}
# one torch thread per task: the tasks share the node's cores
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK HF_HUB_OFFLINE=1
# gloo's own sockets on the loopback interface (a one-node cluster)
export GLOO_SOCKET_IFNAME=lo
[ -e '{model_file}.dict' ] || srun --ntasks=1 {build}
srun --kill-on-bad-exit=1 {quoted}
"""


def submit(script_path) -> str:
    out = subprocess.run(['sbatch', '--parsable', script_path], check=True, capture_output=True, text=True)
    return out.stdout.strip().split(';')[0]


def job_state(job_id) -> str:
    out = subprocess.run(['scontrol', 'show', 'job', job_id], capture_output=True, text=True)
    found = re.search(r'JobState=(\S+)', out.stdout)
    return found.group(1) if found else 'GONE'


def wait_for(predicate, timeout, what, poll=1.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise TimeoutError(f'timed out after {timeout} s waiting for {what}')


def checkpoint_steps(model_file):
    """train_steps of the last checkpoint, or None while there is none (or it is being written)."""
    try:
        with open(model_file + '.checkpoint.trainstats') as f:
            return json.load(f).get('train_steps')
    except (OSError, ValueError):
        return None


def final_stats(model_file):
    """From the finished run's trainstats: steps, train time, and the updates at which it validated
    (before and after the resubmission: ParlAI carries the reports over from the checkpoint)."""
    if not os.path.exists(model_file + '.trainstats'):
        return {'final_train_steps': None}
    with open(model_file + '.trainstats') as f:
        stats = json.load(f)
    return {
        'final_train_steps': stats.get('train_steps'),
        'train_time_s': round(stats.get('train_time', 0), 1),
        'validated_at_updates': [r.get('total_train_updates') for r in stats.get('valid_reports', [])],
    }


def finished(job_id):
    state = job_state(job_id)
    return state if state in ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'NODE_FAIL', 'GONE') else None


def run(workdir, tasks=2, steps=40, valid_steps=10, timeout=1800):
    os.makedirs(workdir, exist_ok=True)
    model_file = os.path.join(workdir, 'model')
    command = train_command(model_file, steps, valid_steps, free_port())
    logs = [os.path.join(workdir, 'job1.log'), os.path.join(workdir, 'job2.log')]
    figures = {
        'command': 'srun ' + ' '.join(['parlai'] + command[1:]),
        'tasks': tasks,
        'max_train_steps': steps,
        'valid_steps': valid_steps,
    }

    # 1. first submission, cancelled once a checkpoint exists
    script = os.path.join(workdir, 'job1.sbatch')
    with open(script, 'w') as f:
        f.write(batch_script(command, logs[0], tasks, model_file))
    started = time.time()
    job = submit(script)
    print(f'submitted job {job}: {tasks} tasks, distributed_train, cancel after the first checkpoint', flush=True)
    at_cancel = wait_for(lambda: checkpoint_steps(model_file) or finished(job), timeout, 'the first checkpoint')
    if isinstance(at_cancel, str):
        raise RuntimeError(f'job {job} ended ({at_cancel}) before writing a checkpoint; log: {logs[0]}')
    subprocess.run(['scancel', job], check=False)
    state = wait_for(lambda: finished(job), 120, f'job {job} to end after scancel')
    if state != 'CANCELLED':
        raise RuntimeError(f'job {job} ended {state} before it could be cancelled: give it more --steps')
    figures['job1'] = {
        'id': job,
        'state': state,
        'wall_s': round(time.time() - started, 1),
        'checkpoint_steps_at_cancel': at_cancel,
    }
    print(
        f'cancelled job {job} ({state}) with a checkpoint at {at_cancel} steps, '
        f'{figures["job1"]["wall_s"]} s after submission',
        flush=True,
    )

    # 2. the same job again: resumes from model.checkpoint
    script = os.path.join(workdir, 'job2.sbatch')
    with open(script, 'w') as f:
        f.write(batch_script(command, logs[1], tasks, model_file))
    resume_point = checkpoint_steps(model_file)
    started = time.time()
    job = submit(script)
    print(f'resubmitted as job {job}', flush=True)
    state = wait_for(lambda: finished(job), timeout, f'job {job} to finish')
    with open(logs[1]) as f:
        log2 = f.read()
    figures['job2'] = {
        'id': job,
        'state': state,
        'wall_s': round(time.time() - started, 1),
        'resumed_from_steps': resume_point,
        'loaded_checkpoint': f'Loading existing model params from {model_file}.checkpoint' in log2,
        **final_stats(model_file),
        'world_size_in_log': f'distributed_world_size: {tasks}' in log2,
    }
    for n, log in enumerate(logs, 1):
        with open(log) as f:
            figures[f'log{n}'] = f.read()
    with open(os.path.join(workdir, 'figures.json'), 'w') as f:
        json.dump(figures, f, indent=1)
    summary = {k: v for k, v in figures.items() if not k.startswith('log')}
    print(json.dumps(summary, indent=1), flush=True)
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--workdir', required=True)
    parser.add_argument('--tasks', type=int, default=2)
    parser.add_argument('--steps', type=int, default=40)
    parser.add_argument('--valid-steps', type=int, default=10)
    parser.add_argument('--timeout', type=int, default=1800, help='seconds per job')
    parser.add_argument('--slurm-conf', default=None, help='default: $SLURM_CONF')
    args = parser.parse_args()
    if args.slurm_conf:
        os.environ['SLURM_CONF'] = args.slurm_conf
    figures = run(args.workdir, args.tasks, args.steps, args.valid_steps, args.timeout)
    ok = figures['job2']['state'] == 'COMPLETED' and figures['job2']['final_train_steps'] == args.steps
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
