"""``parlai empathy_leaderboard`` on two stock baselines trained for a few steps on the sample."""
import csv
import json
import os
import shutil

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


def test_leaderboard_evaluates_tabulates_plots_and_fills_project_tables(baselines, run_parlai, tmp_path):
    generator, ranker = baselines
    projects = tmp_path / 'projects'
    shutil.copytree(os.path.join(REPO, 'projects', 'rashkin2019_empatheticdialogues'), projects / 'rashkin')
    spec = json.loads((projects / 'rashkin' / 'table.json').read_text())
    spec['rows'][0]['entry'] = 'rank'
    (projects / 'rashkin' / 'table.json').write_text(json.dumps(spec))
    outdir = tmp_path / 'lb'
    done = run_parlai(
        'empathy_leaderboard', '--entries', f'gen={generator}', f'rank={ranker}', '--ed-datapath', 'sample',
        '--outdir', outdir, '--bertscore-model', 'none', '--eval-args', '-bs 16',
        '--entry-args', 'gen=--inference greedy', '--projects-dir', projects,
    )
    results = {r['name']: r for r in json.loads((outdir / 'results.json').read_text())['results']}
    assert results['gen']['kind'] == 'generator' and results['rank']['kind'] == 'ranker'
    assert {'avg_bleu', 'dist-1', 'dist-2', 'ppl', 'multi_bleu'} <= set(results['gen']['values'])
    assert 'p@1,100' in results['rank']['values'] and 'avg_bleu' in results['rank']['values']
    assert 'p@1,100' not in results['gen']['values']
    # the ranker's P@1,100 is ParlAI's hits@1 over 100-candidate blocks: one block in the sample
    assert 0.0 <= results['rank']['values']['p@1,100'] <= 1.0
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
    readme = (projects / 'rashkin' / 'README.md').read_text()
    first_row = next(line for line in readme.splitlines() if line.startswith('| Bi-encoder, pretrained'))
    ours = f'{results["rank"]["values"]["p@1,100"] * 100:.4g}'
    # the paper's figure sits in the shuffled column (its "randomly selected" wording); ours in both
    assert f'|  | 49.94 | 5.97 | {ours} |' in first_row
    assert 'filled' in done.stdout

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


def test_leaderboard_rejects_a_classifier_entry(run_parlai, tmp_path):
    model_file = tmp_path / 'clf'
    model_file.write_text('')
    (tmp_path / 'clf.opt').write_text(json.dumps({'model': 'empathy/emotion_classifier'}))
    done = run_parlai('empathy_leaderboard', '--entries', f'clf={model_file}', '--ed-datapath', 'sample',
                      '--outdir', tmp_path / 'lb', '--bertscore-model', 'none', check=False)
    assert done.returncode != 0
    assert 'neither a response generator nor a response ranker' in done.stderr
