"""``parlai empathy_reproduce``: a row's plan re-creates its evidence and refills the tables."""

import json
import os
import re
import shlex
import shutil

import pytest

from conftest import REPO
from parlai_empathy.evidence import reproduce

PROJECTS = os.path.join(REPO, 'projects')
TINY_TRAIN = (
    '--ed-datapath sample --embedding-size 32 --attention-size 16 --ffn-size 32 --glove-init false '
    '--dict-maxtokens 2000 -bs 8 --max-train-steps 4 --validation-max-exs 16 -vstep 4'
)


@pytest.mark.parametrize(
    'project', sorted(p for p in os.listdir(PROJECTS) if os.path.isfile(os.path.join(PROJECTS, p, 'table.json')))
)
def test_every_plan_names_real_tasks_agents_and_options(project):
    """ParlAI parses every step of every row's plans, cpu and gpu (so no option is misspelt or made up)."""
    from parlai.core.script import SCRIPT_REGISTRY, setup_script_registry

    setup_script_registry()
    for entry in reproduce.all_rows(PROJECTS, project):
        spec = reproduce.load_spec(PROJECTS, project)['reproduce']['rows'][entry]
        assert reproduce.row_profiles(PROJECTS, project, entry) == (
            ['cpu'] if spec.get('cpu_only') else list(reproduce.PROFILES)
        ), entry
    for entry, profile in [
        (e, p) for e in reproduce.all_rows(PROJECTS, project) for p in reproduce.row_profiles(PROJECTS, project, e)
    ]:
        plan = reproduce.row_plan(PROJECTS, project, entry, 'runs', profile)
        for step in plan.steps:
            script = SCRIPT_REGISTRY[step.argv[0]].klass
            opt = script.setup_args().parse_args(step.argv[1:])
            if '-mf' in step.argv:
                assert (
                    os.path.abspath(opt['model_file']) == os.path.abspath(plan.model) or step.argv[0] != 'train_model'
                )


RECIPE = {'projection_dim': 0, 'add_special_tokens': True, 'truncate_side': 'left', 'turn_separator': 'none'}


@pytest.mark.parametrize('project', ['rashkin2019_empatheticdialogues', 'metz2020_emotion_patterns'])
def test_sentence_encoder_ranker_plans_name_the_cpu_recipe(project):
    """A ranker row on a pretrained sentence encoder (mean pooling, cosine) keeps its geometry: no
    new random projection, the special tokens it was pretrained with (the project README's "CPU
    recipe", which the plans must name, since plain -m empathy/bert_ranker has the paper's
    settings). Without it a zero-shot row scores at chance."""
    from parlai.core.script import SCRIPT_REGISTRY, setup_script_registry

    setup_script_registry()
    checked = 0
    for entry, profile in [(e, p) for e in reproduce.all_rows(PROJECTS, project) for p in reproduce.PROFILES]:
        for step in reproduce.row_plan(PROJECTS, project, entry, 'runs', profile).steps:
            if 'empathy/bert_ranker' not in step.argv or step.argv[0] not in ('train_model', 'empathy_init_model'):
                continue
            opt = SCRIPT_REGISTRY[step.argv[0]].klass.setup_args().parse_args(step.argv[1:])
            assert opt['pooling'] == 'mean' and opt['similarity'] == 'cosine', (entry, profile)
            assert {k: opt[k] for k in RECIPE} == RECIPE, (entry, profile, step.name)
            checked += 1
    assert checked >= 4


