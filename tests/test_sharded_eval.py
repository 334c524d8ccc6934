"""A sharded evaluation reports the 1-worker figures.

The real commands on the real ED test sample (``--ed-datapath sample``: 122 test examples, one
P@1,100 block of 100): ``parlai eval_model`` (1 worker) and ``parlai multiprocessing_eval
--distributed-world-size 2`` (2 CPU workers, gloo), for a ranker (a tiny trained
``empathy/bert_ranker``, both P@1,100 protocols) and a generator (a tiny trained ``empathy/mime``).
Both are model files: an untrained ranker's projection is initialized from whatever the random
state is, which differs between the two commands, so it would not be one model. ParlAI shards the
episodes round-robin, pickles each worker's report and adds them up. Counts, P@1,100, emotion
accuracies, BLEU and corpus Distinct-n must be equal exactly; float sums (perplexities,
per-utterance Distinct-n) up to float noise (relative 1e-5: the shards batch and add in another
order). BERTScore, computed offline from the world logs, must be the same from the 1-worker log
and the two per-rank logs read together.
"""

import json
import os

import pytest

from bert_ranker_tiny import build_tiny_bert
from tiny_models import cached_tiny_model, train_tiny

EXACT = [
    'exs',
    'corpus_bleu-1',
    'corpus_bleu-2',
    'corpus_bleu-3',
    'corpus_bleu-4',
    'avg_bleu',
    'multi_bleu',
    'dist-1',
    'dist-2',
    'p@1,100',
    'p@1,100_shuffled',
    'hits@1',
    'hits@100',
    'emo_acc',
    'emo_acc@2',
    'emo_acc@5',
]
PRINTED = ['utt_dist-1', 'utt_dist-2', 'ppl', 'ppl_ex', 'ppl_gold', 'ppl_ex_gold', 'mrr', 'token_acc']
ED = ['-t', 'empathy_ed_clean', '--ed-datapath', 'sample', '-dt', 'test']


@pytest.fixture(scope='module')
def tiny_bert(tmp_path_factory, ed_dir):
    return build_tiny_bert(str(tmp_path_factory.mktemp('tiny_bert')), os.path.join(ed_dir, 'train.csv'))


@pytest.fixture(scope='module')
def tiny_ranker(tmp_path_factory, tiny_bert):
    """A tiny ``empathy/bert_ranker`` trained for a few updates (tiny_models' recipe) on the tiny
    BERT with a real ED vocabulary."""
    return train_tiny('bert_ranker', str(tmp_path_factory.mktemp('ranker')), tiny_bert)


def evaluate(run_parlai, tmp_path, name, args, workers):
    """Run the evaluation; returns its report and the world-log path it was given."""
    report, logs = tmp_path / f'{name}.json', tmp_path / f'{name}.jsonl'
    command = ['eval_model'] if workers == 1 else ['multiprocessing_eval', '--distributed-world-size', workers]
    done = run_parlai(*command, *ED, *args, '--report-filename', report, '--world-logs', logs, timeout=1500)
    assert 'Traceback' not in done.stdout + done.stderr
    with open(report) as f:
        return json.load(f)['report'], str(logs)


def read_turns(path):
    """Teacher turns of a world log: (conv_id, turn) -> number of label candidates."""
    turns = {}
    with open(path) as f:
        for line in f:
            for teacher, _ in json.loads(line)['dialog']:
                key = (teacher['conv_id'], teacher['turn'])
                assert key not in turns, f'{key} evaluated twice'
                turns[key] = len(teacher.get('label_candidates') or [])
    return turns


def assert_same_figures(one, two, expected):
    missing = [key for key in expected if key not in one or key not in two]
    assert not missing, f'not reported: {missing}'
    for key in EXACT:
        if key in one:
            assert two[key] == one[key], f'{key}: 1 worker {one[key]!r}, 2 workers {two[key]!r}'
    for key in PRINTED:
        if key in one:
            # equal up to float noise (the shards batch and add in another order): printed
            # digits differ when a figure sits on a rounding boundary
            assert two[key] == pytest.approx(one[key], rel=1e-5, abs=1e-9), (
                f'{key}: 1 worker {one[key]!r}, 2 workers {two[key]!r}'
            )
    print({key: one[key] for key in EXACT + PRINTED if key in one})


def sharded_turns(logs, workers=2):
    base, extension = os.path.splitext(logs)
    per_rank = [read_turns(f'{base}_{rank}{extension}') for rank in range(workers)]
    assert all(per_rank), 'a worker evaluated nothing: the evaluation was not sharded'
    merged = {}
    for turns in per_rank:
        assert not set(turns) & set(merged), 'an example was evaluated by two workers'
        merged.update(turns)
    return merged


