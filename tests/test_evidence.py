"""Every published figure regenerates from committed evidence.

* the project tables and ``projects/leaderboard`` regenerate byte-identical from ``projects/*/runs/``;
* every row's four artifacts exist, agree with each other (figures recomputed from the
  per-example outputs), carry no machine paths, and P@1,100 rows cover exactly 5,200 examples (a
  published row, another paper's released outputs, has its alignment in place of a model's options
  and per-example figures without the replies: ``tests/test_published_outputs.py`` rescoring the
  file itself where it is at hand);
* every table row has a plan with known placeholders and its own model file;
* an evaluation whose P@1,100 blocks are broken stops with an error naming the example.
"""

import filecmp
import gzip
import json
import os
import shutil

import pytest

from conftest import REPO
from parlai_empathy import leaderboard
from parlai_empathy.evidence import artifacts as evidence
from parlai_empathy.evidence import reproduce
from parlai_empathy.leaderboard.published import KIND as PUBLISHED_KIND
from parlai_empathy.leaderboard.published import PUBLISHED_ROW_FILES

PROJECTS = os.path.join(REPO, 'projects')
BOARD = os.path.join(REPO, 'projects', 'leaderboard')


def _specs():
    for paper in sorted(os.listdir(PROJECTS)):
        path = os.path.join(PROJECTS, paper, 'table.json')
        if os.path.isfile(path):
            with open(path) as f:
                yield paper, json.load(f)


def _rows_with_artifacts():
    for paper, spec in _specs():
        for table in leaderboard.project_tables(spec):
            for row in table['rows']:
                folder = os.path.join(PROJECTS, paper, row.get('artifacts') or f'runs/{row["entry"]}')
                if os.path.isdir(folder):
                    yield paper, row, folder


def test_tables_and_board_regenerate_byte_identical_from_the_artifacts(tmp_path, run_parlai):
    projects = tmp_path / 'projects'
    shutil.copytree(PROJECTS, projects)
    for readme in projects.glob('*/README.md'):  # blank every table: only the artifacts may refill them
        text = readme.read_text()
        for start in ('<!-- leaderboard-table:start -->', '<!-- leaderboard-table:start:classifiers -->'):
            end = start.replace(':start', ':end')
            if start in text:
                head, rest = text.split(start, 1)
                text = head + start + '\n' + end + rest.split(end, 1)[1]
        readme.write_text(text)
    board = tmp_path / 'board'
    run_parlai('empathy_leaderboard', '--from-artifacts', projects, '--outdir', board)
    for paper, _ in _specs():
        assert (projects / paper / 'README.md').read_text() == open(
            os.path.join(PROJECTS, paper, 'README.md')
        ).read(), f'{paper} README table differs from its artifacts'
    for name in ('results.json', 'leaderboard.md', 'leaderboard.csv'):
        assert filecmp.cmp(board / name, os.path.join(BOARD, name), shallow=False), (
            f'projects/leaderboard/{name} is stale'
        )


@pytest.mark.parametrize(
    'paper,row,folder', list(_rows_with_artifacts()), ids=lambda v: v if isinstance(v, str) and '/' not in v else None
)
def test_each_rows_artifacts_are_complete_consistent_and_portable(paper, row, folder):
    published = evidence.read_report(folder).get('kind') == PUBLISHED_KIND
    for name in PUBLISHED_ROW_FILES if published else evidence.ROW_FILES:
        assert os.path.isfile(os.path.join(folder, name)), f'{folder}/{name} is missing'
    report = evidence.read_report(folder)
    opt = {} if published else evidence.read_json(os.path.join(folder, evidence.OPT))
    meta = evidence.read_json(os.path.join(folder, evidence.META))
    rows = evidence.read_outputs(os.path.join(folder, evidence.OUTPUTS))
    assert os.path.getsize(os.path.join(folder, evidence.OUTPUTS)) < 1_000_000
    for obj, name in ((report, 'report'), (opt, 'opt'), (meta, 'meta')):
        assert not evidence.absolute_paths(obj), f'{folder} {name}: {evidence.absolute_paths(obj)[:3]}'
    assert meta['examples'] == len(rows) and meta.get('plan', {}).get('commands'), f'{folder}: meta incomplete'
    if report.get('kind') == 'classifier':
        recomputed = evidence.recompute_classifier(rows, opt['classes'])
    else:
        recomputed = evidence.recompute(rows)
    values = report['values']
    for key, value in recomputed.items():
        if key in values:
            assert value == pytest.approx(values[key], rel=1e-6, abs=1e-9), f'{folder}: {key}'
    for key in ('p@1,100', 'p@1,100_shuffled'):
        if key in values:
            assert report['exs'][key] == 5200 and sum(r.get(key) is not None for r in rows) == 5200


