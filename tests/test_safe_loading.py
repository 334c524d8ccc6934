"""Opening model files never runs code from them, and bad ones are named with a clear error.

Real files throughout: tiny trained models of every agent (``tiny_models``), and copies of one
of them made truncated, empty, foreign, or carrying a pickled object that would create a marker
folder if it were ever unpickled; and the trust boundary: a folder whose ``.opt`` names another
agent (a stock ParlAI one, or any module) is refused by every command of ours before anything it
names is imported, unless the user passes ``--trust-model-file``.
"""

import json
import os
import pickle
import shutil
import subprocess
import sys

import pytest
import torch

from parlai_empathy.integration.safe_loading import (
    ModelFileError,
    ModelFileExit,
    UnsafeModelFile,
    UntrustedModelFile,
    check_model_trust,
    load_checkpoint,
)
from tiny_models import AGENTS, PARLAI, STOCK_GENERATOR, MakesMarker, cached_tiny_model, hostile_stock_model


@pytest.fixture(scope='module')
def mime(tmp_path_factory):
    return cached_tiny_model(tmp_path_factory, 'mime')


def copy_model(model_file, folder):
    """The model's folder copied to ``folder``; returns the copy's model file."""
    shutil.copytree(os.path.dirname(model_file), folder)
    return os.path.join(folder, 'model')


def open_agent(model_file):
    from parlai.core.agents import create_agent_from_model_file

    return create_agent_from_model_file(model_file, {'interactive_mode': True})


@pytest.mark.parametrize('agent', AGENTS)
def test_every_agents_checkpoint_loads_weights_only(tmp_path_factory, agent):
    """What ParlAI saves for each agent (weights, optimizer, scheduler) needs no unpickling."""
    states = load_checkpoint(cached_tiny_model(tmp_path_factory, agent))
    assert states['model'] and all(torch.is_tensor(v) for v in states['model'].values())
    assert 'optimizer' in states


def test_code_in_a_model_file_is_refused_and_never_run(mime, tmp_path):
    model_file = copy_model(mime, tmp_path / 'evil')
    marker = str(tmp_path / 'code-ran')
    states = load_checkpoint(mime)  # weights only, plus the numpy scalars of ParlAI's scheduler state
    states['extra'] = MakesMarker(marker)
    torch.save(states, model_file)
    with pytest.raises(ModelFileExit) as err:
        open_agent(model_file)
    assert isinstance(err.value.error, UnsafeModelFile)
    message = str(err.value)
    assert model_file in message and 'arbitrary unpickling' in message and 'mkdir' in message
    assert not os.path.exists(marker)
    # the same through the stock CLI: a clear message, no code run
    done = subprocess.run(
        [PARLAI, 'interactive', '-mf', model_file],
        input='hello\n[EXIT]\n',
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=3600,
    )
    assert done.returncode != 0
    assert 'was refused: loading it needs arbitrary unpickling' in done.stderr
    assert not os.path.exists(marker)


def test_a_plain_pickle_is_refused(mime, tmp_path):
    model_file = copy_model(mime, tmp_path / 'pickled')
    marker = str(tmp_path / 'code-ran')
    with open(model_file, 'wb') as f:
        pickle.dump({'model': MakesMarker(marker)}, f)
    with pytest.raises(ModelFileExit, match='plain pickle') as err:
        open_agent(model_file)
    assert isinstance(err.value.error, UnsafeModelFile)
    assert not os.path.exists(marker)


