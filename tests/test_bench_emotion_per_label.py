"""``projects/majumder2020_mime/diagnostics/emotion_per_label.py`` on a hand-made reference
``output.txt`` and one of our outputs."""

import gzip
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = (
    "emotion:{gold}\tvader-score: 0.1\tpredicted_emotion: {pred}\nContext:['hi there .']\n"
    'Topk:ok .\nBeam: ok .\nGreedy:ok .\nRef:hello .\n' + '-' * 70 + '\n'
)


def test_per_label_accuracy_prediction_counts_and_a_bad_line_named(tmp_path):
    ref = tmp_path / 'ref'
    ref.mkdir()
    pairs = [('sad', 'sad'), ('sad', 'sad'), ('joyful', 'sad'), ('joyful', 'joyful')]
    (ref / 'output.txt').write_text(
        'header\nEVAL\ntest 1 2 3 4 5 6\n' + ''.join(BLOCK.format(gold=g, pred=p) for g, p in pairs)
    )
    ours = tmp_path / 'outputs.jsonl.gz'
    with gzip.open(ours, 'wt') as f:
        for gold, pred in [('sad', 'joyful'), ('sad', 'sad'), ('joyful', 'joyful'), ('joyful', 'joyful')]:
            f.write(json.dumps({'emotion': gold, 'predicted_emotion': pred}) + '\n')
    out = tmp_path / 'per_label.json'
    script = os.path.join(REPO, 'projects', 'majumder2020_mime', 'diagnostics', 'emotion_per_label.py')
    subprocess.run(
        [sys.executable, script, '--mime-repo', ref, '--outputs', f'ours={ours}', '--out', out],
        check=True,
        capture_output=True,
        text=True,
    )
    models = json.loads(out.read_text())['models']
    assert models['reference']['labels']['joyful'] == {'examples': 2, 'accuracy': 0.5, 'predicted': 1}
    assert models['reference']['labels']['sad']['predicted'] == 3
    assert models['ours']['accuracy'] == 0.75 and models['reference']['accuracy'] == 0.75
    assert models['ours']['labels_where_the_reference_is_ahead'] == 1  # sad: 1.0 against 0.5
    assert abs(models['ours']['predicted_entropy_bits'] - 0.8113) < 1e-3

    with gzip.open(ours, 'wt') as f:
        f.write(json.dumps({'emotion': 'sad'}) + '\n')
    done = subprocess.run(
        [sys.executable, script, '--mime-repo', ref, '--outputs', f'ours={ours}', '--out', out],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and 'line 1' in done.stderr and 'predicted_emotion' in done.stderr
