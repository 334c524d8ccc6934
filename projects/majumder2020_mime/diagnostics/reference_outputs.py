"""The MIME reference's released test outputs, scored by our metric suite.

declare-lab/MIME ships ``output.txt``: its own model's replies to every ED test example, by greedy
search, beam search and top-k sampling (``model/common_layer.evaluate``: ``decoder_greedy``,
``Translator.beam_search`` with beam 5, ``decoder_topk`` with k = 3), each block with the gold
reply, the gold emotion and the predicted one. Scoring them with the suite our rows use tells what
the paper's own model gives on figures the paper does not report (Distinct-n on our tokens, AVG
BLEU) and how varied its replies are in the setting of ``projects/common/diagnostics/interactive_replies.py`` (the first
100 conversations' opening Speaker utterance, one reply each).

    python projects/majumder2020_mime/diagnostics/reference_outputs.py --mime-repo /work/ref-mime \\
        --out projects/majumder2020_mime/runs/diagnostics/reference_outputs/scores.json
"""

import argparse
import ast
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

from parlai_empathy.evidence import artifacts as evidence
from parlai_empathy.metrics.bleu import corpus_bleu
from parlai_empathy.metrics.distinct import corpus_distinct

SEPARATOR = '-' * 70
DECODINGS = ('Beam', 'Greedy', 'Topk')


def parse(path):
    """One dict per test example: emotion, predicted_emotion, context (list), the three replies, ref."""
    with open(path, encoding='utf-8') as f:
        text = f.read()
    examples = []
    for line_no_block, block in enumerate(text.split(SEPARATOR)):
        head = re.search(r'emotion:(\S+)\s+vader-score: \S+\s+predicted_emotion: (\S+)', block)
        if not head:
            continue
        fields = {}
        for name in ('Context',) + DECODINGS + ('Ref',):
            m = re.search(rf'^{name}:(.*)$', block, re.MULTILINE)
            if not m:
                raise ValueError(f'{path}: block {line_no_block} has no "{name}:" line')
            fields[name] = m.group(1).strip()
        context = fields.pop('Context')
        examples.append(
            dict(
                fields,
                emotion=head.group(1),
                predicted_emotion=head.group(2),
                turns=len(ast.literal_eval(context)),
                context=context,
            )
        )
    return examples


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--mime-repo', required=True, help='a checkout of declare-lab/MIME')
    parser.add_argument(
        '--first', type=int, default=100, help='distinct replies to the first N single-utterance contexts'
    )
    parser.add_argument('--out', required=True)
    args = parser.parse_args()
    path = os.path.join(args.mime_repo, 'output.txt')
    examples = parse(path)
    with open(path, encoding='utf-8') as f:
        printed = [next(f) for _ in range(3)][2].split()
    openings = [e for e in examples if e['turns'] == 1][: args.first]
    golds = [e['Ref'] for e in examples]
    scores = {}
    for name in DECODINGS:
        replies = [e[name] for e in examples]
        bleu = corpus_bleu(replies, golds)
        scores[name.lower()] = {
            'dist-1': corpus_distinct(replies, 1),
            'dist-2': corpus_distinct(replies, 2),
            'avg_bleu': bleu['avg_bleu'],
            'multi_bleu': bleu['multi_bleu'],
            'distinct_replies': len(set(replies)),
            f'distinct_replies_first_{len(openings)}_openings': len({e[name] for e in openings}),
        }
    report = {
        'what': "declare-lab/MIME's released output.txt (its own model's ED test replies) scored by "
        'parlai_empathy.metrics (projects/majumder2020_mime/diagnostics/reference_outputs.py)',
        'command': ['python', 'projects/majumder2020_mime/diagnostics/reference_outputs.py', '--mime-repo', 'REF_MIME']
        + sys.argv[3:],
        'reference_commit': evidence.code_version(args.mime_repo).get('commit'),
        'code': evidence.code_version(),
        'machine': evidence.machine(),
        'examples': len(examples),
        'printed_by_the_reference': dict(
            zip(('split', 'loss', 'ppl', 'accuracy', 'bleu_g', 'bleu_b', 'bleu_t'), printed)
        ),
        'emotion_accuracy': sum(e['emotion'] == e['predicted_emotion'] for e in examples) / len(examples),
        'decodings': scores,
        'notes': "replies are the reference's lowercased nltk tokens joined by spaces; Distinct-n uses "
        'our 13a tokens of that text; golds are its Ref lines, lowercased and tokenized like the '
        "replies: multi_bleu (lowercased) is comparable with our rows', avg_bleu (sacrebleu, "
        'case-sensitive, against the raw ED text in our rows) is not',
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump(report, f, indent=1)
    print(json.dumps({k: report[k] for k in ('examples', 'emotion_accuracy', 'decodings')}, indent=1))


if __name__ == '__main__':
    main()
