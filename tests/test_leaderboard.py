"""``parlai empathy_leaderboard`` on two stock baselines trained for a few steps on the sample."""
import csv
import json
import os

import pytest

from conftest import REPO


def _train(run_parlai, model_file, model, *extra):
    run_parlai(
        'train_model', '-t', 'empathy_ed_clean', '--ed-datapath', 'sample', '-m', model, '-mf', model_file,
        '--n-layers', '1', '--embedding-size', '16', '--ffn-size', '32', '--n-heads', '2', '-bs', '8',
        '--max-train-steps', '10', '--dict-maxtokens', '2000', '--truncate', '48', *extra,
    )


@pytest.fixture
def baselines(run_parlai, tmp_path):
    generator, ranker = str(tmp_path / 'gen' / 'model'), str(tmp_path / 'rank' / 'model')
    _train(run_parlai, generator, 'transformer/generator', '--skip-generation', 'true', '-vmt', 'ppl')
    _train(run_parlai, ranker, 'transformer/ranker', '--candidates', 'batch', '--eval-candidates', 'batch')
    return generator, ranker


def test_leaderboard_evaluates_tabulates_plots_and_writes_evidence(baselines, run_parlai, tmp_path):
    generator, ranker = baselines
    outdir, artifacts = tmp_path / 'lb', tmp_path / 'runs'
    done = run_parlai(
        'empathy_leaderboard', '--entries', f'gen={generator}', f'rank={ranker}', '--ed-datapath', 'sample',
        '--outdir', outdir, '--bertscore-model', 'none', '--eval-args', '-bs 16',
        '--entry-args', 'gen=--inference greedy', '--artifacts', artifacts,
    )
    results = {r['name']: r for r in json.loads((outdir / 'results.json').read_text())['results']}
    assert results['gen']['kind'] == 'generator' and results['rank']['kind'] == 'ranker'
    assert {'avg_bleu', 'dist-1', 'dist-2', 'ppl', 'multi_bleu'} <= set(results['gen']['values'])
    assert 'p@1,100' in results['rank']['values'] and 'avg_bleu' in results['rank']['values']
    assert 'p@1,100' not in results['gen']['values']
    # the ranker's P@1,100 is ParlAI's hits@1 over 100-candidate blocks: one block in the sample
    assert 0.0 <= results['rank']['values']['p@1,100'] <= 1.0 and results['rank']['exs']['p@1,100'] == 100
    # and on blocks of shuffled examples (the paper's "randomly selected" wording), a second pass
    assert 0.0 <= results['rank']['values']['p@1,100_shuffled'] <= 1.0
    assert any('--ed-candidates rashkin100_shuffled --ed-candidates-seed 0' in c for c in results['rank']['commands'])
    assert 'p@1,100_shuffled' not in results['gen']['values']
    rows = list(csv.DictReader(open(outdir / 'leaderboard.csv')))
    assert [r['model'] for r in rows] == ['gen', 'rank']
    assert float(rows[0]['avg_bleu']) == pytest.approx(results['gen']['values']['avg_bleu'])
    assert (outdir / 'leaderboard.png').stat().st_size > 1000
    assert 'nrefs:1|case:mixed|eff:no|tok:13a' in (outdir / 'leaderboard.md').read_text()
    assert any('--ed-candidates rashkin100 --eval-candidates inline' in c for c in results['rank']['commands'])
    # each model's evidence: the figures recompute from its per-example outputs
    from parlai_empathy import evidence

    for name in ('gen', 'rank'):
        report = evidence.read_report(str(artifacts / name))
        rows = evidence.read_outputs(str(artifacts / name / 'outputs.jsonl.gz'))
        recomputed = evidence.recompute(rows)
        assert set(report['values']) - {'ppl_ex'} <= set(recomputed) | {'avg_bleu', 'corpus_bleu-1'}
        for key, value in recomputed.items():
            if key in report['values']:
                assert value == pytest.approx(report['values'][key], rel=1e-6), (name, key)
        assert 'evidence in' in done.stdout
    assert sum(r.get('p@1,100') is not None for r in evidence.read_outputs(str(artifacts / 'rank' / 'outputs.jsonl.gz'))) == 100

    # boards made one run at a time are gathered into one, nothing evaluated again
    merged = tmp_path / 'lb2'
    run_parlai('empathy_leaderboard', '--entries', f'generator={outdir}/results.json#gen',
               f'rank={outdir}/results.json', '--outdir', merged, '--bertscore-model', 'none')
    gathered = {r['name']: r for r in json.loads((merged / 'results.json').read_text())['results']}
    assert gathered['generator']['values'] == results['gen']['values']
    assert gathered['rank']['values'] == results['rank']['values']
    assert gathered['rank']['commands'] == results['rank']['commands']
    wrong = run_parlai('empathy_leaderboard', '--entries', f'mime={outdir}/results.json', '--outdir',
                       tmp_path / 'lb3', '--bertscore-model', 'none', check=False)
    assert wrong.returncode != 0 and "has no row 'mime' (rows: gen, rank)" in wrong.stderr


