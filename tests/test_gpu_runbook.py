"""The GPU runbook (``tools/gpu``) on this CPU, so that it cannot rot while no GPU is at
hand: the environment overrides it relies on, the GloVe cut, the gpu plans, and
``tools/gpu/run.sh cpu-tiny`` end to end from a freshly built bundle, in an environment that holds
only the packages of the GPU machine's image (plus what the bundle brings)."""

import glob
import importlib.metadata
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile

import pytest
import torch

from conftest import REPO, SHARED_DATA, VENV_BIN

sys.path.insert(0, os.path.join(REPO, 'tools', 'gpu'))
import bundle
import gpu_plans
import runbook

# one row of each agent and task, and through their needs both classifiers and the GoEmotions
# tagger with its thresholds, ED tags and patterns
TINY_ROWS = [
    'rashkin2019_empatheticdialogues/bert_zero_shot',
    'rashkin2019_empatheticdialogues/bert_emoprepend1',
    'metz2020_emotion_patterns/bert_p87',
    'majumder2020_mime/mime',
    'li_ethreed/ethreed',
]


def test_minilm_dir_follows_the_environment(tmp_path, monkeypatch):
    from parlai_empathy.files import offline_models

    monkeypatch.setenv('PARLAI_EMPATHY_MINILM_DIR', str(tmp_path))
    with pytest.raises(FileNotFoundError, match='PARLAI_EMPATHY_MINILM_DIR'):
        offline_models.minilm_dir()
    (tmp_path / 'config.json').write_text('{}')
    assert offline_models.minilm_dir() == str(tmp_path)
    assert offline_models.resolve_encoder('offline-minilm') == str(tmp_path)


def test_mpnet_dir_follows_the_environment(tmp_path, monkeypatch):
    """The GPU runbook joins all-mpnet-base-v2 from its pieces outside ParlAI's datapath and points
    ``offline-mpnet`` there (saved options keep the portable name)."""
    from parlai_empathy.files import offline_models

    monkeypatch.setenv('PARLAI_EMPATHY_MPNET_DIR', str(tmp_path))
    with pytest.raises(FileNotFoundError, match='PARLAI_EMPATHY_MPNET_DIR'):
        offline_models.mpnet_dir()
    (tmp_path / 'config.json').write_text('{}')
    assert offline_models.resolve_encoder('offline-mpnet') == str(tmp_path)
    assert runbook.mpnet_installed()


def test_a_glove_subset_gives_the_same_vectors(tmp_path, monkeypatch):
    from parlai_empathy.models import glove

    vocab = ['__null__', 'the', 'Happy', 'sad', "n't", 'qzxqzxnotaword']
    whole = glove.load_glove(vocab)
    assert glove.write_subset(['the', 'happy', 'sad', "n't"], str(tmp_path)) == 4
    monkeypatch.setenv('PARLAI_EMPATHY_GLOVE_DIR', str(tmp_path))
    part = glove.load_glove(vocab)
    assert torch.equal(whole[0], part[0]) and torch.equal(whole[1], part[1])
    monkeypatch.setenv('PARLAI_EMPATHY_GLOVE_DIR', str(tmp_path / 'nowhere'))
    with pytest.raises(FileNotFoundError, match='PARLAI_EMPATHY_GLOVE_DIR'):
        glove.load_glove(vocab)


