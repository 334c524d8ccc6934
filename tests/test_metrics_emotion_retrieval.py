"""emo_acc@k from score vectors and p@1,100 (ParlAI hits@1 over 100 inline candidates)."""

import pytest
import torch

from parlai_empathy.metrics import emotion, retrieval
from parlai_empathy.metrics.parlai_metrics import record_emotion_metrics, record_retrieval_metrics


def test_topk_from_lists_tensors_and_mappings():
    scores = [0.1, 0.5, 0.2, 0.9, 0.3, 0.0]  # ranking: 3, 1, 4, 2, 0, 5
    assert emotion.gold_rank(scores, 3) == 0
    assert emotion.topk_hits(scores, 1) == {'emo_acc': False, 'emo_acc@2': True, 'emo_acc@5': True}
    assert emotion.topk_hits(torch.tensor(scores), 5) == {'emo_acc': False, 'emo_acc@2': False, 'emo_acc@5': False}
    labels = ['afraid', 'angry', 'sad', 'joyful', 'proud', 'lonely']
    assert emotion.topk_hits(dict(zip(labels, scores)), 'proud')['emo_acc@5'] is True
    assert emotion.gold_rank(scores, 'sad', labels) == 3


def test_ties_are_broken_by_label_order_and_bad_input_is_refused():
    assert emotion.gold_rank([1.0, 1.0, 1.0], 0) == 0
    assert emotion.gold_rank([1.0, 1.0, 1.0], 2) == 2
    with pytest.raises(ValueError, match='not one of'):
        emotion.gold_rank({'sad': 1.0}, 'happy')
    with pytest.raises(ValueError, match='outside'):
        emotion.gold_rank([1.0, 2.0], 2)
    with pytest.raises(ValueError, match='3 emotion scores for 2 labels'):
        emotion.gold_rank([1.0, 2.0, 3.0], 'a', ['a', 'b'])


def test_emotion_accuracy_over_a_batch_by_plain_counting():
    from parlai.core.metrics import Metrics

    tracker = Metrics()
    ranks = [0, 1, 2, 4, 5, 31, 0, 3]
    for i, rank in enumerate(ranks):
        scores = [0.0] * 32
        gold = i % 32
        others = [j for j in range(32) if j != gold]
        order = others[:rank] + [gold] + others[rank:]
        for position, label in enumerate(order):
            scores[label] = 100.0 - position
        record_emotion_metrics(tracker, scores, gold)
    report = tracker.report()
    assert report['emo_acc'].value() == pytest.approx(sum(r < 1 for r in ranks) / len(ranks))
    assert report['emo_acc@2'].value() == pytest.approx(sum(r < 2 for r in ranks) / len(ranks))
    assert report['emo_acc@5'].value() == pytest.approx(sum(r < 5 for r in ranks) / len(ranks))


def test_p_at_1_100_equals_parlai_hits_at_1():
    from parlai.core.metrics import Metrics, TeacherMetrics

    candidates = [f'candidate number {i}.' for i in range(99)] + ['The gold, response!']
    tracker, teacher = Metrics(), TeacherMetrics('default')
    for top in ['the gold response', 'candidate number 7.', 'The gold, response!']:
        ranked = [top] + [c for c in candidates if c != top]
        record_retrieval_metrics(tracker, ranked, 'The gold, response!', len(candidates))
        teacher.evaluate_response({'text': ranked[0], 'text_candidates': ranked}, ['The gold, response!'])
    assert tracker.report()[retrieval.METRIC].value() == pytest.approx(2 / 3)
    assert teacher.report()['hits@1'].value() == pytest.approx(2 / 3)


def test_p_at_1_100_refuses_other_candidate_counts():
    with pytest.raises(ValueError, match='exactly 100'):
        retrieval.top1_correct(['a'] * 20, 'a', 20)
    with pytest.raises(ValueError, match='no ranked candidates'):
        retrieval.top1_correct([], 'a', 100)
