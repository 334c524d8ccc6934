"""ParlAI's SLURM path for real: a one-node SLURM cluster on this machine
(``tools/slurm/start.sh``: munged, slurmctld and slurmd on 127.0.0.1) and ``srun parlai
distributed_train -m empathy/mime`` across 2 tasks with gloo on CPU, cancelled once it has a
checkpoint and resubmitted (``tools/slurm/mime_resume.py``): it must resume from the checkpoint
and finish. The daemons need root; as root the test installs Debian's slurm-wlm and munge when
they are missing. Where the cluster cannot start, the test is skipped and says why.
"""

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLURM = os.path.join(REPO, 'tools', 'slurm')


def say(capsys, text):
    with capsys.disabled():
        print(f'\n[test_slurm] {text}', flush=True)


def skip(capsys, reason):
    say(capsys, f'SKIPPED: {reason}')
    pytest.skip(reason)


def free_port_pair() -> int:
    """A port p with p+1 also free (slurmctld, slurmd)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(('127.0.0.1', 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(('127.0.0.1', port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError('no two consecutive free ports')


@pytest.fixture
def slurm_cluster(tmp_path, capsys):
    if os.geteuid() != 0:
        skip(capsys, 'SLURM daemons need root (slurmd starts jobs as their user); run as root, e.g. in CI')
    if not all(shutil.which(tool) for tool in ('munged', 'slurmctld', 'slurmd', 'srun', 'sbatch')):
        say(capsys, "installing Debian's slurm-wlm and munge with apt-get (running as root)")
        env = dict(os.environ, DEBIAN_FRONTEND='noninteractive')
        done = subprocess.run(
            'apt-get update -qq && apt-get install -y -qq --no-install-recommends slurm-wlm munge',
            shell=True,
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
        )
        if done.returncode != 0:
            skip(capsys, f'slurm-wlm/munge could not be installed: {(done.stdout + done.stderr)[-500:]}')
    state = tmp_path / 'slurm'
    env = dict(os.environ, SLURM_LOCAL_DIR=str(state), SLURM_LOCAL_PORT=str(free_port_pair()), SLURM_LOCAL_CPUS='2')
    say(capsys, f'starting a one-node SLURM cluster in {state} (munged, slurmctld, slurmd on 127.0.0.1)')
    started = subprocess.run(
        ['bash', os.path.join(SLURM, 'start.sh')], capture_output=True, text=True, env=env, timeout=180
    )
    try:
        if started.returncode != 0:
            skip(capsys, f'the SLURM daemons did not start: {(started.stdout + started.stderr)[-800:]}')
        say(capsys, started.stdout.strip())
        yield dict(env, SLURM_CONF=str(state / 'slurm.conf'))
    finally:
        subprocess.run(['bash', os.path.join(SLURM, 'stop.sh')], env=env, timeout=120)
        say(capsys, 'SLURM daemons stopped')


def test_two_task_mime_training_is_cancelled_and_resumes(slurm_cluster, tmp_path, ed_dir, capsys):
    env = dict(slurm_cluster, PARLAI_EMPATHY_ED_DIR=ed_dir, HF_HUB_OFFLINE='1')
    done = subprocess.run(
        [
            sys.executable,
            os.path.join(SLURM, 'mime_resume.py'),
            '--workdir',
            str(tmp_path / 'run'),
            '--tasks',
            '2',
            '--steps',
            '40',
            '--valid-steps',
            '10',
            '--timeout',
            '1200',
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=3000,
    )
    with open(tmp_path / 'run' / 'figures.json') as f:
        figures = json.load(f)
    say(capsys, json.dumps({k: v for k, v in figures.items() if not k.startswith('log')}))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:] + figures.get('log2', '')[-3000:]
    first, second = figures['job1'], figures['job2']
    assert first['state'] == 'CANCELLED' and 10 <= first['checkpoint_steps_at_cancel'] < 40
    assert second['state'] == 'COMPLETED' and second['loaded_checkpoint'] and second['world_size_in_log']
    assert second['resumed_from_steps'] >= first['checkpoint_steps_at_cancel']
    assert second['final_train_steps'] == 40
    # validated before the cancel and again after the resume, with no restart from 0 in between
    updates = second['validated_at_updates']
    assert updates == sorted(updates) and updates[0] <= second['resumed_from_steps'] < updates[-1]
    assert 'Traceback' not in figures['log2']
