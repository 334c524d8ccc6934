"""The wheel lands in ParlAI's namespaces without owning any of ParlAI's files."""

import os
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO, install_lock

OURS = [
    'parlai/tasks/empathy_ed/agents.py',
    'parlai/tasks/empathy_ed_clean/agents.py',
    'parlai/agents/empathy/__init__.py',
    'parlai/zoo/empathy/__init__.py',
    'parlai/scripts/empathy_clean_report.py',
    'parlai/opt_presets/empathy/mime.opt',
    'parlai_empathy/integration/compat.py',
    'parlai_empathy/data/sample/train.csv',
    # the plans and the committed rows' times: `parlai empathy_reproduce` without a clone
    'parlai_empathy/projects/majumder2020_mime/table.json',
    'parlai_empathy/projects/majumder2020_mime/runs/mime/meta.json',
    'parlai_empathy_compat.pth',
]
PARLAIS_OWN = [
    'parlai/__init__.py',
    'parlai/tasks/__init__.py',
    'parlai/agents/__init__.py',
    'parlai/scripts/__init__.py',
    'parlai/zoo/__init__.py',
    'parlai/opt_presets/__init__.py',
]


@pytest.fixture(scope='module')
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp('wheel')
    with install_lock():
        subprocess.run(
            [
                sys.executable,
                '-m',
                'pip',
                'wheel',
                '--quiet',
                '--no-deps',
                '--no-build-isolation',
                '-w',
                str(out),
                REPO,
            ],
            check=True,
        )
    (path,) = out.glob('parlai_empathy-*.whl')
    return path


def test_wheel_ships_our_leaves_and_none_of_parlais_init_files(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for name in OURS:
        assert name in names
    for name in PARLAIS_OWN:
        assert name not in names
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith('METADATA'))).decode()
    requires = [line for line in metadata.splitlines() if line.startswith('Requires-Dist:')]
    assert requires and not any(line.split()[1].lower().startswith('parlai') for line in requires)


def test_uninstall_removes_only_our_files(wheel, tmp_path):
    venv = tmp_path / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(venv)], check=True)
    python = venv / 'bin' / 'python'
    site = subprocess.run(
        [str(python), '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # a stand-in for an installed ParlAI: its own __init__ files and a stock task
    stock = PARLAIS_OWN + ['parlai/tasks/empathetic_dialogues/agents.py', 'parlai/agents/transformer/transformer.py']
    for name in stock:
        path = os.path.join(site, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w') as f:
            f.write('# ParlAI\n')
    pip = [sys.executable, '-m', 'pip', '--python', str(python)]
    subprocess.run(pip + ['install', '--quiet', '--no-deps', str(wheel)], check=True)
    for name in OURS:
        assert os.path.exists(os.path.join(site, name)), name
    subprocess.run(pip + ['uninstall', '--quiet', '--yes', 'parlai-empathy'], check=True)
    for name in stock:
        assert open(os.path.join(site, name)).read() == '# ParlAI\n', name
    for name in OURS:
        assert not os.path.exists(os.path.join(site, name)), name
    assert not os.path.exists(os.path.join(site, 'parlai', 'tasks', 'empathy_ed'))
    assert not os.path.exists(os.path.join(site, 'parlai_empathy'))


def test_opt_presets_resolve_by_plain_name():
    from parlai.scripts.train_model import setup_args

    opt = setup_args().parse_args(['-o', 'empathy/mime', '-t', 'empathy_ed_clean'])
    assert opt['model'] == 'empathy/mime' and opt['batchsize'] == 16
    # the reference code's Noam schedule: warm-up to d_model^-0.5 * 8000^-0.5 = 6.45e-4
    assert (opt['lr_scheduler'], opt['warmup_updates']) == ('invsqrt', 8000)
    assert opt['learningrate'] == pytest.approx(0.000645, rel=1e-3)
