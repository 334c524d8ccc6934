"""Emotion accuracy label by label: our rows' test outputs beside the MIME reference's released ones.

The emotion-accuracy gap between our MIME rows and the reference's released model (0.349 on the
same ED test examples; the rows' figures are in the project README) could be a bug that hits
some labels (a label mapped to the wrong id, a group split that sends a label to the wrong
polarity) or a classifier that is weaker everywhere. This
reads each example's gold and predicted emotion from our evaluation outputs
(``runs/<row>/outputs.jsonl.gz``) and from the reference's ``output.txt`` (parsed by
``reference_outputs.py`` beside this script), and writes per label: examples, accuracy, how often the label is
predicted, and a summary (on how many labels the reference is ahead; how concentrated the
predictions are: the share of the four most predicted labels and the entropy of the predicted
labels, in bits; log2(32) = 5 is uniform).

    python projects/majumder2020_mime/diagnostics/emotion_per_label.py --mime-repo REF_MIME \\
        --outputs mime=projects/majumder2020_mime/runs/mime/outputs.jsonl.gz \\
                  multitask_transformer=projects/majumder2020_mime/runs/multitask_transformer/outputs.jsonl.gz \\
        --out projects/majumder2020_mime/runs/diagnostics/reference_outputs/per_label.json
"""

import argparse
import collections
import gzip
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from reference_outputs import parse

from parlai_empathy.evidence import artifacts as evidence


def read_ours(path):
    """(gold, predicted) per example of one of our evaluation outputs."""
    pairs = []
    with gzip.open(path, 'rt', encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            row = json.loads(line)
            try:
                pairs.append((row['emotion'], row['predicted_emotion']))
            except KeyError as missing:
                raise SystemExit(f'{path}, line {number}: no field {missing}') from None
    return pairs


def per_label(pairs):
    gold = collections.Counter(g for g, _ in pairs)
    right = collections.Counter(g for g, p in pairs if g == p)
    predicted = collections.Counter(p for _, p in pairs)
    total = len(pairs)
    labels = {
        label: {'examples': gold[label], 'accuracy': right[label] / gold[label], 'predicted': predicted[label]}
        for label in sorted(gold)
    }
    top4 = sum(n for _, n in predicted.most_common(4)) / total
    entropy = -sum(n / total * math.log2(n / total) for n in predicted.values())
    return {
        'examples': total,
        'accuracy': sum(right.values()) / total,
        'top4_predicted_share': top4,
        'predicted_entropy_bits': entropy,
        'labels': labels,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--mime-repo', required=True, help='a checkout of declare-lab/MIME (its output.txt)')
    parser.add_argument('--outputs', nargs='+', required=True, metavar='NAME=OUTPUTS.jsonl.gz')
    parser.add_argument('--out', required=True)
    args = parser.parse_args()
    models = {
        'reference': per_label(
            [(e['emotion'], e['predicted_emotion']) for e in parse(os.path.join(args.mime_repo, 'output.txt'))]
        )
    }
    for spec in args.outputs:
        name, _, path = spec.partition('=')
        if not path:
            raise SystemExit(f'--outputs takes NAME=PATH, not {spec!r}')
        models[name] = per_label(read_ours(path))
    ref = models['reference']['labels']
    for name, model in models.items():
        if name != 'reference':
            model['labels_where_the_reference_is_ahead'] = sum(
                ref[label]['accuracy'] > stats['accuracy'] for label, stats in model['labels'].items() if label in ref
            )
    report = {
        'what': "emotion accuracy per gold label on ED test: our rows' outputs and the MIME reference's "
        'released output.txt (projects/majumder2020_mime/diagnostics/emotion_per_label.py)',
        'command': ['python', 'projects/majumder2020_mime/diagnostics/emotion_per_label.py']
        + ['REF_MIME' if a == args.mime_repo else a for a in sys.argv[1:]],
        'reference_commit': evidence.code_version(args.mime_repo).get('commit'),
        'code': evidence.code_version(),
        'machine': evidence.machine(),
        'models': models,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump(report, f, indent=1)
    for name, model in models.items():
        print(name, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in model.items() if k != 'labels'})


if __name__ == '__main__':
    main()
