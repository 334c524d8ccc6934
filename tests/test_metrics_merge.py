"""The suite's ParlAI metrics merged the way a sharded evaluation merges them.

``multiprocessing_eval``/``distributed_eval`` give each worker every n-th episode, pickle each
worker's report, gather them and add them with ``aggregate_unnamed_reports``. On the whole real ED
test set, that must give the 1-worker figure: exactly for BLEU and corpus Distinct-n (integer
sums), to rounding for the averages.
"""

import pickle

import pytest
from parlai.core.metrics import Metrics, aggregate_unnamed_reports

from metrics_ed_pairs import listener_turns
from parlai_empathy.data.emotions import ED_EMOTIONS
from parlai_empathy.metrics import parlai_metrics as pm

EXACT = [
    'corpus_bleu-1',
    'corpus_bleu-2',
    'corpus_bleu-3',
    'corpus_bleu-4',
    'avg_bleu',
    'multi_bleu',
    'dist-1',
    'dist-2',
]


def record(tracker, gold, response, emotion, i):
    pm.record_generation_metrics(tracker, gold, response, bertscore_f=(i % 7) / 7)
    scores = [((i * 31 + j * 17) % 32) / 32 for j in range(len(ED_EMOTIONS))]  # a deterministic "model"
    pm.record_emotion_metrics(tracker, scores, emotion, ED_EMOTIONS)


def sharded_report(examples, workers):
    """Each worker's tracker gets every ``workers``-th example (ParlAI's round-robin); the reports
    travel pickled, as all_gather_list sends them, and are added up as eval_model does."""
    reports = []
    for rank in range(workers):
        tracker = Metrics()
        for i, example in enumerate(examples):
            if i % workers == rank:
                record(tracker, *example, i)
        reports.append(pickle.loads(pickle.dumps(tracker.report())))
    return aggregate_unnamed_reports(reports)


@pytest.fixture(scope='module')
def examples(ed_dir):
    turns = listener_turns(ed_dir)
    golds = [gold for _, gold, _ in turns]
    responses = golds[-1:] + golds[:-1]
    return [(gold, response, emotion) for gold, response, (_, _, emotion) in zip(golds, responses, turns)]


@pytest.mark.parametrize('workers', [2, 3, 8])
def test_sharded_reports_add_up_to_the_one_worker_figures(examples, workers):
    whole = sharded_report(examples, 1)
    sharded = sharded_report(examples, workers)
    assert len(examples) == 5259
    assert set(sharded) == set(whole)
    for key in EXACT:
        assert sharded[key].value() == whole[key].value(), key
    for key in whole:
        assert sharded[key].value() == pytest.approx(whole[key].value(), rel=1e-12), key
    print({key: f'{whole[key].value():.6g}' for key in sorted(whole)})


def test_a_worker_without_examples_changes_nothing(examples):
    few = examples[:3]
    assert sharded_report(few, 5)['avg_bleu'].value() == sharded_report(few, 1)['avg_bleu'].value()


def test_pickled_metrics_keep_their_value_and_add_exactly(examples):
    (gold_a, resp_a, _), (gold_b, resp_b, _) = examples[:2]
    first, second = pm.generation_metrics(gold_a, resp_a), pm.generation_metrics(gold_b, resp_b)
    for key in first:
        restored = pickle.loads(pickle.dumps(first[key]))
        assert type(restored) is type(first[key]) and restored.value() == first[key].value(), key
        assert (restored + pickle.loads(pickle.dumps(second[key]))).value() == (first[key] + second[key]).value()


def test_distinct_pickles_only_its_own_prefix():
    """Corpus Distinct-n objects share an append-only log; a pickled one carries its own responses
    only, never those added to the log after it."""
    a = pm.CorpusDistinctMetric.of_response('i am so happy', 1)
    b = a + pm.CorpusDistinctMetric.of_response('so so sad today', 1)  # appends to a's log
    restored_a, restored_b = pickle.loads(pickle.dumps(a)), pickle.loads(pickle.dumps(b))
    assert restored_a.value() == a.value() == 1.0
    assert restored_b.value() == b.value() == 6 / 8
    assert (restored_a + restored_b).value() == (a + b).value()