def test_the_glove_cut_holds_every_word_both_tokenizers_make():
    """Every GloVe word that MIME's or ETHREED's tokenizer makes from ED text (the embedded sample)
    is in the bundle's cut, which is taken from the raw files without tokenizing."""
    import pandas as pd

    from parlai_empathy.data import ed_raw, ed_source
    from parlai_empathy.data.ethreed_text import ethreed_tokens
    from parlai_empathy.data.moel_text import moel_tokens
    from parlai_empathy.models import glove

    folder = ed_source.sample_dir()
    texts = [open(os.path.join(folder, f), encoding='utf-8').read() for f in bundle.ED_FILES]
    index = set(pd.read_parquet(glove._kumo_paths()[1]).iloc[:, 0])
    cut = bundle.ed_words(texts) & index
    needed = set()
    for name in bundle.ED_FILES:
        for conv in ed_raw.read_clean(os.path.join(folder, name))[0]:
            for text in [conv.situation] + [u.text for u in conv.utterances]:
                for token in moel_tokens(text) + ethreed_tokens(text):
                    needed.update(k for k in (token, token.lower()) if k in index)
    assert needed and needed <= cut, sorted(needed - cut)


def test_gpu_plans_follow_the_cpu_plans():
    """The gpu plans in table.json are what tools/gpu/gpu_plans.py derives from the cpu plans (after
    changing a cpu plan: python tools/gpu/gpu_plans.py --write), and they fit the 9-minute run."""
    assert gpu_plans.main([]) == 0
    times = gpu_plans.budgets(gpu_plans.cpu_rows(gpu_plans.load_specs(os.path.join(REPO, 'projects'))))
    assert all(budget == 0 or budget >= gpu_plans.MIN_BUDGET for _, budget in times.values())


def test_profiles_add_their_options_last():
    train = ['train_model', '-m', 'empathy/mime', '-bs', '64']
    assert runbook.with_profile(train, runbook.PROFILES['full']) == train
    tiny = runbook.with_profile(train, runbook.PROFILES['cpu-tiny'])
    assert tiny[:5] == train and '--latent-size' in tiny and tiny[tiny.index('--max-train-steps') + 1] == '2'
    assert runbook.with_profile(['empathy_tag_ed', '-mf', 'm'], runbook.PROFILES['smoke']) == [
        'empathy_tag_ed',
        '-mf',
        'm',
    ]


def test_session_train_args_go_to_the_named_rows_only(tmp_path):
    """GPU_TRAIN_ROWS: a session's --max-train-time for EmoPrepend-1 must not also cut the
    classifier it needs."""
    projects = os.path.join(REPO, 'projects')
    emoprepend = 'rashkin2019_empatheticdialogues/bert_emoprepend1'
    situation = 'rashkin2019_empatheticdialogues/ed32_situation'
    rows = runbook.select_rows(
        projects,
        str(tmp_path),
        [emoprepend],
        'full',
        runbook.PROFILES['full'],
        {emoprepend: ['--max-train-time', '200']},
    )
    assert set(rows) == {emoprepend, situation}
    train = {key: next(s.argv for s in row.plan.steps if s.argv[0] == 'train_model') for key, row in rows.items()}
    assert train[emoprepend][-2:] == ['--max-train-time', '200'] and rows[emoprepend].plan.profile == 'gpu+full'
    classifier = train[situation]
    assert classifier[len(classifier) - 1 - classifier[::-1].index('--max-train-time') + 1] == '90'
    assert rows[situation].plan.profile == 'gpu'


def test_ethreed_needs_no_classifier_row_on_the_gpu(tmp_path):
    """ETHREED's listener labels ship with the package (--listener-emotions ed32-utterance, its
    default): its rows start at once, without the utterance classifier's hours."""
    rows = runbook.select_rows(
        os.path.join(REPO, 'projects'),
        str(tmp_path),
        ['li_ethreed/ethreed'],
        'full',
        runbook.PROFILES['full'],
        {'li_ethreed/ethreed': ['--max-train-time', '200']},
    )
    assert set(rows) == {'li_ethreed/ethreed'}
    ethreed = next(s.argv for s in rows['li_ethreed/ethreed'].plan.steps if s.argv[0] == 'train_model')
    assert ethreed[-2:] == ['--max-train-time', '200'] and '--listener-emotions' not in ethreed
    # ETHREED's gpu plan validates once an epoch: its learning-rate milestones count validations
    assert '-vtim' not in ethreed and '-bs' not in ethreed  # and keeps the cpu plan's batch of 16