@pytest.mark.parametrize(
    'damage, expected',
    [
        ('truncated', 'truncated or corrupt PyTorch checkpoint'),
        ('empty', 'is empty'),
        ('text', 'is not a PyTorch checkpoint'),
        ('bare state dict', 'bare state dict'),
    ],
)
def test_damaged_or_foreign_files_name_the_file(mime, tmp_path, damage, expected):
    model_file = copy_model(mime, tmp_path / 'damaged')
    with open(mime, 'rb') as f:
        data = f.read()
    if damage == 'truncated':  # an interrupted download or copy
        with open(model_file, 'wb') as f:
            f.write(data[: len(data) // 2])
    elif damage == 'empty':
        open(model_file, 'wb').close()
    elif damage == 'text':
        with open(model_file, 'w') as f:
            f.write('version https://git-lfs.github.com/spec/v1\noid sha256:0123\nsize 2661287\n')
    else:  # the weights alone, e.g. exported for another framework
        torch.save(load_checkpoint(mime)['model'], model_file)
    with pytest.raises(ModelFileExit) as err:  # ends the command with the one line
        open_agent(model_file)
    assert model_file in str(err.value) and expected in str(err.value)


def test_weights_of_another_agent_name_the_file(tmp_path_factory, tmp_path):
    """Multi-TR's weights in a MIME folder: a clear mismatch, naming the file."""
    model_file = copy_model(cached_tiny_model(tmp_path_factory, 'mime'), tmp_path / 'foreign')
    shutil.copy(cached_tiny_model(tmp_path_factory, 'multitask_transformer'), model_file)
    with pytest.raises(ModelFileExit) as err:  # ends the command with the one line
        open_agent(model_file)
    assert model_file in str(err.value) and 'do not fit the empathy/mime model' in str(err.value)


def test_a_pickled_opt_file_is_refused_and_never_run(mime, tmp_path):
    model_file = copy_model(mime, tmp_path / 'pickled_opt')
    marker = str(tmp_path / 'code-ran')
    with open(model_file + '.opt', 'wb') as f:
        pickle.dump({'model': 'empathy/mime', 'hook': MakesMarker(marker)}, f)
    with pytest.raises(ModelFileExit) as err:  # a SystemExit: the command ends with the one line
        open_agent(model_file)
    assert isinstance(err.value.error, UnsafeModelFile)
    assert model_file + '.opt' in str(err.value)
    assert not os.path.exists(marker)


def test_a_truncated_opt_file_names_file_line_and_column(mime, tmp_path):
    model_file = copy_model(mime, tmp_path / 'broken_opt')
    with open(model_file + '.opt') as f:
        text = f.read()
    with open(model_file + '.opt', 'w') as f:
        f.write(text[: len(text) // 2])
    with pytest.raises(ModelFileExit) as err:
        open_agent(model_file)
    message = str(err.value)
    assert message.startswith(model_file + '.opt, line ') and 'column' in message


# ----- the trust boundary: the .opt chooses the agent, and so the code, that opens a folder --------
def run(*args, env=None, cwd=None, timeout=3600):
    return subprocess.run(
        [PARLAI] + [str(a) for a in args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=dict(os.environ, HF_HUB_OFFLINE='1', **(env or {})),
    )


def assert_refused(done, marker, agent):
    """Refused with the one message (file, agent, the flag), no traceback, and nothing ran."""
    assert done.returncode != 0, done.stdout[-2000:]
    assert f'field "model" names \'{agent}\', which is not an agent of parlai-empathy' in done.stderr, done.stderr[
        -3000:
    ]
    assert '--trust-model-file' in done.stderr and 'Traceback' not in done.stderr, done.stderr[-3000:]
    assert not os.path.exists(marker), 'code from the model file ran'


def commands(model_file, tmp_path):
    """Every command of ours that opens a model file, pointed at ``model_file``."""
    return {
        'empathy_package_model': [
            'empathy_package_model',
            '-mf',
            model_file,
            '--name',
            'x',
            '--outdir',
            tmp_path / 'out',
        ],
        'empathy_leaderboard': [
            'empathy_leaderboard',
            '--entries',
            f'x={model_file}',
            '--ed-datapath',
            'sample',
            '--outdir',
            tmp_path / 'lb',
            '--bertscore-model',
            'none',
            '--progress',
            'false',
        ],
        'empathy_init_model': [
            'empathy_init_model',
            *STOCK_GENERATOR,
            '--init-model',
            model_file,
            '-mf',
            tmp_path / 'new' / 'model',
        ],
        'empathy_tag_ed': ['empathy_tag_ed', '-mf', model_file, '--ed-datapath', 'sample'],
        # a chat that opened the model would serve until killed: the timeout below fails the test
        'empathy_chat': ['empathy_chat', '-mf', model_file, '--port', '0'],
    }


@pytest.fixture(scope='module')
def hostile_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp('hostile')
    return hostile_stock_model(root / 'stock', root / 'code-ran'), str(root / 'code-ran')


@pytest.mark.parametrize(
    'command', ['empathy_package_model', 'empathy_leaderboard', 'empathy_init_model', 'empathy_chat']
)
def test_a_stock_agents_checkpoint_is_never_unpickled_by_our_commands(hostile_folder, tmp_path, command):
    """A stock transformer/generator folder whose checkpoint runs code when ParlAI's TorchAgent.load
    unpickles it: each command refuses it unopened (--init-model: the stock -m agent would open it)."""
    model_file, marker = hostile_folder
    done = run(*commands(model_file, tmp_path)[command], cwd=tmp_path, timeout=600)
    if command == 'empathy_init_model':  # the agent comes from -m here, not from a .opt
        assert done.returncode != 0 and not os.path.exists(marker), done.stderr[-3000:]
        assert f'--init-model {model_file} was not opened' in done.stderr, done.stderr[-3000:]
        assert "-m 'transformer/generator'" in done.stderr and '--trust-model-file' in done.stderr
        assert not (tmp_path / 'new' / 'model').exists()
    else:
        assert_refused(done, marker, 'transformer/generator')
        assert f'{model_file}.opt, line ' in done.stderr
    assert not (tmp_path / 'out').exists() and not (tmp_path / 'lb').exists()


def test_the_chat_api_refuses_a_stock_agents_folder_unopened(hostile_folder):
    """ChatModel.load, the chat's Python entry point (no parser in front of it), checks too."""
    from parlai_empathy.serving.chat import ChatModel

    model_file, marker = hostile_folder
    with pytest.raises(UntrustedModelFile, match="names 'transformer/generator'"):
        ChatModel.load(model_file)
    assert not os.path.exists(marker)


@pytest.mark.parametrize(
    'command', ['empathy_package_model', 'empathy_leaderboard', 'empathy_tag_ed', 'empathy_init_model', 'empathy_chat']
)
def test_an_opt_naming_any_module_is_refused_without_importing_it(tmp_path, command):
    """ParlAI imports whatever module ``model`` names (while it parses -mf, before the command
    runs): a module on the path that runs code at import is never imported."""
    modules, marker = tmp_path / 'modules', tmp_path / 'imported'
    modules.mkdir()
    (modules / 'sideeffect.py').write_text(f'import os\nos.mkdir({str(marker)!r})\nclass Agent: pass\n')
    folder = tmp_path / 'folder'
    folder.mkdir()
    (folder / 'model.opt').write_text(json.dumps({'model': 'sideeffect:Agent'}, indent=4))
    (folder / 'model').write_bytes(b'')
    model_file = folder / 'model'
    argv = commands(model_file, tmp_path)[command]
    if command == 'empathy_init_model':  # -mf whose .opt exists: ParlAI would load its agent
        argv = ['empathy_init_model', '-mf', model_file]
    done = run(*argv, cwd=tmp_path, env={'PYTHONPATH': str(modules)}, timeout=600)
    assert_refused(done, marker, 'sideeffect:Agent')
    # the same check in-process, without ParlAI's loader
    with pytest.raises(UntrustedModelFile):
        check_model_trust(str(model_file))
    assert 'sideeffect' not in sys.modules and not marker.exists()


def test_missing_or_broken_opt_files_are_named_with_line_and_field(tmp_path):
    model_file = tmp_path / 'model'
    with pytest.raises(ModelFileError, match=f'{tmp_path}/model.opt: no such options file'):
        check_model_trust(str(model_file))
    cases = [
        (
            '{"model": "empathy/mime",\n "x": ',
            'line 2: not valid JSON for an options file (Expecting value at column 7)',
        ),
        ('["empathy/mime"]', 'line 1: not an options file (a JSON list'),
        ('{\n  "task": "x",\n  "model": null\n}', 'line 3: field "model": missing or not an agent name'),
        ('{"task": "x"}', 'line 1: field "model": missing'),
        ('[' * 100_000, 'line 1: nested deeper than the cap of 64 (PARLAI_EMPATHY_CAP_JSON_DEPTH) levels'),
    ]
    for text, expected in cases:
        (tmp_path / 'model.opt').write_text(text)
        with pytest.raises(ModelFileError) as err:
            check_model_trust(str(model_file))
        assert str(err.value).startswith(f'{model_file}.opt, ') and expected in str(err.value), str(err.value)
    (tmp_path / 'model.opt').write_bytes(b'\x80\x04\x95 a pickle')
    with pytest.raises(UnsafeModelFile, match='not a UTF-8 JSON options file'):
        check_model_trust(str(model_file))


def test_our_agents_pass_in_any_spelling_and_the_list_is_what_exists(tmp_path):
    from parlai_empathy.integration import safe_loading

    ours = safe_loading.empathy_agents()
    # the modules of agents/empathy/, no hand list; hf_lm wraps a Hugging Face model, so it has no tiny model
    assert ours == sorted(f'empathy/{a}' for a in AGENTS + ('hf_lm',))
    assert safe_loading.our_agent('parlai_empathy.agents.bert_ranker:BertRankerAgent') == 'empathy/bert_ranker'
    assert safe_loading.our_agent('parlai.agents.empathy.mime:MimeAgent') == 'empathy/mime'
    for other in (
        'transformer/generator',
        'empathy/safety',
        'empathy/mime/x',
        'parlai_empathy.agents.safety:X',
        'os:system',
        'empathy',
        None,
        3,
    ):
        assert safe_loading.our_agent(other) is None, other
    (tmp_path / 'model.opt').write_text(json.dumps({'model': 'transformer/generator'}))
    assert check_model_trust(str(tmp_path / 'model'), trust=True) == 'transformer/generator'


def test_trust_model_file_opens_a_benign_stock_model(tmp_path):
    """The opt-in: an untrusted stock model (here an untrained one our init command saves) is
    refused by default and evaluated with --trust-model-file."""
    from parlai_empathy import leaderboard

    model_file = tmp_path / 'stock' / 'model'
    done = run('empathy_init_model', *STOCK_GENERATOR, '-mf', model_file, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    with pytest.raises(UntrustedModelFile, match="names 'transformer/generator'.*pass --trust-model-file"):
        leaderboard.model_kind(str(model_file))
    assert leaderboard.model_kind(str(model_file), trust=True) == 'generator'