def test_reproduce_creates_a_rows_evidence_fills_the_table_and_skips_finished_steps(run_parlai, tmp_path):
    projects = tmp_path / 'projects'
    # the project as a fresh clone would have it before any run: its committed evidence left out
    shutil.copytree(
        os.path.join(PROJECTS, 'majumder2020_mime'),
        projects / 'majumder2020_mime',
        ignore=shutil.ignore_patterns('runs'),
    )
    spec_path = projects / 'majumder2020_mime' / 'table.json'
    spec = json.loads(spec_path.read_text())
    train, evaluate = spec['reproduce']['rows']['multitask_transformer']['cpu']
    train['parlai'] += shlex.split(TINY_TRAIN)
    evaluate['parlai'] += [
        '--ed-datapath',
        'sample',
        '--bertscore-model',
        'none',
        '--eval-args',
        '-bs 16 --inference greedy --beam-size 1',
        '--progress',
        'false',
    ]
    spec_path.write_text(json.dumps(spec))
    args = [
        'empathy_reproduce',
        '--project',
        'majumder2020_mime',
        '--projects-dir',
        projects,
        '--runs-dir',
        tmp_path / 'runs',
        '--rows',
        'multitask_transformer',
        '--board',
        tmp_path / 'board',
    ]
    readme_before = (projects / 'majumder2020_mime' / 'README.md').read_text()
    # by default the evidence goes under the runs folder and the clone's committed rows stay as they are
    run_parlai(*args)
    model = tmp_path / 'runs' / 'majumder2020_mime' / 'multitask_transformer' / 'model'
    ours = tmp_path / 'runs' / 'projects' / 'majumder2020_mime' / 'runs' / 'multitask_transformer'
    assert model.exists()
    assert sorted(os.listdir(ours)) == sorted(['report.json', 'outputs.jsonl.gz', 'model.opt', 'meta.json'])
    assert not (projects / 'majumder2020_mime' / 'runs').exists()
    assert (projects / 'majumder2020_mime' / 'README.md').read_text() == readme_before
    assert [r['name'] for r in json.loads((tmp_path / 'board' / 'results.json').read_text())['results']] == [
        'majumder2020_mime/multitask_transformer'
    ]

    # --write-projects: over the committed rows, and the project README is refilled (training is done)
    trained_at = model.stat().st_mtime_ns
    done = run_parlai(*args, '--write-projects')
    assert done.stdout.count('done already') == 1
    row = projects / 'majumder2020_mime' / 'runs' / 'multitask_transformer'
    assert sorted(os.listdir(row)) == sorted(['report.json', 'outputs.jsonl.gz', 'model.opt', 'meta.json'])
    report = json.loads((row / 'report.json').read_text())
    meta = json.loads((row / 'meta.json').read_text())
    assert meta['plan']['commands'][0].startswith(
        'parlai train_model -t empathy_ed_clean -m empathy/multitask_transformer -mf {runs}/'
    )
    assert meta['examples'] == report['exs']['ppl'] > 0
    line = next(
        text
        for text in (projects / 'majumder2020_mime' / 'README.md').read_text().splitlines()
        if text.startswith('| Multi-TR')
    )
    assert f'{report["values"]["ppl"]:.4g}' in line
    assert '[runs/multitask_transformer](runs/multitask_transformer)' in line

    again = run_parlai(*args, '--write-projects')
    assert again.stdout.count('done already') == 2
    assert model.stat().st_mtime_ns == trained_at  # not trained again


def test_a_dry_run_works_from_any_directory_and_says_how_long_each_step_took(run_parlai, tmp_path):
    """Outside a clone (the working directory is a fresh folder) the plans installed with the
    package are used; each step says what it took in the committed row, on which machine, and
    the total; the evidence would go under the runs folder, not over the committed rows."""
    done = run_parlai('empathy_reproduce', '--project', 'majumder2020_mime', '--rows', 'mime', '--dry-run')
    meta = json.loads(open(os.path.join(PROJECTS, 'majumder2020_mime', 'runs', 'mime', 'meta.json')).read())
    train, evaluate = meta['training']['train_time'], meta['evaluation_seconds']
    machine = reproduce.machine_words(meta['machine'])
    assert machine.startswith('2 CPU cores')
    lines = done.stdout.splitlines()
    assert (
        f'# majumder2020_mime/mime train: about {reproduce.duration_words(train)} on {machine}, '
        'as the committed row took' in lines
    ), done.stdout
    assert (
        f'# majumder2020_mime/mime evaluate: about {reproduce.duration_words(evaluate)} on {machine}, '
        'as the committed row took' in lines
    )
    assert (
        f'# cpu plan, the steps to run in all: about {reproduce.duration_words(train + evaluate)} on {machine}, '
        'as the committed row took' in lines
    )
    commands = [line for line in lines if line.startswith('parlai ')]
    assert len(commands) == 2 and f'-mf {tmp_path}/runs/majumder2020_mime/mime/model' in commands[0]
    assert f'--artifacts {tmp_path}/runs/projects/majumder2020_mime/runs ' in commands[1]
    assert not os.path.exists(tmp_path / 'runs')  # a dry run writes nothing
    # and a row measured with the other profile says so instead of guessing
    done = run_parlai(
        'empathy_reproduce', '--project', 'rashkin2019_empatheticdialogues', '--rows', 'bert_ft', '--dry-run'
    )
    bert = json.loads(
        open(os.path.join(PROJECTS, 'rashkin2019_empatheticdialogues', 'runs', 'bert_ft', 'meta.json')).read()
    )
    assert 'not timed: the committed row ran its gpu plan in ' in done.stdout
    assert f' on {reproduce.machine_words(bert["machine"])}' in done.stdout, done.stdout
    # the installed copy is no clone: nothing is written into it
    done = run_parlai(
        'empathy_reproduce', '--project', 'majumder2020_mime', '--rows', 'mime', '--write-projects', check=False
    )
    assert done.returncode != 0 and 'run from a clone of parlai-empathy' in done.stderr
    assert 'Traceback' not in done.stderr


