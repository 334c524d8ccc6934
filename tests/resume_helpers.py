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
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
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
    return resume_to(train_args, model_file, target, cwd, env), done_updates, target


def resume_to(train_args, model_file, target, cwd, env):
    """Run the same command again up to ``target`` updates; asserts it resumed from the
    checkpoint and reached the target. Returns its log."""
    resumed = subprocess.run(
        [PARLAI] + [str(a) for a in train_args('--max-train-steps', target)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, log[-5000:]
    assert f'Loading existing model params from {model_file}.checkpoint' in log
    with open(f'{model_file}.trainstats') as f:
        assert json.load(f)['train_steps'] == target
    return log


# ``parlai train_model`` with json.dump replaced: the second time the run saves the file named by
# argv[1] (or a temporary file for it; a complete one is then in place), it writes a few bytes of
# it and is killed with SIGKILL (a run that never saves it twice stops at the timeout)
_DIE_WHILE_SAVING = """
import json, os, signal, sys
victim = os.path.basename(sys.argv.pop(1))
stem, ext = victim.rsplit('.', 1)
real_dump = json.dump
saves = []
def dump(obj, fp, *args, **kwargs):
    name = os.path.basename(getattr(fp, 'name', ''))
    # the victim, or a temporary name for it: victim.tmp-... or stem.tmp-....ext
    if name.startswith(victim) or (name.startswith(stem + '.tmp-') and name.endswith('.' + ext)):
        saves.append(fp.name)
        if len(saves) == 2:
            fp.write('{"par'); fp.flush(); os.kill(os.getpid(), signal.SIGKILL)
    return real_dump(obj, fp, *args, **kwargs)
json.dump = dump
from parlai.__main__ import main
sys.argv = ['parlai'] + sys.argv[1:]
main()
"""


def train_die_while_saving(train_args, model_file, victim, cwd, env, extra_updates=2):
    """Train until the run is killed in the middle of writing ``victim`` over a complete one,
    then resume the same command. Returns the resumed log; asserts the kill happened."""
    first = subprocess.run(
        [sys.executable, '-c', _DIE_WHILE_SAVING, victim]
        + [str(a) for a in train_args('--save-every-n-secs', 1e-6, '--max-train-steps', 100000)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == -signal.SIGKILL, (first.stdout + first.stderr)[-3000:]
    with open(f'{model_file}.checkpoint.trainstats') as f:
        target = json.load(f)['train_steps'] + extra_updates
    return resume_to(train_args, model_file, target, cwd, env)
