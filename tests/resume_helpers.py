"""Kill a real ``parlai train_model`` run with SIGKILL after a checkpoint, then resume it."""
import json
import os
import signal
import subprocess
import sys
import time

PARLAI = os.path.join(os.path.dirname(sys.executable), 'parlai')


def train_kill_resume(train_args, model_file, cwd, env, extra_updates=3, timeout=300):
    """``train_args(*extra)`` gives the train_model arguments. Returns (resumed log, updates
    done before the kill, target updates); asserts the kill really interrupted training."""
    first = subprocess.Popen(
        [PARLAI] + [str(a) for a in train_args('--save-every-n-secs', 1, '--max-train-steps', 100000)],
        cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    stats = f'{model_file}.checkpoint.trainstats'
    deadline = time.time() + timeout
    while time.time() < deadline and first.poll() is None and not os.path.isfile(stats):
        time.sleep(0.5)
    time.sleep(1.0)  # let a second checkpoint land, so that the kill may well hit mid-training
    alive = first.poll() is None
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert alive, first.stderr.read()[-3000:]
    with open(stats) as f:
        done_updates = json.load(f)['train_steps']
    assert done_updates > 0 and not os.path.isfile(model_file)

    target = done_updates + extra_updates
    resumed = subprocess.run(
        [PARLAI] + [str(a) for a in train_args('--max-train-steps', target)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )
    log = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, log[-5000:]
    assert f'Loading existing model params from {model_file}.checkpoint' in log
    with open(f'{model_file}.trainstats') as f:
        assert json.load(f)['train_steps'] == target
    return log, done_updates, target
