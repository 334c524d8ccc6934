"""``make demo`` shows the main job: what it prints and leaves, run exactly as the Makefile says
(``make demo-run``: the demo without the install step, against this venv)."""

import csv
import json
import os
import re
import subprocess

from parlai_empathy.data.ed_source import sample_dir
from parlai_empathy.data.emotions import ED_EMOTIONS
from tiny_models import PARLAI

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def install_lines():
    """The lines `make demo`'s install step prints on a fresh clone: one per step it echoes."""
    dry = subprocess.run(
        ['make', '--no-print-directory', '-B', '-n', 'install'], cwd=REPO, capture_output=True, text=True, check=True
    )
    return sum(1 for line in dry.stdout.splitlines() if line.startswith('echo "== install'))


def test_demo_trains_mime_ranks_two_models_and_chats(tmp_path):
    demo_dir = tmp_path / 'demo'
    done = subprocess.run(
        ['make', '--no-print-directory', 'demo-run', f'DEMO_DIR={demo_dir}', f'PARLAI={PARLAI}'],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3600,
        env=dict(os.environ, HF_HUB_OFFLINE='1'),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    # what a person reads: each step's result, the board, the chat; under 150 lines with the install
    shown = done.stdout.splitlines() + done.stderr.splitlines()
    assert 4 <= install_lines() <= 8
    assert len(shown) + install_lines() < 150, done.stdout
    log = demo_dir / 'demo.log'
    assert f'full output goes to {log}' in done.stdout and done.stdout.rstrip().endswith(str(log))
    # ParlAI's option dump and the classifier's per-class table are in the log, not on the terminal
    full = log.read_text(encoding='utf-8')
    assert 'train_model -t empathy_ed_clean --ed-datapath sample -m empathy/mime' in full
    for hidden in ('Opt:', 'afraid_f1', 'loaded 60 episodes'):
        assert hidden in full and hidden not in done.stdout, hidden
    # one line per training step: its updates, the validation figure and the model
    for model in ('mime', 'emotion', 'ranker'):
        assert re.search(
            rf'^[\d,]+ updates in \d+ s; valid \S+ [\d.e+-]+; model {demo_dir}/{model}/model$', done.stdout, flags=re.M
        ), model
    with open(demo_dir / 'leaderboard' / 'results.json') as f:
        rows = {r['name']: r for r in json.load(f)['results']}
    assert set(rows) == {'mime', 'ranker'}
    assert rows['mime']['kind'] == 'generator' and 'ppl' in rows['mime']['values']
    assert rows['ranker']['kind'] == 'ranker' and 'p@1,100' in rows['ranker']['values']
    table = (demo_dir / 'leaderboard' / 'leaderboard.md').read_text()
    assert '| mime |' in table and '| ranker |' in table
    # the board is shown as written, just before the chat
    board_at = done.stdout.index(table)
    assert board_at < done.stdout.index('demo 6/6') and board_at > done.stdout.index('demo 5/6')
    assert 'a toy generator' in done.stdout  # the tiny MIME is labelled as such

    # the demo ends with the ranker: each of the three messages gets a human reply retrieved from
    # the sample's listener turns and the emotion the classifier read in it
    chat = done.stdout[done.stdout.index('demo 6/6') :]
    replies = re.findall(r'^\[BertRanker\]: (.+)$', chat, flags=re.M)
    emotions = re.findall(r'\[predicted_emotion\]: (\S+)$', chat, flags=re.M)  # may follow the prompt
    assert len(replies) == 3 and len(emotions) == 3, chat[-3000:]
    assert set(emotions) <= set(ED_EMOTIONS)
    pools = list((demo_dir / 'ranker').glob('ed_train_listener_*.cands'))
    assert len(pools) == 1
    pool = set(pools[0].read_text(encoding='utf-8').splitlines())
    assert 300 < len(pool) <= len(listener_replies(os.path.join(sample_dir(), 'train.csv')))
    assert set(replies) <= pool, replies


def listener_replies(path):
    """The sample's listener turns as the pool holds them (ED's _comma_ decoded, stripped)."""
    with open(path, newline='', encoding='utf-8') as f:
        rows = list(csv.DictReader(f))
    return [r['utterance'].replace('_comma_', ',').strip() for r in rows if int(r['utterance_idx']) % 2 == 0]