def test_the_plans_are_found_from_a_subfolder_of_a_clone_or_by_the_environment(tmp_path, monkeypatch):
    (tmp_path / 'clone' / 'projects' / 'p').mkdir(parents=True)
    (tmp_path / 'clone' / 'projects' / 'p' / 'table.json').write_text('{}')
    (tmp_path / 'clone' / 'deep' / 'er').mkdir(parents=True)
    monkeypatch.delenv(reproduce.PROJECTS_ENV, raising=False)
    monkeypatch.chdir(tmp_path / 'clone' / 'deep' / 'er')
    assert reproduce.find_projects_dir('p') == str(tmp_path / 'clone' / 'projects')
    # a project the clone lacks comes from the installed copy
    assert reproduce.find_projects_dir('majumder2020_mime') == reproduce.packaged_projects_dir()
    monkeypatch.setenv(reproduce.PROJECTS_ENV, str(tmp_path / 'elsewhere'))
    assert reproduce.find_projects_dir('p') == str(tmp_path / 'elsewhere')
    assert reproduce.find_projects_dir('p', explicit='given') == 'given'


def test_unknown_project_or_row_is_named(run_parlai):
    done = run_parlai('empathy_reproduce', '--project', 'nope', '--projects-dir', PROJECTS, '--dry-run', check=False)
    assert done.returncode != 0 and 'majumder2020_mime' in done.stderr
    done = run_parlai(
        'empathy_reproduce',
        '--project',
        'li_ethreed',
        '--projects-dir',
        PROJECTS,
        '--rows',
        'ethreed_v2',
        '--dry-run',
        check=False,
    )
    assert done.returncode != 0 and 'ethreed_no_policy' in done.stderr


def test_a_step_whose_output_lives_outside_the_runs_folder_always_runs(tmp_path):
    """The tag step's cache sits in ParlAI's datapath, which differs between installations: a marker
    in the runs folder cannot vouch for it, so the plans mark it ``always`` (cheap when the cache
    exists); an ordinary step with its marker is done."""
    spec = {
        'reproduce': {
            'rows': {
                'r': {
                    'cpu': [
                        {'name': 'train', 'parlai': ['train_model', '-mf', '{model}']},
                        {'name': 'tag', 'parlai': ['empathy_tag_ed', '-mf', '{model}'], 'always': True},
                    ]
                }
            }
        }
    }
    (tmp_path / 'p').mkdir()
    (tmp_path / 'p' / 'table.json').write_text(json.dumps(spec))
    train, tag = reproduce.row_plan(str(tmp_path), 'p', 'r', str(tmp_path / 'runs')).steps
    for step in (train, tag):
        os.makedirs(os.path.dirname(step.marker), exist_ok=True)
        with open(step.marker, 'w') as f:
            f.write(step.shell() + '\n')
    assert train.done() and not tag.done()
    # the committed plans mark every tagging step so
    for project in ('li_ethreed', 'metz2020_emotion_patterns'):
        for entry in reproduce.all_rows(PROJECTS, project):
            for profile in reproduce.PROFILES:
                for step in reproduce.row_plan(PROJECTS, project, entry, 'runs', profile).steps:
                    assert step.always == (step.argv[0] == 'empathy_tag_ed'), (project, entry, step.name)


