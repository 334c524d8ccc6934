"""Does the ED split explain a row's gap between valid and test emotion accuracy?

The ETHREED row's speaker-emotion accuracy is 0.416 on valid and 0.374 on test (the MIME row's
0.225 / 0.204). Two cheap explanations are checked on the reconstructed ED files and a row's
committed test outputs:

* a leak or an overlap: valid or test conversations whose situation, or utterances, also occur in
  train (exact match after lowercasing and trimming);
* the label mix: a row's per-label test accuracy, reweighted to the label mix of valid's (and
  train's) Listener turns. If test were only harder by its mix of labels, the reweighted accuracy
  would approach the valid one.

    python projects/li_ethreed/diagnostics/ed_split_check.py \\
        --outputs projects/li_ethreed/runs/ethreed/outputs.jsonl.gz \\
        --outputs projects/majumder2020_mime/runs/mime/outputs.jsonl.gz --out splits.json
"""

import argparse
import collections
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

from parlai_empathy.data.ed_raw import read_clean
from parlai_empathy.data.ed_source import file_checksum, resolve_ed_dir
from parlai_empathy.evidence import artifacts as evidence

SPLITS = ('train', 'valid', 'test')


def _norm(text):
    return text.strip().lower()


def overlap(conversations):
    train = conversations['train']
    situations = {_norm(c.situation) for c in train}
    utterances = {_norm(u.text) for c in train for u in c.utterances}
    out = {}
    for split in ('valid', 'test'):
        convs = conversations[split]
        out[split] = {
            'conversations': len(convs),
            'situation_in_train': sum(_norm(c.situation) in situations for c in convs),
            'utterances': sum(len(c.utterances) for c in convs),
            'utterances_in_train': sum(_norm(u.text) in utterances for c in convs for u in c.utterances),
        }
    return out


def listener_label_mix(conversations):
    """Listener turns (the 2nd, 4th, ... utterance) per conversation label: what a row scores."""
    mix = collections.Counter()
    for conv in conversations:
        mix[conv.emotion] += len(conv.utterances) // 2
    return mix


def reweighted(outputs_path, mixes):
    per_label = collections.defaultdict(list)
    with gzip.open(outputs_path, 'rt') as f:
        for line in f:
            row = json.loads(line)
            per_label[row['emotion']].append(row['emo_acc'])
    accuracy = {label: sum(v) / len(v) for label, v in per_label.items()}
    n = sum(len(v) for v in per_label.values())
    result = {
        'outputs': outputs_path,
        'examples': n,
        'test_accuracy': round(sum(sum(v) for v in per_label.values()) / n, 4),
    }
    for split, mix in mixes.items():
        total = sum(mix[label] for label in accuracy)
        result[f'reweighted_to_{split}_mix'] = round(sum(accuracy[k] * mix[k] for k in accuracy) / total, 4)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--ed-dir', default=os.environ.get('PARLAI_EMPATHY_ED_DIR'))
    parser.add_argument('--outputs', action='append', default=[], help="a row's outputs.jsonl.gz (repeatable)")
    parser.add_argument('--out', required=True)
    args = parser.parse_args()
    ed_dir = resolve_ed_dir(args.ed_dir)
    conversations = {split: read_clean(os.path.join(ed_dir, f'{split}.csv'))[0] for split in SPLITS}
    mixes = {split: listener_label_mix(conversations[split]) for split in SPLITS}
    report = {
        'what': "ED valid/test against train: overlap, and rows' per-label test accuracy reweighted to "
        "other splits' Listener label mix (projects/li_ethreed/diagnostics/ed_split_check.py)",
        'command': ['python', 'projects/li_ethreed/diagnostics/ed_split_check.py'] + sys.argv[1:],
        'code': evidence.code_version(),
        'machine': evidence.machine(),
        'ed_sha256_12': {split: file_checksum(os.path.join(ed_dir, f'{split}.csv'))[:12] for split in SPLITS},
        'conversations': {split: len(conversations[split]) for split in SPLITS},
        'listener_turns': {split: sum(mixes[split].values()) for split in SPLITS},
        'overlap_with_train': overlap(conversations),
        'rows': [reweighted(path, {s: mixes[s] for s in ('valid', 'train')}) for path in args.outputs],
    }
    with open(args.out, 'w') as f:
        json.dump(report, f, indent=1)
    print(json.dumps({k: report[k] for k in ('conversations', 'overlap_with_train', 'rows')}, indent=1))


if __name__ == '__main__':
    main()