def test_rows_of_the_encoder_the_bundle_cannot_carry_are_left_out_unless_named(tmp_path, monkeypatch):
    """all-mpnet-base-v2 does not travel in the bundle: where it is not installed, the default
    selection leaves its rows out (instead of failing them); naming one still runs it."""
    projects = os.path.join(REPO, 'projects')
    monkeypatch.setattr(runbook, 'mpnet_installed', lambda: False)
    rows = runbook.select_rows(projects, str(tmp_path), [], 'full')
    assert 'rashkin2019_empatheticdialogues/mpnet_zero_shot' not in rows
    assert 'rashkin2019_empatheticdialogues/bert_zero_shot' in rows and 'majumder2020_mime/mime' in rows
    named = runbook.select_rows(projects, str(tmp_path), ['rashkin2019_empatheticdialogues/mpnet_zero_shot'], 'full')
    assert list(named) == ['rashkin2019_empatheticdialogues/mpnet_zero_shot']
    monkeypatch.setattr(runbook, 'mpnet_installed', lambda: True)
    assert 'rashkin2019_empatheticdialogues/mpnet_zero_shot' in runbook.select_rows(projects, str(tmp_path), [], 'full')


def test_the_limits_of_what_comes_back(tmp_path):
    (tmp_path / 'a').mkdir()
    (tmp_path / 'a' / 'b').mkdir()
    (tmp_path / 'a' / 'b' / 'c').mkdir()
    (tmp_path / 'a' / 'b' / 'ok.txt').write_text('x')
    assert runbook.check_out(str(tmp_path)) == []
    (tmp_path / 'a' / 'b' / 'c' / 'deep.txt').write_text('x')
    (tmp_path / 'bad name.txt').write_text('x')
    problems = ' '.join(runbook.check_out(str(tmp_path)))
    assert 'two folders down' in problems and 'bad name.txt' in problems


def test_a_model_travels_in_float16_pieces_and_comes_back_float32(tmp_path):
    """``mpnet_pieces.py`` (all-mpnet-base-v2's trip in pieces), here with MiniLM in 16 MiB pieces."""
    import mpnet_pieces
    from safetensors.torch import load_file

    from parlai_empathy.files.offline_models import minilm_dir

    manifest = mpnet_pieces.split(minilm_dir(), str(tmp_path / 'pieces'), piece_mib=16)
    assert len(manifest['pieces']) == 3 and manifest['max_abs_rounding'] < 1e-3
    there = tmp_path / 'there'
    there.mkdir()
    for folder in sorted((tmp_path / 'pieces').iterdir()):
        assert sum(f.stat().st_size for f in folder.iterdir()) <= 16 * 2**20 + 2**20
        for f in folder.iterdir():
            shutil.copy(f, there / f.name)
    back = load_file(os.path.join(mpnet_pieces.join(str(there), str(tmp_path / 'model')), 'model.safetensors'))
    original = load_file(os.path.join(minilm_dir(), 'model.safetensors'))
    assert back.keys() == original.keys()
    assert all(
        back[k].dtype == original[k].dtype and torch.equal(back[k], original[k].half().to(original[k].dtype))
        for k in original
        if original[k].is_floating_point()
    )
    assert (tmp_path / 'model' / 'vocab.txt').is_file()
    env = runbook.prepare_mpnet(str(there), str(tmp_path / 'scratch'))  # what run.sh's GPU_MPNET_PIECES does
    assert os.path.isfile(os.path.join(env['PARLAI_EMPATHY_MPNET_DIR'], 'model.safetensors'))
    with pytest.raises(FileNotFoundError, match='send every piece first'):
        runbook.prepare_mpnet(str(tmp_path / 'nothing'), str(tmp_path / 'scratch'))
    (there / 'model.safetensors.01').write_bytes(b'damaged')
    with pytest.raises(ValueError, match='damaged'):
        mpnet_pieces.join(str(there), str(tmp_path / 'again'))


