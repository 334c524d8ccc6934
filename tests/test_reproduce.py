"""``parlai empathy_reproduce``: one command re-runs a paper's table (prepare, train, evaluate, fill)."""
import json
import os
import shutil

import pytest

from conftest import REPO

PROJECTS = os.path.join(REPO, 'projects')
TINY_TRAIN = ('--ed-datapath sample --embedding-size 32 --attention-size 16 --ffn-size 32 --glove-init false '
              '--dict-maxtokens 2000 -bs 8 --max-train-steps 4 --validation-max-exs 16')


@pytest.mark.parametrize('project', sorted(p for p in os.listdir(PROJECTS) if os.path.isfile(os.path.join(PROJECTS, p, 'table.json'))))
def test_every_project_plans_every_row_with_real_options(project, run_parlai):
    """Each table's plan names real tasks, agents and options (ParlAI parses every train command)."""
    done = run_parlai('empathy_reproduce', '--project', project, '--projects-dir', PROJECTS, '--runs-dir', 'runs',
                      '--bert', 'offline-minilm', '--dry-run')
    commands = [line for line in done.stdout.splitlines() if line.startswith('parlai ')]
    spec = json.load(open(os.path.join(PROJECTS, project, 'table.json')))
    assert len(commands) == len(spec['reproduce'].get('prepare', [])) + len(spec['reproduce']['rows']) + 1
    assert commands[-1].startswith('parlai empathy_leaderboard --entries')
    from parlai.scripts.train_model import setup_args

    for command in commands:
        if command.startswith('parlai train_model'):
            argv = command.split()[2:]
            opt = setup_args().parse_args(argv)
            assert opt['model_file'].startswith(os.path.join('runs', ''))  or os.path.isabs(opt['model_file'])


def test_reproduce_trains_evaluates_fills_the_table_and_skips_finished_rows(run_parlai, tmp_path):
    projects = tmp_path / 'projects'
    shutil.copytree(os.path.join(PROJECTS, 'majumder2020_mime'), projects / 'majumder2020_mime')
    args = ['empathy_reproduce', '--project', 'majumder2020_mime', '--projects-dir', projects, '--runs-dir', tmp_path / 'runs',
            '--rows', 'multitask_transformer', '--train-args', TINY_TRAIN,
            '--leaderboard-args', '--ed-datapath sample --bertscore-model none --eval-args "-bs 16 --inference greedy --beam-size 1"']
    done = run_parlai(*args)
    model = tmp_path / 'runs' / 'multitask_transformer' / 'model'
    assert model.exists() and (tmp_path / 'runs' / 'multitask_transformer' / 'model.reproduced').exists()
    results = json.loads((tmp_path / 'runs' / 'leaderboard' / 'results.json').read_text())['results']
    assert [r['name'] for r in results] == ['multitask_transformer']
    ppl = results[0]['values']['ppl']
    row = next(line for line in (projects / 'majumder2020_mime' / 'README.md').read_text().splitlines()
               if line.startswith('| Multi-TR'))
    assert f'{ppl:.4g}' in row
    assert 'table filled' in done.stdout

    trained_at = model.stat().st_mtime_ns
    again = run_parlai(*args)
    assert 'multitask_transformer: done already' in again.stdout
    assert model.stat().st_mtime_ns == trained_at  # not trained again


def test_unknown_project_or_row_is_named(run_parlai):
    done = run_parlai('empathy_reproduce', '--project', 'nope', '--projects-dir', PROJECTS, '--dry-run', check=False)
    assert done.returncode != 0 and 'majumder2020_mime' in done.stderr
    done = run_parlai('empathy_reproduce', '--project', 'li_ethreed', '--projects-dir', PROJECTS, '--rows', 'ethreed_v2',
                      '--dry-run', check=False)
    assert done.returncode != 0 and 'ethreed_no_policy' in done.stderr


def test_ranker_rows_score_as_their_encoder_was_pretrained():
    """MiniLM sentence encoders get mean pooling + cosine, BERT the paper's defaults, and an
    explicit --ranker-args wins."""
    from parlai_empathy import reproduce

    def ranker_rows(**kwargs):
        plan = reproduce.load_plan(PROJECTS, 'rashkin2019_empatheticdialogues', 'runs', **kwargs)
        return [step.argv for step in plan.rows.values() if 'empathy/bert_ranker' in step.argv]

    minilm = ranker_rows(bert='offline-minilm')
    assert minilm and all(' '.join(argv).count('--pooling mean --similarity cosine') == 1 for argv in minilm)
    bert_base = ranker_rows(bert='bert-base-uncased')
    assert bert_base and not any('--similarity' in argv or '{ranker_args}' in argv for argv in bert_base)
    explicit = ranker_rows(bert='offline-minilm', ranker_args='--pooling cls')
    assert all('--similarity' not in argv and '--pooling' in argv for argv in explicit)
