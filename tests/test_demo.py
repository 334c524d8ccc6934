"""``make demo`` shows the main job: what it prints and leaves, run exactly as the Makefile says
(``make demo-run``: the demo without the install step, against this venv)."""
import json
import os
import subprocess

from tiny_models import PARLAI

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_demo_trains_mime_ranks_two_models_and_chats(tmp_path):
    demo_dir = tmp_path / 'demo'
    done = subprocess.run(['make', '--no-print-directory', 'demo-run', f'DEMO_DIR={demo_dir}', f'PARLAI={PARLAI}'],
                          cwd=REPO, capture_output=True, text=True, timeout=3600,
                          env=dict(os.environ, HF_HUB_OFFLINE='1'))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    assert 'train_model -t empathy_ed_clean --ed-datapath sample -m empathy/mime' in done.stdout
    with open(demo_dir / 'leaderboard' / 'results.json') as f:
        rows = {r['name']: r for r in json.load(f)['results']}
    assert set(rows) == {'mime', 'ranker'}
    assert rows['mime']['kind'] == 'generator' and 'ppl' in rows['mime']['values']
    assert rows['ranker']['kind'] == 'ranker' and 'p@1,100' in rows['ranker']['values']
    table = (demo_dir / 'leaderboard' / 'leaderboard.md').read_text()
    assert '| mime |' in table and '| ranker |' in table
    assert '[Mime]:' in done.stdout and '[predicted_emotion]:' in done.stdout and '[emotion_polarity]:' in done.stdout