@pytest.mark.parametrize('protocol,column', [('rashkin100', 'p@1,100'), ('rashkin100_shuffled', 'p@1,100_shuffled')])
def test_ranker_p100_bleu_distinct_match(protocol, column, tmp_path, tiny_ranker, run_parlai):
    args = ['-mf', tiny_ranker, '--ed-candidates', protocol, '--eval-candidates', 'inline', '-bs', '20']
    one, one_logs = evaluate(run_parlai, tmp_path, 'one', args, 1)
    two, two_logs = evaluate(run_parlai, tmp_path, 'two', args, 2)
    assert_same_figures(one, two, [column, 'avg_bleu', 'dist-1', 'dist-2', 'exs'])
    # every example of the block, each with its own 100 candidates, once, in both runs
    whole, sharded = read_turns(one_logs), sharded_turns(two_logs)
    assert whole == sharded
    assert len(whole) == one['exs'] == 100 and set(whole.values()) == {100}
    # P@1,100 is a count of hits over the block
    assert round(one[column] * 100) == round(two[column] * 100)


def test_generator_suite_matches_and_offline_bertscore(tmp_path, tmp_path_factory, tiny_bert, run_parlai):
    model_file = cached_tiny_model(tmp_path_factory, 'mime')
    args = ['-mf', model_file, '--skip-generation', 'false', '--inference', 'greedy', '--beam-size', '1', '-bs', '32']
    one, one_logs = evaluate(run_parlai, tmp_path, 'one', args, 1)
    two, two_logs = evaluate(run_parlai, tmp_path, 'two', args, 2)
    assert_same_figures(
        one,
        two,
        ['avg_bleu', 'dist-1', 'dist-2', 'emo_acc', 'emo_acc@5', 'ppl', 'ppl_ex', 'ppl_gold', 'ppl_ex_gold', 'exs'],
    )
    assert read_turns(one_logs).keys() == sharded_turns(two_logs).keys()

    # BERTScore is scored offline from the saved outputs: the per-rank logs read together (as
    # `parlai empathy_score -o two.jsonl` does) give the 1-worker figure
    from parlai_empathy.metrics import saved_outputs, suite
    from parlai_empathy.metrics.bertscore import BertScoreConfig, get_scorer

    scorer = get_scorer(BertScoreConfig(model=tiny_bert, num_layers=2))
    whole = suite.score_examples(saved_outputs.read_outputs(one_logs), scorer).values
    sharded = suite.score_examples(saved_outputs.read_outputs(two_logs), scorer).values
    assert sharded['bertscore_f'] == pytest.approx(whole['bertscore_f'], rel=1e-5)
    assert sharded['avg_bleu'] == whole['avg_bleu'] == one['avg_bleu']


def test_the_evidence_step_sharded_gives_the_1_worker_figures(tmp_path, tmp_path_factory, tiny_ranker, run_parlai):
    """``parlai empathy_leaderboard --eval-workers 2`` (the evidence step, sharded as
    multiprocessing_eval shards): the same figures and the same per-example outputs (in another
    order), and the evidence names the sharded command."""
    from parlai_empathy.evidence import artifacts as evidence

    mime = cached_tiny_model(tmp_path_factory, 'mime')
    results, outputs = {}, {}
    for workers in (1, 2):
        outdir, artifacts = tmp_path / f'lb{workers}', tmp_path / f'runs{workers}'
        run_parlai(
            'empathy_leaderboard',
            '--entries',
            f'gen={mime}',
            f'rank={tiny_ranker}',
            '--ed-datapath',
            'sample',
            '--outdir',
            outdir,
            '--bertscore-model',
            'none',
            '--eval-args',
            '-bs 16',
            '--progress',
            'false',
            '--entry-args',
            'gen=--inference greedy --beam-size 1',
            '--artifacts',
            artifacts,
            '--eval-workers',
            workers,
            timeout=1500,
        )
        results[workers] = {r['name']: r for r in json.loads((outdir / 'results.json').read_text())['results']}
        outputs[workers] = {
            name: evidence.read_outputs(str(artifacts / name / 'outputs.jsonl.gz')) for name in ('gen', 'rank')
        }
        assert not list(outdir.glob('*_[01].jsonl')), 'the per-rank world logs were joined and removed'
    for name in ('gen', 'rank'):
        one, two = results[1][name], results[2][name]
        assert one['exs'] == two['exs']
        for key in EXACT:
            if key in one['values']:
                assert two['values'][key] == one['values'][key], f'{name} {key}'
        for key in PRINTED:
            if key in one['values']:
                assert two['values'][key] == pytest.approx(one['values'][key], rel=1e-5, abs=1e-9), f'{name} {key}'
        by_id = {row['id']: row for row in outputs[1][name]}
        assert len(outputs[2][name]) == len(by_id) and all(
            {k: v for k, v in row.items() if k not in ('nll', 'nll_gold')}
            == {k: v for k, v in by_id[row['id']].items() if k not in ('nll', 'nll_gold')}
            for row in outputs[2][name]
        )
        assert all(
            c.startswith('parlai multiprocessing_eval --distributed-world-size 2 ')
            for c in two['commands']
            if 'eval' in c.split()[1]
        )
