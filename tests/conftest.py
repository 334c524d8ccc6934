"""Shared test fixtures: where the real data lives, and how to run the real ``parlai`` command.

Tests read the shared data sets (never copies in the repo): ``PARLAI_EMPATHY_ED_DIR`` /
``PARLAI_EMPATHY_GOEMOTIONS_DIR`` when set, else ``<repo>/../shared/data/...`` as CI lays it out.
"""
import contextlib
import fcntl
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(os.path.dirname(REPO), 'shared', 'data')
VENV_BIN = os.path.dirname(sys.executable)
INSTALL_LOCK = '/tmp/parlai-empathy-install.lock'  # the Makefile's reinstall lock


@contextlib.contextmanager
def install_lock(shared=False):
    """Hold the lock ``make reinstall`` takes: exclusively to build from the repo (which rewrites
    its ``parlai_empathy.egg-info`` in place), shared to read package metadata while no build runs
    (the repo root is on ``sys.path``, so a read could otherwise see the egg-info half written)."""
    with open(INSTALL_LOCK, 'a') as lock:
        fcntl.flock(lock, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _data_dir(env, name):
    folder = os.environ.get(env) or os.path.join(SHARED_DATA, name)
    if not os.path.isdir(folder):
        pytest.fail(f'test data not found: set {env} or put the shared data at {folder}')
    return folder


@pytest.fixture(scope='session')
def ed_dir():
    return _data_dir('PARLAI_EMPATHY_ED_DIR', 'empatheticdialogues')


@pytest.fixture(scope='session')
def goemotions_dir():
    return _data_dir('PARLAI_EMPATHY_GOEMOTIONS_DIR', 'goemotions')


@pytest.fixture(scope='session')
def raw_excerpts_dir(ed_dir):
    return os.path.join(ed_dir, 'raw_excerpts')


@pytest.fixture
def run_parlai(tmp_path, ed_dir):
    """Run the stock ``parlai`` CLI (or any command) of this venv; returns CompletedProcess."""

    def run(*args, check=True, env=None, timeout=600, input=None):
        command = [os.path.join(VENV_BIN, 'parlai')] + [str(a) for a in args] if args[0] != 'python' else [
            sys.executable
        ] + [str(a) for a in args[1:]]
        full_env = dict(os.environ, PARLAI_EMPATHY_ED_DIR=ed_dir, **(env or {}))
        full_env.setdefault('HF_HUB_OFFLINE', '1')
        done = subprocess.run(
            command, cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=timeout, input=input
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f'{command} exited {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-6000:]}'
            )
        return done

    return run


def ed_teacher_examples(teacher_class, split, datapath, *args):
    """All examples of a teacher for a split, in order, as ParlAI's loop sees them."""
    from parlai.core.params import ParlaiParser

    parser = ParlaiParser(True, False)
    teacher_class.add_cmdline_args(parser)
    datatype = split + ':ordered' if split == 'train' else split
    opt = parser.parse_args(['-dt', datatype, '--datapath', str(datapath)] + [str(a) for a in args])
    teacher = teacher_class(opt)
    examples = []
    while not teacher.epoch_done():
        examples.append(teacher.act())
    return examples