def test_leaderboard_rejects_a_model_that_is_no_response_model_nor_classifier(run_parlai, tmp_path):
    model_file = tmp_path / 'm'
    model_file.write_text('')
    (tmp_path / 'm.opt').write_text(json.dumps({'model': 'repeat_label'}))
    done = run_parlai('empathy_leaderboard', '--entries', f'm={model_file}', '--ed-datapath', 'sample',
                      '--outdir', tmp_path / 'lb', '--bertscore-model', 'none', check=False)
    assert done.returncode != 0
    assert 'neither a response generator, a response ranker nor an emotion classifier' in done.stderr


def test_the_evaluation_loop_scores_every_p100_example_when_batch_slots_run_dry(ed_dir, tmp_path, monkeypatch):
    """A batch of episodes of unequal length leaves slots padded while others still have turns: the
    loop must count real examples, not batchsize per parley (which once stopped 2 turns early and
    scored 5,198 of ED test's 5,200 P@1,100 examples at -bs 64)."""
    from parlai_empathy import leaderboard

    monkeypatch.setenv('PARLAI_EMPATHY_ED_DIR', ed_dir)
    logs = str(tmp_path / 'logs.jsonl')
    report = leaderboard._eval(['-t', 'empathy_ed_clean', '--ed-candidates', 'rashkin100', '-dt', 'test',
                                '-m', 'echo_ranker:EchoRanker', '-bs', '64', '--datapath', str(tmp_path)],
                               logs, 'echo', False)
    hits = leaderboard.p100_hits(logs, int(report['exs'].value()))
    assert len(hits) == int(report['exs'].value()) == 5200


def test_a_row_whose_evidence_came_from_its_gpu_plan_is_marked_with_the_card(tmp_path):
    from parlai_empathy import leaderboard

    row = {'artifacts': 'runs/r'}
    (tmp_path / 'runs' / 'r').mkdir(parents=True)
    meta = tmp_path / 'runs' / 'r' / 'meta.json'
    meta.write_text(json.dumps({'plan': {'profile': 'cpu'}, 'machine': {'gpu': None}}))
    assert leaderboard._gpu_note(str(tmp_path), row) == ''
    meta.write_text(json.dumps({'plan': {'profile': 'gpu'}, 'machine': {'gpu': 'NVIDIA H200'}}))
    assert leaderboard._gpu_note(str(tmp_path), row) == ' (gpu plan, NVIDIA H200)'
    assert leaderboard._gpu_note(str(tmp_path), {'artifacts': 'runs/none'}) == ''


def test_a_row_can_fill_a_column_from_its_own_key(tmp_path):
    """Multi-TR has no polarity: the reference's PPL definition is its ``ppl_ex``, which fills the
    ``ppl_ex_gold`` column (table cell, example count, learning curve and minutes to target)."""
    from parlai_empathy import leaderboard

    (tmp_path / 'runs' / 'r').mkdir(parents=True)
    (tmp_path / 'runs' / 'r' / 'report.json').write_text(json.dumps(
        {'values': {'ppl_ex': 40.31, 'ppl': 48.0}, 'exs': {'ppl_ex': 5259, 'ppl': 5259}}))
    curve = [{'minutes': 10.0, 'updates': 1000, 'ppl_ex': 60.0}, {'minutes': 20.0, 'updates': 2000, 'ppl_ex': 37.0}]
    (tmp_path / 'runs' / 'r' / 'meta.json').write_text(json.dumps({'training': {'curve': curve}}))
    table = {'id': '', 'metrics': [{'key': 'ppl_ex_gold', 'label': 'PPL'}, {'key': 'ppl', 'label': 'corpus'}],
             'rows': [{'entry': 'r', 'label': 'R', 'paper': {}, 'artifacts': 'runs/r', 'keys': {'ppl_ex_gold': 'ppl_ex'}}]}
    target = {'metric': 'ppl_ex_gold', 'value': 37.54, 'mode': 'min'}
    line = leaderboard.render_project_table(str(tmp_path), table, target).splitlines()[-1]
    assert line.split(' | ')[1:] == ['', '', '40.31', '48', '5,259', '20 (2,000 updates)', '[runs/r](runs/r) |']
    del table['rows'][0]['keys']  # without it the column stays empty
    line = leaderboard.render_project_table(str(tmp_path), table, target).splitlines()[-1]
    assert line.split(' | ')[3] == ''
