"""How much each paper's metric definition moves the figures, measured on one released file.

ED papers compute BLEU and Distinct-n in different ways: against their own lower-cased, tokenised
references or the raw ED text; case-sensitive or not; corpus BLEU (sacrebleu, moses multi-bleu)
or sentence BLEU averaged (nltk, as ParlAI's ``bleu-4``); Distinct-n over the corpus or per reply,
on 13a, nltk or whitespace tokens. This script scores one released file's matched replies under
each of those definitions, every other choice held fixed, so ``docs/metric_definitions.md`` can
say what each difference is worth.

    python projects/published/diagnostics/metric_definitions.py --released mime_beam \\
        --out projects/published/runs/diagnostics/metric_definitions/mime_beam.json
    python projects/published/diagnostics/metric_definitions.py --row projects/majumder2020_mime/runs/mime \\
        --out projects/published/runs/diagnostics/metric_definitions/our_mime.json

A released file in lower-cased tokens shows what the references' case and preprocessing do; one of
our rows (its committed ``outputs.jsonl.gz``: detokenised replies, raw ED golds) what the
tokenisation does, since its replies are text as a user reads it.

(ED from ``$PARLAI_EMPATHY_ED_DIR``; the file from ``$PARLAI_EMPATHY_RELEASED_DIR`` or downloaded.)
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

from parlai_empathy.evidence import artifacts as evidence  # noqa: E402
from parlai_empathy.metrics import bleu, distinct  # noqa: E402
from parlai_empathy.metrics.alignment import align, ed_test_examples  # noqa: E402
from parlai_empathy.metrics.released import KNOWN, fetch_released, read_released  # noqa: E402


def nltk_sentence_bleu(replies, golds):
    """ParlAI's ``bleu-4``: nltk sentence BLEU-4 on ParlAI-normalised words, averaged over replies."""
    from parlai.core.metrics import BleuMetric

    scores = [BleuMetric.compute(r, [g], 4).value() for r, g in zip(replies, golds)]
    return 100 * sum(scores) / len(scores)


def bleu_figures(replies, golds):
    avg = bleu.corpus_stats(replies, golds, bleu.AVG_BLEU).avg_bleu(bleu.AVG_BLEU)
    avg_lc = bleu.corpus_stats(replies, golds, bleu.AVG_BLEU_LC).avg_bleu(bleu.AVG_BLEU_LC)
    multi = bleu.corpus_stats(replies, golds, bleu.MULTI_BLEU).bleu(bleu.MAX_ORDER, bleu.MULTI_BLEU)
    return {
        'avg_bleu (case-sensitive)': avg,
        'avg_bleu_lc (lowercased)': avg_lc,
        'multi_bleu (BLEU-4, lowercased, no smoothing)': multi,
        'nltk sentence BLEU-4 averaged (ParlAI bleu-4)': nltk_sentence_bleu(replies, golds),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument('--released', choices=sorted(KNOWN))
    source.add_argument('--row', help="one of our rows' evidence folder (its outputs.jsonl.gz)")
    parser.add_argument('--out', required=True)
    args = parser.parse_args()
    if args.released:
        known = KNOWN[args.released]
        pairs = align(read_released(fetch_released(known), known.format), ed_test_examples()).pairs
        replies, golds = [o.response for o, _ in pairs], [e.label for _, e in pairs]
        references = {"against the file's own reference (the paper's preprocessing)": [o.reference for o, _ in pairs]}
        what, source = f'{known.label}: its {len(pairs)} replies matched with ED test', known.to_json()
    else:
        rows = evidence.read_outputs(os.path.join(args.row, evidence.OUTPUTS))
        rows = [r for r in rows if r.get('reply') is not None]
        replies, golds, references = [r['reply'] for r in rows], [r['gold'] for r in rows], {}
        what, source = f'our row {os.path.relpath(args.row)}: its {len(rows)} replies', os.path.relpath(args.row)
    splits = {
        '13a, lowercased (the suite)': distinct.tokens,
        'nltk words, lowercased': distinct.nltk_tokens,
        'whitespace': str.split,
    }
    # KEMP's, EmpDG's and CAB's scripts take the reply as ``line.strip('Pred:')``: that strips the
    # characters P, r, e, d and ':' from both ends (here of the line without its trailing spaces)
    stripped = [f'Pred:{reply}'.strip('Pred:') for reply in replies]
    report = {
        'what': f'{what}, scored under each definition',
        'command': ['python', 'projects/published/diagnostics/metric_definitions.py'] + sys.argv[1:],
        'source': source,
        'code': evidence.code_version(),
        'machine': evidence.machine(),
        'bleu': {
            'against the ED gold reply (raw text, as our rows)': bleu_figures(replies, golds),
            **{name: bleu_figures(replies, refs) for name, refs in references.items()},
        },
        'distinct': {
            name: {
                f'dist-{n}': {
                    'corpus': distinct.corpus_distinct(replies, n, split),
                    'per reply, averaged': distinct.mean_utterance_distinct(replies, n, split),
                }
                for n in (1, 2)
            }
            for name, split in splits.items()
        },
        "the replies as str.strip('Pred:') leaves them": {
            'replies changed': sum(a != b for a, b in zip(replies, stripped)),
            'dist-1': distinct.corpus_distinct(stripped, 1),
            'dist-2': distinct.corpus_distinct(stripped, 2),
            'avg_bleu': bleu.corpus_stats(stripped, golds, bleu.AVG_BLEU).avg_bleu(bleu.AVG_BLEU),
        },
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    evidence.write_json(args.out, evidence.portable(report, evidence.path_placeholders()))
    print(open(args.out).read())


if __name__ == '__main__':
    main()
