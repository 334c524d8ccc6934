"""Bootstrap intervals of every figure and paired tests of two entries (``metrics/bootstrap.py``,
``parlai empathy_score --compare``, ``parlai empathy_leaderboard --intervals``).

The paired tests are checked against small cases worked out by hand; the committed evidence's
intervals against the per-example outputs they come from.
"""

import gzip
import json
import math
import os
import shutil

import numpy as np
import pytest

from conftest import REPO
from parlai_empathy.evidence import artifacts as evidence
from parlai_empathy.leaderboard import artifacts, board, rows
from parlai_empathy.metrics import bootstrap

PROJECTS = os.path.join(REPO, 'projects')
REPLIES = [
    'i am so sorry to hear that .',
    'that is great ! what happened ?',
    'oh no , are you ok ?',
    'i am sorry to hear that',
    'wow , that is great !',
    'what did you do ?',
]
GOLDS = [
    'I am sorry to hear that. Are you ok?',
    'That is great! What did you do?',
    'Oh no, are you ok now?',
    'So sorry. What happened?',
    'Wow, congratulations!',
    'What did you do then?',
]


def _hits(name, values):
    return [{'id': str(i), name: v} for i, v in enumerate(values)]


# ----- hand-computed cases --------------------------------------------------------------------------
def test_mcnemar_matches_the_exact_binomial_worked_by_hand():
    a = _hits('emo_acc', [1, 1, 1, 1, 1, 0, 1, 0])
    b = _hits('emo_acc', [0, 0, 0, 0, 0, 1, 1, 0])
    test = bootstrap.paired_test(a, b, 'emo_acc', resamples=50)
    # 5 examples only A gets right, 1 only B: two-sided exact p = 2 * P(X <= 1 | 6, 1/2) = 2 * 7 / 64
    assert (test.a_only, test.b_only) == (5, 1)
    assert test.p == pytest.approx(14 / 64)
    assert test.test == 'McNemar exact' and test.odds_ratio == 5
    assert test.difference == pytest.approx(6 / 8 - 2 / 8) and test.examples == 8


def test_holm_worked_by_hand():
    # sorted 0.01, 0.03, 0.04 times 3, 2, 1 = 0.03, 0.06, 0.04 -> kept non-decreasing: 0.03, 0.06, 0.06
    assert bootstrap.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert bootstrap.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert bootstrap.holm([]) == []


def test_paired_bootstrap_one_side_always_ahead_and_identical_entries():
    a = [{'id': str(i), 'bertscore_f': 0.5 + i / 100} for i in range(20)]
    b = [{'id': str(i), 'bertscore_f': 0.4 + i / 100} for i in range(20)]
    test = bootstrap.paired_test(a, b, 'bertscore_f', resamples=99, seed=3)
    # every resampled difference is exactly 0.1 > 0: p = 2 * (0 + 1) / (99 + 1)
    assert test.p == pytest.approx(0.02)
    assert test.difference == pytest.approx(0.1) and test.low == pytest.approx(0.1) and test.high == pytest.approx(0.1)
    same = bootstrap.paired_test(a, a, 'bertscore_f', resamples=99)
    assert same.p == 1.0 and same.difference == 0.0
    assert (same.resamples, same.seed) == (99, 0)


def test_paired_bleu_is_the_difference_of_the_two_corpus_scores_on_the_shared_examples():
    from sacrebleu.metrics import BLEU

    bleu2 = BLEU(max_ngram_order=2)
    a = [{'id': str(i), 'reply': r, 'gold': g} for i, (r, g) in enumerate(zip(REPLIES, GOLDS))]
    b = [{'id': str(i), 'reply': r, 'gold': g} for i, (r, g) in enumerate(zip(REPLIES[1:] + REPLIES[:1], GOLDS))]
    b = b[1:] + [{'id': 'only-in-b', 'reply': 'x', 'gold': 'y'}]  # example 0 is A's alone
    test = bootstrap.paired_test(a, b, 'corpus_bleu-2', resamples=20)
    shared = range(1, len(REPLIES))
    refs = [[GOLDS[i] for i in shared]]
    expected = (
        bleu2.corpus_score([REPLIES[i] for i in shared], refs).score
        - bleu2.corpus_score([(REPLIES[1:] + REPLIES[:1])[i] for i in shared], refs).score
    )
    assert test.examples == len(REPLIES) - 1
    assert test.difference == pytest.approx(expected)
    assert test.test == 'paired bootstrap' and 0 < test.p <= 1


def test_compare_adjusts_every_test_of_the_command():
    a = _hits('emo_acc', [1] * 30 + [0] * 10)
    b = _hits('emo_acc', [0] * 20 + [1] * 20)
    c = _hits('emo_acc', [1] * 40)
    tests = bootstrap.compare([('a', a), ('b', b), ('c', c)], resamples=10)
    assert [(t.a, t.b) for t in tests] == [('a', 'b'), ('a', 'c'), ('b', 'c')]
    assert [t.p_holm for t in tests] == pytest.approx(bootstrap.holm([t.p for t in tests]))