def test_every_row_has_a_plan_of_its_own():
    models = {}
    for paper, spec in _specs():
        plans = spec['reproduce']['rows']
        for table in leaderboard.project_tables(spec):
            for row in table['rows']:
                assert row['entry'] in plans, f'{paper}: row {row["entry"]} has no plan'
        for entry in plans:
            plan = reproduce.row_plan(PROJECTS, paper, entry, '/runs', 'cpu')
            assert plan.steps and all('{' not in arg and '<' not in arg for s in plan.steps for arg in s.argv)
            trains = [s for s in plan.steps if s.argv[0] == 'train_model']
            for step in trains:
                model = step.argv[step.argv.index('-mf') + 1]
                assert model not in models, f"{paper}/{entry} trains into {models.get(model)}'s model file"
                models[model] = f'{paper}/{entry}'
            for need in plan.needs:
                need_paper, _, need_entry = need.rpartition('/')
                reproduce.row_plan(PROJECTS, need_paper, need_entry, '/runs', 'cpu')


def test_reproduce_dry_run_prints_the_plan_needs_first(run_parlai):
    """EmoPrepend-1 reads the situation classifier's predictions: that row's plan is printed first."""
    done = run_parlai(
        'empathy_reproduce',
        '--project',
        'rashkin2019_empatheticdialogues',
        '--rows',
        'bert_emoprepend1',
        '--projects-dir',
        PROJECTS,
        '--runs-dir',
        'r',
        '--dry-run',
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith('parlai ')]
    assert 'empathy_ed_emotion' in lines[0] and '-m empathy/emotion_classifier' in lines[0]
    assert any('-m empathy/bert_ranker' in line for line in lines[2:])


def test_ethreeds_plan_is_the_plain_command(run_parlai):
    """Its listener labels ship with the package: the row needs no other row first."""
    done = run_parlai(
        'empathy_reproduce',
        '--project',
        'li_ethreed',
        '--rows',
        'ethreed',
        '--projects-dir',
        PROJECTS,
        '--runs-dir',
        'r',
        '--dry-run',
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith('parlai ')]
    assert len(lines) == 2 and lines[0].startswith('parlai train_model -t empathy_ed_clean -m empathy/ethreed -mf ')
    assert lines[0].endswith('/r/li_ethreed/ethreed/model --save-every-n-secs 600')
    assert 'empathy_leaderboard' in lines[1]


def _block_logs(path, n_candidates, ranked):
    teacher = {
        'conv_id': 'conv:1',
        'turn': 2,
        'eval_labels': ['gold'],
        'label_candidates': ['gold'] + [f'c{i}' for i in range(n_candidates - 1)],
    }
    with open(path, 'w') as f:
        f.write(json.dumps({'dialog': [[teacher, {'text': 'x', 'text_candidates': ranked}]]}) + '\n')


