"""Opening model files never runs code from them, and bad ones are named with a clear error.

Real files throughout: tiny trained models of every agent (``tiny_models``), and copies of one
of them made truncated, empty, foreign, or carrying a pickled object that would create a marker
folder if it were ever unpickled.
"""
import os
import pickle
import shutil
import subprocess

import pytest
import torch

from parlai_empathy.safe_loading import ModelFileError, UnsafeModelFile, load_checkpoint
from tiny_models import AGENTS, PARLAI, cached_tiny_model


class MakesMarker:
    """Unpickling this calls os.mkdir(marker): proof that code from the file ran."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


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
    with pytest.raises(UnsafeModelFile) as err:
        open_agent(model_file)
    message = str(err.value)
    assert model_file in message and 'arbitrary unpickling' in message and 'mkdir' in message
    assert not os.path.exists(marker)
    # the same through the stock CLI: a clear message, no code run
    done = subprocess.run([PARLAI, 'interactive', '-mf', model_file], input='hello\n[EXIT]\n',
                          capture_output=True, text=True, cwd=tmp_path, timeout=3600)
    assert done.returncode != 0
    assert 'was refused: loading it needs arbitrary unpickling' in done.stderr
    assert not os.path.exists(marker)


def test_a_plain_pickle_is_refused(mime, tmp_path):
    model_file = copy_model(mime, tmp_path / 'pickled')
    marker = str(tmp_path / 'code-ran')
    with open(model_file, 'wb') as f:
        pickle.dump({'model': MakesMarker(marker)}, f)
    with pytest.raises(UnsafeModelFile, match='plain pickle'):
        open_agent(model_file)
    assert not os.path.exists(marker)


@pytest.mark.parametrize('damage, expected', [
    ('truncated', 'truncated or corrupt PyTorch checkpoint'),
    ('empty', 'is empty'),
    ('text', 'is not a PyTorch checkpoint'),
    ('bare state dict', 'bare state dict'),
])
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
    with pytest.raises(ModelFileError) as err:
        open_agent(model_file)
    assert model_file in str(err.value) and expected in str(err.value)


def test_weights_of_another_agent_name_the_file(tmp_path_factory, tmp_path):
    """Multi-TR's weights in a MIME folder: a clear mismatch, naming the file."""
    model_file = copy_model(cached_tiny_model(tmp_path_factory, 'mime'), tmp_path / 'foreign')
    shutil.copy(cached_tiny_model(tmp_path_factory, 'multitask_transformer'), model_file)
    with pytest.raises(ModelFileError) as err:
        open_agent(model_file)
    assert model_file in str(err.value) and 'do not fit the empathy/mime model' in str(err.value)


def test_a_pickled_opt_file_is_refused_and_never_run(mime, tmp_path):
    model_file = copy_model(mime, tmp_path / 'pickled_opt')
    marker = str(tmp_path / 'code-ran')
    with open(model_file + '.opt', 'wb') as f:
        pickle.dump({'model': 'empathy/mime', 'hook': MakesMarker(marker)}, f)
    with pytest.raises(UnsafeModelFile) as err:
        open_agent(model_file)
    assert model_file + '.opt' in str(err.value)
    assert not os.path.exists(marker)


def test_a_truncated_opt_file_names_file_line_and_column(mime, tmp_path):
    model_file = copy_model(mime, tmp_path / 'broken_opt')
    with open(model_file + '.opt') as f:
        text = f.read()
    with open(model_file + '.opt', 'w') as f:
        f.write(text[: len(text) // 2])
    with pytest.raises(ModelFileError) as err:
        open_agent(model_file)
    message = str(err.value)
    assert message.startswith(model_file + '.opt, line ') and 'column' in message