# ----- statistics without the text ------------------------------------------------------------------------
def test_item_statistics_give_the_figures_the_text_gives():
    with_text = [{'id': str(i), 'reply': r, 'gold': g} for i, (r, g) in enumerate(zip(REPLIES, GOLDS))]
    without = [dict(id=str(i), **s) for i, s in enumerate(bootstrap.item_statistics(REPLIES, GOLDS))]
    assert all('reply' not in r for r in without)
    everything = np.arange(len(REPLIES))
    for key in (
        'avg_bleu',
        'corpus_bleu-4',
        'multi_bleu',
        'avg_bleu_lc',
        'dist-1',
        'dist-2',
        'dist-1_nltk',
        'utt_dist-2',
        'distinct_replies',
        'reply_tokens',
    ):
        from_text = bootstrap.FIGURES[key][1](with_text)(everything)
        assert bootstrap.FIGURES[key][1](without)(everything) == pytest.approx(from_text), key
    figures = evidence.recompute(with_text)
    for key in ('avg_bleu', 'multi_bleu', 'dist-1', 'dist-2', 'utt_dist-1'):
        assert bootstrap.FIGURES[key][1](with_text)(everything) == pytest.approx(figures[key]), key


def test_intervals_cover_every_figure_with_a_per_example_statistic():
    rng = np.random.default_rng(0)
    n = 300
    out = [
        {
            'id': str(i),
            'reply': REPLIES[i % 6],
            'gold': GOLDS[(i * 7) % 6],
            'nll': float(rng.uniform(5, 30)),
            'nll_gold': float(rng.uniform(5, 30)),
            'tokens': int(rng.integers(3, 12)),
            'nll_reply': 10.0,
            'words': 5,
            'bertscore_f': float(rng.uniform(0.2, 0.4)),
            'emo_acc': int(i % 3 == 0),
            'p@1,100': int(i % 4 == 0),
        }
        for i in range(n)
    ]
    ci = bootstrap.intervals(out, resamples=100)
    assert {
        'avg_bleu',
        'corpus_bleu-1',
        'multi_bleu',
        'dist-1',
        'dist-2',
        'utt_dist-1',
        'bertscore_f',
        'ppl',
        'ppl_ex',
        'ppl_gold',
        'ppl_ex_gold',
        'ppl_word',
        'emo_acc',
        'p@1,100',
    } <= set(ci)
    for key in ('ppl', 'bertscore_f', 'emo_acc', 'avg_bleu'):
        figure = bootstrap.FIGURES[key][1](out)(np.arange(n))
        assert ci[key][0] <= figure <= ci[key][1], key
    assert ci['ppl_word'] == pytest.approx([math.exp(2), math.exp(2)])
    assert bootstrap.intervals(out, keys=['ppl'], resamples=100) == {'ppl': ci['ppl']}


def test_per_word_ppl_counts_words_as_the_definition_says():
    assert bootstrap.words("I can't believe it_comma_ wow!") == 9  # I can ' t believe it , wow !
    assert bootstrap.words('') == 0


# ----- hostile rows ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    'row,field',
    [
        ({'id': '1', 'nll': float('nan'), 'tokens': 3}, 'nll'),
        ({'id': '1', 'bleu': [1, 2, 3]}, 'bleu'),
        ({'id': '1', 'bleu': 'ten counts'}, 'bleu'),
        ({'id': '1', 'emo_acc': 0.5}, 'emo_acc'),
        ({'id': '1', 'ng': [[1, 2], [-1]]}, 'ng'),
        ({'id': 7, 'emo_acc': 1}, 'id'),
        ({'emo_acc': 1}, 'id'),
        ({'id': '1', 'tokens': 0, 'nll': 1.0}, 'tokens'),
    ],
)
def test_rows_the_statistics_cannot_use_are_refused_naming_line_and_field(row, field):
    with pytest.raises(ValueError, match=rf"^f\.gz, line 2, field '{field}'"):
        bootstrap.check_rows([{'id': '0'}, row], 'f.gz')
    with pytest.raises(ValueError, match=r'^f\.gz, line 1: not a JSON object'):
        bootstrap.check_rows([['a list']], 'f.gz')


def _gz(path, text):
    with gzip.open(path, 'wt', encoding='utf-8') as f:
        f.write(text)
    return str(path)


def test_an_entry_file_that_is_not_outputs_is_refused_in_one_line(tmp_path, monkeypatch):
    good = json.dumps({'id': '0', 'emo_acc': 1})
    with pytest.raises(ValueError, match=r'nope does not exist'):
        rows.read_entry_rows(str(tmp_path / 'nope'))
    plain = tmp_path / 'plain.gz'
    plain.write_text(good)
    with pytest.raises(ValueError, match=r'plain\.gz, line 1: not a gzip file'):
        rows.read_entry_rows(str(plain))
    with pytest.raises(ValueError, match=r'bad\.gz, line 2: not valid JSON'):
        rows.read_entry_rows(_gz(tmp_path / 'bad.gz', good + '\n{"id": \n'))
    with pytest.raises(ValueError, match=r'nan\.gz, line 1: NaN is not a number'):
        rows.read_entry_rows(_gz(tmp_path / 'nan.gz', '{"id": "0", "bertscore_f": NaN}\n'))
    monkeypatch.setenv('PARLAI_EMPATHY_CAP_DATA_BYTES', '100')
    with pytest.raises(ValueError, match=r'big\.gz.*PARLAI_EMPATHY_CAP_DATA_BYTES'):
        rows.read_entry_rows(_gz(tmp_path / 'big.gz', (good + '\n') * 50))