# ----- the whole runbook on this CPU -------------------------------------------------------------------
def pypi_reachable() -> bool:
    try:
        socket.create_connection(('pypi.org', 443), timeout=10).close()
        return True
    except OSError:
        return False


def image_distributions():
    """This venv's distributions of the packages the GPU image has, with what they need here."""
    from packaging.requirements import Requirement

    installed = {bundle.normalized(d.metadata['Name']): d for d in importlib.metadata.distributions()}
    chosen, todo = {}, [n for n in bundle.image_packages() if n in installed]
    while todo:
        name = todo.pop()
        if name in chosen:
            continue
        chosen[name] = installed[name]
        for line in chosen[name].requires or []:
            req = Requirement(line)
            if (req.marker is None or req.marker.evaluate({'extra': ''})) and bundle.normalized(req.name) in installed:
                todo.append(bundle.normalized(req.name))
    return chosen.values()


def image_like_python(root) -> str:
    """A Python whose packages are only those of this venv that the GPU image also has (a view of
    symbolic links), as ``python3`` there: the wheels of the bundle must bring all the rest."""
    site = os.path.dirname(os.path.dirname(torch.__file__))
    view = os.path.join(root, 'view', 'site-packages')
    os.makedirs(view)
    for dist in image_distributions():
        for top in {str(f).split('/')[0] for f in dist.files or []} - {'..', '__pycache__'}:
            if os.path.exists(os.path.join(site, top)) and not os.path.exists(os.path.join(view, top)):
                os.symlink(os.path.join(site, top), os.path.join(view, top))
    python = os.path.join(root, 'image')
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', python], check=True)
    purelib = subprocess.run(
        [os.path.join(python, 'bin', 'python'), '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with open(os.path.join(purelib, '_image_view.pth'), 'w') as f:
        f.write(f'import site; site.addsitedir({view!r})\n')
    return os.path.join(python, 'bin', 'python')


def test_cpu_tiny_runs_the_runbook_end_to_end(tmp_path):
    if not os.path.isdir(os.path.join(SHARED_DATA, 'empatheticdialogues')) and not os.environ.get(
        'PARLAI_EMPATHY_ED_DIR'
    ):
        pytest.fail(f'test data not found: set PARLAI_EMPATHY_ED_DIR or put the shared data at {SHARED_DATA}')
    try:
        bundle.build(str(tmp_path / 'bundle'))
    except subprocess.CalledProcessError:
        if pypi_reachable():
            raise
        reason = 'PyPI (pypi.org:443) cannot be reached: the bundle cannot fetch the ParlAI wheel'
        print(f'\nSKIPPED test_cpu_tiny_runs_the_runbook_end_to_end: {reason}', file=sys.__stderr__)
        pytest.skip(reason)
    assert bundle.report(str(tmp_path / 'bundle')) <= bundle.LIMIT
    wheels = {os.path.basename(p).split('-')[0] for p in glob.glob(str(tmp_path / 'bundle' / 'wheels' / '*.whl'))}
    assert {'parlai', 'parlai_empathy', 'nltk', 'iopath', 'bert_score'} <= wheels

    out = tmp_path / 'out'
    env = dict(
        os.environ,
        OUT=str(out),
        GPU_BUNDLE=str(tmp_path / 'bundle'),
        GPU_SCRATCH=str(tmp_path / 'scratch'),
        GPU_PYTHON=image_like_python(str(tmp_path)),
        GPU_ROWS=','.join(TINY_ROWS),
        GPU_WEIGHTS='li_ethreed/ethreed',
    )
    for name in (
        'PARLAI_EMPATHY_ED_DIR',
        'PARLAI_EMPATHY_GOEMOTIONS_DIR',
        'PARLAI_EMPATHY_MINILM_DIR',
        'PARLAI_EMPATHY_GLOVE_DIR',
        'PARLAI_DATAPATH',
    ):
        env.pop(name, None)
    done = subprocess.run(
        [os.path.join(REPO, 'tools', 'gpu', 'run.sh'), 'cpu-tiny'],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-4000:]

    # what comes back: at most 8 files, each <= 16 MiB, 64 MiB in all
    assert runbook.check_out(str(out)) == []
    files = sorted(os.listdir(out))
    assert files == sorted(
        [
            'driver.log',
            'summary.json',
            'leaderboard.tar.gz',
            'li_ethreed.tar.gz',
            'majumder2020_mime.tar.gz',
            'metz2020_emotion_patterns.tar.gz',
            'rashkin2019_empatheticdialogues.tar.gz',
            'li_ethreed.ethreed.model.00',
        ]
    )
    summary = json.loads((out / 'summary.json').read_text())

    # the trained ETHREED comes back (float16 pieces) and chats through the real CLI
    import model_pieces

    model = model_pieces.join(
        str(out), 'li_ethreed.ethreed', str(tmp_path / 'ethreed'), summary['weights']['li_ethreed/ethreed']['sha256']
    )
    chat = subprocess.run(
        [os.path.join(VENV_BIN, 'parlai'), 'interactive', '-mf', model],
        input='i lost my job today\n[DONE]\n',
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PARLAI_DATAPATH=str(tmp_path / 'chat_data')),
    )
    assert chat.returncode == 0, chat.stdout[-3000:] + chat.stderr[-3000:]
    assert '[Ethreed]:' in chat.stdout, chat.stdout[-3000:]
    assert {row: info['status'] for row, info in summary['rows'].items()} == {row: 'ok' for row in summary['rows']}
    # the rows they need; ETHREED needs none (its listener labels ship with the package)
    assert set(TINY_ROWS) | {
        'rashkin2019_empatheticdialogues/ed32_situation',
        'metz2020_emotion_patterns/goemotions',
    } == set(summary['rows'])

    # the artifacts alone regenerate the tables, from the READMEs as the repository has them
    regen = tmp_path / 'regen'
    for path in glob.glob(str(out / '*.tar.gz')):
        with tarfile.open(path) as tar:
            tar.extractall(regen, filter='data')
    for project in {row.split('/')[0] for row in summary['rows']}:
        shutil.copy(os.path.join(REPO, 'projects', project, 'README.md'), regen / 'projects' / project / 'README.md')
        assert (regen / 'logs' / project).is_dir() and list((regen / 'trainstats' / project).glob('*.trainstats'))
    done = subprocess.run(
        [
            os.path.join(VENV_BIN, 'parlai'),
            'empathy_leaderboard',
            '--from-artifacts',
            regen / 'projects',
            '--outdir',
            regen / 'board',
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    board = json.loads((regen / 'board' / 'results.json').read_text())
    # the board holds this run's rows, and the rows whose evidence the repository already commits
    # (the archives carry a copy of projects/ in which only this run's rows were replaced)
    committed = {
        f'{p}/{r}'
        for p in os.listdir(os.path.join(REPO, 'projects'))
        if os.path.isdir(os.path.join(REPO, 'projects', p, 'runs'))
        for r in os.listdir(os.path.join(REPO, 'projects', p, 'runs'))
    }
    names = {r['name'] for r in board['results']}
    assert set(summary['rows']) <= names and names - set(summary['rows']) <= committed
    for row in summary['rows']:
        project, entry = row.split('/')
        readme = (regen / 'projects' / project / 'README.md').read_text()
        meta = json.loads((regen / 'projects' / project / 'runs' / entry / 'meta.json').read_text())
        assert meta['plan']['profile'] == 'gpu+cpu-tiny'
        assert re.search(rf'\[runs/{entry}\]\(runs/{entry}\)', readme), f'{row} is not in the regenerated table'
