"""``bench/reference_speed.py`` end to end on a few steps of a small ED slice.

Runs only when the reference checkouts are given: ``PARLAI_EMPATHY_MIME_REPO`` (declare-lab/MIME @
7c34f3a) and ``PARLAI_EMPATHY_ETHREED_REPO`` (outsider-lj/ethreed @ 397bb20), with
``PARLAI_EMPATHY_REF_PYTHON`` the python of their venv (``bench/reference_speed.py
--setup-ref-venv DIR``). Otherwise it is skipped, and says why.
"""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEEDED = ('PARLAI_EMPATHY_MIME_REPO', 'PARLAI_EMPATHY_ETHREED_REPO', 'PARLAI_EMPATHY_REF_PYTHON')
MISSING = [name for name in NEEDED if not os.environ.get(name)]
REASON = f'reference checkouts not given: set {", ".join(MISSING)} (see bench/reference_speed.py)' if MISSING else ''
if MISSING:
    print(f'test_reference_speed: skipped: {REASON}')


def git_status(folder):
    done = subprocess.run(
        ['git', '-C', folder, 'status', '--porcelain', '--untracked-files=all'], capture_output=True, text=True
    )
    return done.stdout if done.returncode == 0 else None


@pytest.mark.skipif(bool(MISSING), reason=REASON or 'given')
def test_reference_speed_smoke(tmp_path, ed_dir):
    mime, ethreed = os.environ['PARLAI_EMPATHY_MIME_REPO'], os.environ['PARLAI_EMPATHY_ETHREED_REPO']
    before = {repo: git_status(repo) for repo in (mime, ethreed)}
    out = tmp_path / 'report.json'
    done = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, 'bench', 'reference_speed.py'),
            '--mime-repo',
            mime,
            '--ethreed-repo',
            ethreed,
            '--ref-python',
            os.environ['PARLAI_EMPATHY_REF_PYTHON'],
            '--ed-dir',
            ed_dir,
            '--ed-limit',
            '60',
            '--workdir',
            str(tmp_path / 'work'),
            '--mime-warmup',
            '1',
            '--mime-steps',
            '1',
            '--ethreed-warmup',
            '0',
            '--ethreed-steps',
            '1',
            '--ethreed-our-batches',
            '8',
            '--our-warmup',
            '1',
            '--our-steps',
            '1',
            '--decode-contexts',
            '3',
            '--out',
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert 'ours / reference' in done.stdout
    report = json.loads(out.read_text())
    assert report['mime']['reference']['examples_per_step'] == 16
    assert report['mime']['ours']['examples_per_step'] == 16
    assert report['ethreed']['reference']['examples_per_step'] > 8  # 8 dialogues' responses
    assert report['ethreed']['ours']['bs8']['examples_per_step'] == 8
    for ratios in (report['mime']['ratio'], report['ethreed']['ours']['bs8']['ratio']):
        assert all(value > 0 for value in ratios.values()), ratios
    assert report['mime']['ours']['decode_contexts'] == report['mime']['reference']['decode_contexts'] == 3
    ethreed_ours = report['ethreed']['ours']['bs8']
    assert ethreed_ours['decode_contexts'] == report['ethreed']['reference']['decode_contexts']
    # the checkouts are read, never written to
    assert {repo: git_status(repo) for repo in (mime, ethreed)} == before


CURVE_NEEDED = ('PARLAI_EMPATHY_MIME_REPO', 'PARLAI_EMPATHY_REF_PYTHON')
CURVE_MISSING = [name for name in CURVE_NEEDED if not os.environ.get(name)]


@pytest.mark.skipif(bool(CURVE_MISSING), reason=f'reference checkout not given: set {", ".join(CURVE_MISSING)}')
def test_reference_curve_smoke_and_resume(tmp_path):
    """``projects/majumder2020_mime/diagnostics/reference_curve.py`` end to end in the reference's own
    venv (which has no parlai_empathy, so an import that only the parent process can satisfy, in
    the child's argument parsing, would stop every run at its start), on the embedded ED sample: two
    updates, a validation on two batches, the early-stopping path (counted from 0) with its test
    pass, then a rerun that resumes from the checkpoint instead of starting again."""
    mime = os.environ['PARLAI_EMPATHY_MIME_REPO']
    before = git_status(mime)
    words = tmp_path / 'model.dict'
    words.write_text('__null__\t1000000003\nhappy\t120\nsad\t80\nzzqxnotaword\t3\n', encoding='utf-8')
    out = tmp_path / 'curve.json'

    def run(steps):
        return subprocess.run(
            [
                sys.executable,
                os.path.join(REPO, 'projects', 'majumder2020_mime', 'diagnostics', 'reference_curve.py'),
                '--mime-repo',
                mime,
                '--ref-python',
                os.environ['PARLAI_EMPATHY_REF_PYTHON'],
                '--dict',
                str(words),
                '--ed-dir',
                os.path.join(REPO, 'parlai_empathy', 'data', 'sample'),
                '--steps',
                str(steps),
                '--log-every',
                '1',
                '--save-every',
                '1',
                '--smoke-valid-batches',
                '2',
                '--count-after',
                '0',
                '--initial-best-ppl',
                '1e30',
                '--workdir',
                str(tmp_path / 'work'),
                '--out',
                str(out),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=1800,
        )

    done = run(2)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    curve = json.loads(out.read_text())
    assert curve['finished'] and curve['updates_done'] == 2
    assert curve['word_table']['fill_std'] == 0.01 and curve['word_table']['words'] == 3
    assert [p['updates'] for p in curve['train']] == [1, 2]
    assert curve['valid'][-1]['updates'] == 2 and curve['test']['weights_of_updates'] == 2
    assert os.path.isfile(f'{out}.checkpoint.pt')
    done = run(3)  # the same command with one more update: resumes at 2
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    curve = json.loads(out.read_text())
    assert [p['updates'] for p in curve['train']] == [1, 2, 3] and curve['updates_done'] == 3
    assert git_status(mime) == before  # the checkout is read, never written to
