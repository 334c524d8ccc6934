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
REASON = (f'reference checkouts not given: set {", ".join(MISSING)} (see bench/reference_speed.py)'
          if MISSING else '')
if MISSING:
    print(f'test_reference_speed: skipped: {REASON}')


def git_status(folder):
    done = subprocess.run(['git', '-C', folder, 'status', '--porcelain', '--untracked-files=all'],
                          capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


@pytest.mark.skipif(bool(MISSING), reason=REASON or 'given')
def test_reference_speed_smoke(tmp_path, ed_dir):
    mime, ethreed = os.environ['PARLAI_EMPATHY_MIME_REPO'], os.environ['PARLAI_EMPATHY_ETHREED_REPO']
    before = {repo: git_status(repo) for repo in (mime, ethreed)}
    out = tmp_path / 'report.json'
    done = subprocess.run(
        [sys.executable, os.path.join(REPO, 'bench', 'reference_speed.py'), '--mime-repo', mime,
         '--ethreed-repo', ethreed, '--ref-python', os.environ['PARLAI_EMPATHY_REF_PYTHON'],
         '--ed-dir', ed_dir, '--ed-limit', '60', '--workdir', str(tmp_path / 'work'),
         '--mime-warmup', '1', '--mime-steps', '1', '--ethreed-warmup', '0', '--ethreed-steps', '1',
         '--ethreed-our-batches', '8', '--our-warmup', '1', '--our-steps', '1',
         '--decode-contexts', '3', '--out', str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=1800)
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
