"""BLEU and Distinct-n of the metric suite against hand counts and sacrebleu's own CLI."""

import math
import os
import subprocess
import sys
from collections import Counter

import pytest

from metrics_ed_pairs import ed_shifted_pairs  # noqa: F401  (fixture)
from parlai_empathy.metrics import bleu, distinct

# Hand-computed case (13a tokens, one reference):
#   response: "i am so sorry to hear that ."   (8 tokens)
#   gold:     "i am sorry to hear that !"      (7 tokens)
# 1-grams matched: i am sorry to hear that = 6/8
# 2-grams matched: "i am", "sorry to", "to hear", "hear that" = 4/7
# 3-grams matched: "sorry to hear", "to hear that" = 2/6
# 4-grams matched: "sorry to hear that" = 1/5
# BP = 1 (8 > 7).
RESPONSE = 'i am so sorry to hear that.'
GOLD = 'i am sorry to hear that!'
PRECISIONS = [6 / 8, 4 / 7, 2 / 6, 1 / 5]


def hand_bleu(order):
    return 100 * math.exp(sum(math.log(p) for p in PRECISIONS[:order]) / order)


def test_bleu_statistics_and_scores_match_hand_counts():
    stats = bleu.BleuStats.of_pair(RESPONSE, GOLD)
    assert (stats.sys_len, stats.ref_len) == (8, 7)
    assert stats.correct == (6, 4, 2, 1)
    assert stats.total == (8, 7, 6, 5)
    for order in range(1, 5):
        assert stats.bleu(order) == pytest.approx(hand_bleu(order), abs=1e-9)
    assert stats.avg_bleu() == pytest.approx(sum(hand_bleu(n) for n in range(1, 5)) / 4, abs=1e-9)


def test_brevity_penalty_and_case_sensitivity():
    # response shorter than the gold: BP = exp(1 - 7/3); all 3 unigrams and 2 bigrams match
    stats = bleu.BleuStats.of_pair('sorry to hear', GOLD)
    assert stats.bleu(2) == pytest.approx(100 * math.exp(1 - 7 / 3), abs=1e-9)
    # AVG_BLEU is case-sensitive, the moses-compatible mode is not
    assert bleu.BleuStats.of_pair('I AM', 'i am').correct[0] == 0
    assert bleu.BleuStats.of_pair('I AM', 'i am', bleu.MULTI_BLEU).correct[0] == 2


def test_multi_bleu_mode_gives_zero_without_smoothing():
    # no 4-gram match: moses multi-bleu (no smoothing) is 0, sacrebleu's exp smoothing is not
    stats = bleu.BleuStats.of_pair('thank you so much', 'thank you very much', bleu.MULTI_BLEU)
    assert stats.bleu(4, bleu.MULTI_BLEU) == 0.0
    assert bleu.BleuStats.of_pair('thank you so much', 'thank you very much').bleu(4) > 0.0


def test_summed_statistics_equal_sacrebleu_cli_on_real_ed(ed_shifted_pairs, tmp_path):
    golds, responses = ed_shifted_pairs
    golds, responses = golds[:400], responses[:400]
    (tmp_path / 'ref.txt').write_text('\n'.join(golds) + '\n', encoding='utf-8')
    (tmp_path / 'hyp.txt').write_text('\n'.join(responses) + '\n', encoding='utf-8')
    sacrebleu_cli = os.path.join(os.path.dirname(sys.executable), 'sacrebleu')

    def cli(*args):
        out = subprocess.run(
            [sacrebleu_cli, str(tmp_path / 'ref.txt'), '-i', str(tmp_path / 'hyp.txt'), '-b', '-w', '6', *args],
            check=True,
            capture_output=True,
            text=True,
        )
        return float(out.stdout.strip())

    scores = bleu.corpus_bleu(responses, golds)
    assert scores['corpus_bleu-4'] == pytest.approx(cli(), abs=1e-6)
    assert scores['multi_bleu'] == pytest.approx(cli('-lc', '-s', 'none'), abs=1e-6)
    assert scores['avg_bleu'] == pytest.approx(sum(scores[f'corpus_bleu-{n}'] for n in range(1, 5)) / 4)
    assert scores['corpus_bleu-1'] > scores['corpus_bleu-2'] > scores['corpus_bleu-4'] > 0


def test_signature_names_the_settings():
    sigs = bleu.signatures()
    assert 'tok:13a' in sigs['avg_bleu'] and 'case:mixed' in sigs['avg_bleu'] and 'smooth:exp' in sigs['avg_bleu']
    assert 'case:lc' in sigs['multi_bleu'] and 'smooth:none' in sigs['multi_bleu']


def test_distinct_tokenizer_and_hand_counts():
    assert distinct.tokens("That's GREAT! Really?") == ["that's", 'great', '!', 'really', '?']
    responses = ['I am sorry.', 'i am glad!']
    # unigrams: i am sorry . i am glad !  -> 8 tokens, 6 distinct
    assert distinct.corpus_distinct(responses, 1) == pytest.approx(6 / 8)
    # bigrams: (i am)(am sorry)(sorry .)(i am)(am glad)(glad !) -> 6, 5 distinct
    assert distinct.corpus_distinct(responses, 2) == pytest.approx(5 / 6)
    # per utterance: each response has all-distinct n-grams
    assert distinct.mean_utterance_distinct(responses, 1) == 1.0
    assert distinct.mean_utterance_distinct(['no no no', 'ok'], 1) == pytest.approx((1 / 3 + 1) / 2)
    # a one-token response has no bigram: it is left out of the per-utterance mean
    assert distinct.mean_utterance_distinct(['no no no', 'ok'], 2) == pytest.approx(1 / 2)
    assert distinct.corpus_distinct([''], 2) == 0.0


def test_distinct_never_strips_prefix_letters():
    # EmpDG/KEMP's str.strip('Pred:') would eat the leading "P", "e", "d" and "r" of these words
    response = 'Pretty depressing, dear.'
    assert 'Pretty depressing, dear.'.strip('Pred:') != response  # the bug this guards against
    assert distinct.tokens(response) == ['pretty', 'depressing', ',', 'dear', '.']


def test_corpus_distinct_matches_plain_counting_on_real_ed(ed_shifted_pairs):
    _, responses = ed_shifted_pairs
    words = [r.lower() for r in responses[:1000]]
    for n in (1, 2):
        counts = Counter()
        for text in words:
            toks = distinct.tokens(text)
            counts.update(zip(*[toks[i:] for i in range(n)]))
        assert distinct.corpus_distinct(responses[:1000], n) == pytest.approx(len(counts) / sum(counts.values()))