# ----- the committed evidence -----------------------------------------------------------------------------
def _response_rows():
    for folder in rows.artifact_folders(PROJECTS):
        report = evidence.read_report(folder)
        if report.get('kind') != 'classifier':
            yield folder, report


@pytest.mark.parametrize(
    'folder,report', list(_response_rows()), ids=lambda v: os.path.relpath(v, PROJECTS) if isinstance(v, str) else None
)
def test_every_figure_of_every_response_row_has_its_interval_from_its_outputs(folder, report):
    out = bootstrap.prepared(evidence.read_outputs(os.path.join(folder, evidence.OUTPUTS)))
    for key, value in report['values'].items():
        carried = bootstrap.figure_rows(out, key)
        assert carried, f'{folder}: {key} has no per-example statistic in its outputs'
        assert bootstrap.FIGURES[key][1](carried)(np.arange(len(carried))) == pytest.approx(value, rel=1e-6, abs=1e-9)
        assert key in report.get('ci95', {}), f'{folder}: no interval for {key}'


def test_classifier_rows_have_intervals_of_accuracy_and_f1_around_their_figures():
    for folder in rows.artifact_folders(PROJECTS):
        report = evidence.read_report(folder)
        if report.get('kind') != 'classifier':
            continue
        out = evidence.read_outputs(os.path.join(folder, evidence.OUTPUTS))
        classes = evidence.read_json(os.path.join(folder, evidence.OPT))['classes']
        computed = bootstrap.classifier_intervals(out, classes, keys=list(report['values']), resamples=50)
        assert set(computed) == set(report['ci95']), folder
        assert {'macro_f1', 'micro_f1'} <= set(computed), folder
        for key, (low, high) in report['ci95'].items():
            assert low < report['values'][key] < high, (folder, key)
    # hand case: 2 of 4 right on two classes -> macro-F1 of (a: tp 1, fp 1, fn 1) and (b: the same) = 0.5
    out = [{'gold': g, 'predicted': p} for g, p in (('a', 'a'), ('a', 'b'), ('b', 'b'), ('b', 'a'))]
    assert bootstrap._f1_statistic(out, 'predicted', ['a', 'b'], True)(np.arange(4)) == pytest.approx(0.5)
    assert bootstrap._f1_statistic(out, 'predicted', ['a', 'b', 'c'], True)(np.arange(4)) == pytest.approx(1 / 3)


def test_a_rows_committed_intervals_are_what_its_outputs_give(tmp_path):
    row = tmp_path / 'moel'
    shutil.copytree(os.path.join(PROJECTS, 'published', 'runs', 'moel'), row)
    committed = evidence.read_report(str(row))['ci95']
    report = evidence.read_report(str(row))
    del report['ci95']
    evidence.write_json(str(row / evidence.REPORT), report)
    assert artifacts.refresh_intervals(str(row))
    assert evidence.read_report(str(row))['ci95'] == committed
    assert not artifacts.refresh_intervals(str(row))  # nothing changes a second time


def test_the_interval_listing_names_every_figure_of_every_row():
    results = rows.gather_artifacts(PROJECTS)
    listing = board.interval_listing(results)
    for result in results:
        for key in result.ci95 or {}:
            assert f'| {board.row_name(result)} | {key} |' in listing


def test_compare_prints_difference_interval_and_p_for_mime_against_moel(run_parlai, tmp_path):
    runs = os.path.join(PROJECTS, 'published', 'runs')
    done = run_parlai(
        'empathy_score',
        '--compare',
        f'MIME={runs}/mime_beam',
        f'MoEL={runs}/moel',
        '--compare-metrics',
        'multi_bleu,reply_emotion_acc',
        '--resamples',
        '200',
        '--seed',
        '1',
        '--json-out',
        'tests.json',
    )
    assert '200 resamples, seed 1' in done.stdout
    assert '| MIME | MoEL | multi_bleu | 5255 | 2.616 | 2.482 | 0.1345 |' in done.stdout
    assert '| McNemar exact |' in done.stdout
    lines = [line for line in done.stdout.splitlines() if line.startswith('| MIME | MoEL |')]
    assert len(lines) == 2
    written = json.loads((tmp_path / 'tests.json').read_text())
    assert (written['resamples'], written['seed'], written['adjustment']) == (200, 1, 'holm')
    assert {t['metric'] for t in written['tests']} == {'multi_bleu', 'reply_emotion_acc'}
    bad = run_parlai('empathy_score', '--compare', f'{runs}/moel', '--compare-metrics', 'bleu', check=False)
    assert bad.returncode != 0 and 'at least two entries' in bad.stderr + bad.stdout
