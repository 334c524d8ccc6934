"""The released rows' ``reply_emotion_acc`` beside the same figure for the human replies and ours.

``reply_emotion_acc`` is the share of replies in which our ED 32-way utterance classifier detects
the example's gold emotion. On its own it has no scale. This script gives it one with two
references:

* the human Listener replies of ED test (the gold of every row; their text and emotion read from
  ``projects/li_ethreed/runs/ed32_utterance/outputs.jsonl.gz``, the even turns);
* our generator rows' replies (their committed ``outputs.jsonl.gz``), run through the same
  classifier as the published rows.

    python projects/published/diagnostics/reply_emotion_reference.py \\
        --classifier RUNS/li_ethreed/ed32_utterance/model \\
        --out projects/published/runs/diagnostics/reply_emotion/reference.json
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

from parlai_empathy.evidence import artifacts as evidence  # noqa: E402
from parlai_empathy.leaderboard.published import detect_emotions  # noqa: E402

ROWS = ('majumder2020_mime/runs/mime', 'majumder2020_mime/runs/multitask_transformer', 'li_ethreed/runs/ethreed')


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--classifier', required=True, help="the ed32_utterance row's model file")
    parser.add_argument('--out', required=True)
    args = parser.parse_args()
    projects = os.path.join(ROOT, 'projects')
    tagged = evidence.read_outputs(os.path.join(projects, 'li_ethreed/runs/ed32_utterance/outputs.jsonl.gz'))
    listener = [r for r in tagged if int(r['id'].rsplit('/', 1)[1]) % 2 == 0]
    detected = detect_emotions(args.classifier, [r['text'] for r in listener])
    figures = {
        'human Listener replies of ED test (the gold)': {
            'replies': len(listener),
            'reply_emotion_acc': sum(d == r['gold'] for d, r in zip(detected, listener)) / len(listener),
        }
    }
    for row in ROWS:
        rows = [r for r in evidence.read_outputs(os.path.join(projects, row, evidence.OUTPUTS)) if r.get('reply')]
        detected = detect_emotions(args.classifier, [r['reply'] for r in rows])
        figures[row] = {
            'replies': len(rows),
            'reply_emotion_acc': sum(d == r['emotion'] for d, r in zip(detected, rows)) / len(rows),
        }
    report = {
        'what': __doc__.split('\n\n')[0],
        'command': ['python', os.path.relpath(__file__, ROOT)] + sys.argv[1:],
        'code': evidence.code_version(),
        'machine': evidence.machine(),
        'figures': figures,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    evidence.write_json(args.out, evidence.portable(report, evidence.path_placeholders()))
    print(open(args.out).read())


if __name__ == '__main__':
    main()