def test_p100_hits_refuses_short_blocks_and_missing_rankings_and_counts_duplicates(tmp_path):
    logs = str(tmp_path / 'logs.jsonl')
    _block_logs(logs, 99, ['gold'])
    with pytest.raises(evidence.ArtifactError, match='conv:1/2 has 99 candidates'):
        leaderboard.p100_hits(logs)
    _block_logs(logs, 100, [])
    with pytest.raises(evidence.ArtifactError, match='conv:1/2 was not ranked'):
        leaderboard.p100_hits(logs)
    _block_logs(logs, 100, ['Gold!', 'c1'])  # the gold's text, normalized: a duplicate counts too
    assert leaderboard.p100_hits(logs) == {'conv:1/2': 1}
    with pytest.raises(evidence.ArtifactError, match='covers 1 examples, not the 5200'):
        leaderboard.p100_hits(logs, expected=5200)


def test_a_model_that_ranks_nothing_stops_the_p100_evaluation(run_parlai):
    done = run_parlai(
        'eval_model',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-dt',
        'test',
        '--ed-candidates',
        'rashkin100',
        '-m',
        'repeat_label',
        check=False,
    )
    assert done.returncode != 0
    assert 'P@1,100: the model returned no ranked candidates for empathy_ed_clean test example conv' in done.stderr


def test_outputs_and_json_are_written_reproducibly(tmp_path):
    rows = [{'id': 'a/1', 'gold': 'I am sorry.', 'reply': 'So sorry!', 'nll': 12.0, 'tokens': 4}]
    first, second = tmp_path / 'a.jsonl.gz', tmp_path / 'b.jsonl.gz'
    evidence.write_outputs(str(first), rows)
    evidence.write_outputs(str(second), rows)
    assert first.read_bytes() == second.read_bytes()
    assert evidence.read_outputs(str(first)) == rows
    with gzip.open(first, 'rt') as f:
        assert json.loads(f.readline())['id'] == 'a/1'
    places = {'/home/me/runs': '{runs}', '/home/me': '~'}
    assert (
        evidence.portable('parlai eval_model -mf /home/me/runs/x/model --y /home/me/z', places)
        == 'parlai eval_model -mf {runs}/x/model --y ~/z'
    )
    portable = evidence.portable_opt({'starttime': 'now', 'model_file': '/home/me/runs/m'}, places)
    assert portable == {'model_file': '{runs}/m'}


def test_bootstrap_intervals_hold_the_figure_and_are_seeded(ed_dir):
    import csv

    from parlai_empathy.metrics import bootstrap

    with open(os.path.join(ed_dir, 'test.csv')) as f:
        utterances = [row[5].replace('_comma_', ',') for row in csv.reader(f)][1:401]
    rows = [
        {'id': str(i), 'gold': utterances[i], 'reply': utterances[(i + 1) % 400], 'emo_acc': i % 3 == 0}
        for i in range(400)
    ]
    figures = evidence.recompute(rows)
    first = bootstrap.intervals(rows, resamples=200)
    assert first == bootstrap.intervals(rows, resamples=200)  # seeded
    for key in ('avg_bleu', 'dist-1', 'dist-2', 'emo_acc'):
        low, high = first[key]
        assert low < figures[key] < high, (key, low, figures[key], high)
    assert first['emo_acc'][1] - first['emo_acc'][0] == pytest.approx(2 * 1.96 * (1 / 3 * 2 / 3 / 400) ** 0.5, rel=0.25)


def test_learning_curve_and_time_to_target():
    from parlai_empathy.evidence import learning_curve

    stats = {
        'valid_reports': [
            {'train_time': 600, 'total_train_updates': 1000, 'total_epochs': 0.4, 'ppl': 80.0},
            {'train_time': 1800, 'total_train_updates': 3000, 'total_epochs': 1.2, 'ppl': 36.0},
            {'train_time': 2400, 'total_train_updates': 4000, 'total_epochs': 1.6, 'ppl': 35.0},
        ]
    }
    rows = learning_curve.curve(stats)
    assert [r['minutes'] for r in rows] == [10.0, 30.0, 40.0]
    assert learning_curve.time_to_target(rows, 'ppl', 37.5)['updates'] == 3000
    assert learning_curve.time_to_target(rows, 'ppl', 20.0) is None
    # the model file is the best validated one (here after 4,000 updates of a 5,000-update run, whose
    # final reports, after a resume, described the checkpoint at 4,900), or the end when none ran
    run = dict(stats, train_steps=5000, best_valid=35.0, final_valid_report={'total_train_updates': 4900})
    assert learning_curve.model_updates(run, 'ppl') == 4000
    assert learning_curve.model_updates({'train_steps': 462}, 'hits@1') == 462