def test_an_evaluation_done_from_another_clone_is_done_where_its_evidence_is(tmp_path):
    """A step that writes the row's evidence into ``{artifacts}`` records its command with that
    folder as ``{artifacts}``: run from another clone of the project (a later commit, whose
    evidence folder holds what the step wrote) it is done; where the evidence is missing it runs
    again; a marker in the old form (the absolute command) still counts in its own clone."""
    spec = {
        'reproduce': {
            'rows': {
                'r': {
                    'cpu': [
                        {'name': 'train', 'parlai': ['train_model', '-mf', '{model}']},
                        {
                            'name': 'evaluate',
                            'parlai': ['empathy_leaderboard', '-mf', '{model}', '--artifacts', '{artifacts}'],
                        },
                        {'name': 'report', 'parlai': ['empathy_patterns', '--report-dir', '{artifacts}/../report']},
                    ]
                }
            }
        }
    }
    clones = []
    for clone in ('a', 'b'):
        (tmp_path / clone / 'p').mkdir(parents=True)
        (tmp_path / clone / 'p' / 'table.json').write_text(json.dumps(spec))
        clones.append(reproduce.row_plan(str(tmp_path / clone), 'p', 'r', str(tmp_path / 'runs')).steps)
    (train_a, evaluate_a, report_a), (train_b, evaluate_b, _) = clones
    assert train_a.evidence is None and evaluate_a.evidence == str(tmp_path / 'a' / 'p' / 'runs' / 'r')
    assert report_a.evidence == str(tmp_path / 'a' / 'p' / 'report')  # the folder its argument names
    assert evaluate_a.shell() != evaluate_b.shell() and evaluate_a.recorded() == evaluate_b.recorded()
    assert '{artifacts}' in evaluate_a.recorded() and str(tmp_path / 'runs') in evaluate_a.recorded()

    os.makedirs(evaluate_a.evidence)
    for step in (train_a, evaluate_a):  # as run_step leaves them
        os.makedirs(os.path.dirname(step.marker), exist_ok=True)
        with open(step.marker, 'w') as f:
            f.write(step.recorded() + '\n')
    assert train_a.done() and evaluate_a.done() and train_b.done()
    assert not evaluate_b.done()  # clone b lacks the evidence
    os.makedirs(evaluate_b.evidence)
    assert evaluate_b.done()
    with open(evaluate_a.marker, 'w') as f:  # a marker written before the portable form
        f.write(evaluate_a.shell() + '\n')
    assert evaluate_a.done()


def test_a_malformed_table_json_is_named_with_its_line_and_column(tmp_path, run_parlai):
    """A hand-edited ``table.json`` with a stray comma: the plan, the leaderboard's README filler and
    the model card each name the file and where it stops being JSON, not a bare decoder error."""
    from parlai_empathy import leaderboard
    from parlai_empathy.serving import model_card

    (tmp_path / 'p').mkdir()
    (tmp_path / 'p' / 'table.json').write_text('{"reproduce": {"rows": {\n  "r": {"cpu": []},\n}}}\n')
    (tmp_path / 'p' / 'README.md').write_text('# p\n')
    where = f'{tmp_path / "p" / "table.json"}, line 3: not valid JSON'
    with pytest.raises(reproduce.ReproduceSpecError, match=re.escape(where)):
        reproduce.row_plan(str(tmp_path), 'p', 'r', str(tmp_path / 'runs'))
    with pytest.raises(ValueError, match=re.escape(where)):
        leaderboard.fill_project_tables(str(tmp_path))
    with pytest.raises(ValueError, match=re.escape(where)):
        model_card._project_row(str(tmp_path), 'p', 'r')
    done = run_parlai(
        'empathy_reproduce', '--project', 'p', '--projects-dir', tmp_path, '--rows', 'r', '--dry-run', check=False
    )
    assert done.returncode != 0 and where in done.stderr