def test_the_evaluated_models_updates_come_from_the_model_file(tmp_path):
    """The model file's own count wins over what the trainstats' best figure points to."""
    import torch

    from parlai_empathy.evidence import learning_curve

    path = str(tmp_path / 'model')
    torch.save({'model': {'w': torch.zeros(2)}, 'number_training_updates': 16854}, path)
    assert learning_curve.saved_updates(path) == 16854
    torch.save({'model': {'w': torch.zeros(2)}}, path)
    assert learning_curve.saved_updates(path) is None
    assert learning_curve.saved_updates(str(tmp_path / 'missing')) is None


def test_code_version_is_dirty_for_code_changes_not_for_evidence(tmp_path, monkeypatch):
    """A frozen clone that evaluated one row holds that row's new evidence when it evaluates the
    next: that is not a change of the code that ran. A changed module is."""
    import subprocess

    from parlai_empathy.evidence.artifacts import code_version

    monkeypatch.delenv('PARLAI_EMPATHY_COMMIT', raising=False)
    files = {
        'parlai_empathy/x.py': 'A = 1\n',
        'projects/p/runs/r/report.json': '{}\n',
        'projects/p/README.md': '| row |\n',
        'projects/p/table.json': '{}\n',
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    git = ['git', '-C', str(tmp_path), '-c', 'user.name=t', '-c', 'user.email=t@t']
    subprocess.run(git + ['init', '-q'], check=True)
    subprocess.run(git + ['add', '.'], check=True)
    subprocess.run(git + ['commit', '-qm', 'x'], check=True)
    assert code_version(str(tmp_path))['dirty'] is False
    (tmp_path / 'projects/p/runs/r/report.json').write_text('{"a": 1}\n')
    (tmp_path / 'projects/p/README.md').write_text('| row | 1 |\n')
    assert code_version(str(tmp_path))['dirty'] is False
    (tmp_path / 'projects/p/table.json').write_text('{"plan": 1}\n')  # the plans are code
    assert code_version(str(tmp_path))['dirty'] is True


def test_a_benchmark_record_names_the_code_the_machine_and_the_kernels(monkeypatch):
    """A bench JSON says which commit ran, on what machine under what load, and under which kernel
    settings (a figure taken with AVX2 kernels forced on an AVX-512 CPU must say so)."""
    from parlai_empathy.evidence.artifacts import benchmark_record, finish_benchmark_record

    monkeypatch.setenv('PARLAI_EMPATHY_COMMIT', '0123abcd')
    monkeypatch.setenv('ATEN_CPU_CAPABILITY', 'avx2')
    monkeypatch.delenv('ONEDNN_MAX_CPU_ISA', raising=False)
    record = benchmark_record()
    assert record['code'] == {'commit': '0123abcd', 'dirty': False, 'package': record['code']['package']}
    assert record['kernel_env']['ATEN_CPU_CAPABILITY'] == 'avx2' and record['kernel_env']['ONEDNN_MAX_CPU_ISA'] is None
    assert record['machine']['cores'] == os.cpu_count() and len(record['machine']['load_average']) == 3
    assert record['torch_cpu_capability'] and record['taken'].endswith(' UTC')
    assert 'load_average_end' not in record
    assert len(finish_benchmark_record(record)['load_average_end']) == 3
