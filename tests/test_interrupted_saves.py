"""A save interrupted half-way (an exception here; a SIGKILL in ``test_agents_mime``) leaves the
last complete file at its name and no temporary file behind.

ParlAI writes a model's ``.opt``, its dictionary and the loop's ``.trainstats`` in place; a run
killed while writing one could not resume, and a half-written dictionary counted as built.
"""

import json
import os

import pytest

from parlai_empathy.files.cache_lock import atomic_save_as, atomic_save_dir


class Interrupted(Exception):
    pass


def _half_then_fail(name, text='{"complete": false'):
    with open(name, 'w') as f:
        f.write(text)
    raise Interrupted


def test_an_interrupted_save_as_keeps_the_complete_file_and_its_sidecars(tmp_path):
    path = str(tmp_path / 'model.dict')

    def save(name, version):
        for suffix in ('', '.opt'):
            with open(name + suffix, 'w') as f:
                json.dump({'version': version, 'file': suffix}, f)

    atomic_save_as(path, lambda name: save(name, 1), sidecars=('.opt', '.codecs'))
    assert sorted(os.listdir(tmp_path)) == ['model.dict', 'model.dict.opt']  # no .codecs: none was written

    def interrupted(name):
        save(name, 2)
        _half_then_fail(name + '.opt')

    with pytest.raises(Interrupted):
        atomic_save_as(path, interrupted, sidecars=('.opt',))
    assert sorted(os.listdir(tmp_path)) == ['model.dict', 'model.dict.opt']
    for suffix in ('', '.opt'):
        with open(path + suffix) as f:
            assert json.load(f) == {'version': 1, 'file': suffix}

    atomic_save_as(path, lambda name: save(name, 3), sidecars=('.opt',))
    with open(path + '.opt') as f:
        assert json.load(f)['version'] == 3


def test_an_interrupted_folder_save_keeps_every_file_whole(tmp_path):
    folder = str(tmp_path / 'model.hf')

    def save(target, version, fail_after=None):
        os.makedirs(os.path.join(target, 'sub'), exist_ok=True)
        for n, name in enumerate(['config.json', 'tokenizer.json', 'sub/vocab.json']):
            if n == fail_after:
                _half_then_fail(os.path.join(target, name))
            with open(os.path.join(target, name), 'w') as f:
                json.dump({'version': version}, f)

    atomic_save_dir(folder, lambda target: save(target, 1))
    with pytest.raises(Interrupted):
        atomic_save_dir(folder, lambda target: save(target, 2, fail_after=1))
    assert os.listdir(tmp_path) == ['model.hf']  # the temporary folder is gone
    for name in ['config.json', 'tokenizer.json', 'sub/vocab.json']:
        with open(os.path.join(folder, name)) as f:
            assert json.load(f) == {'version': 1}


def _moel_dictionary(tmp_path, words):
    from parlai.core.params import ParlaiParser

    from parlai_empathy.agents.generator_common import MoelDictionaryAgent

    parser = ParlaiParser(False, False)
    MoelDictionaryAgent.add_cmdline_args(parser, partial_opt=None)
    opt = parser.parse_args(['--dict-tokenizer', 'moel', '--dict-file', str(tmp_path / 'model.dict')])
    dictionary = MoelDictionaryAgent(opt)
    dictionary.add_to_dict(words)
    return dictionary


def test_an_interrupted_dictionary_save_keeps_the_last_dictionary(tmp_path, monkeypatch):
    """ParlAI's ``DictionaryAgent.save`` opens the file for writing, so an interruption half-way
    left a dictionary of the first words only, which ``build_dict`` and ``TorchAgent.save`` then
    take as built."""
    import parlai.core.dict as parlai_dict

    path = tmp_path / 'model.dict'
    _moel_dictionary(tmp_path, ['sad', 'happy']).save(str(path))
    before = path.read_text(encoding='utf-8')
    assert 'happy\t1' in before and (tmp_path / 'model.dict.opt').is_file()

    written = []
    real_escape = parlai_dict.escape

    def escape_then_fail(token):
        written.append(token)
        if len(written) == 3:
            raise Interrupted
        return real_escape(token)

    monkeypatch.setattr(parlai_dict, 'escape', escape_then_fail)
    with pytest.raises(Interrupted):
        _moel_dictionary(tmp_path, ['sad', 'happy', 'lonely', 'proud']).save(str(path))
    assert written and path.read_text(encoding='utf-8') == before
    assert sorted(os.listdir(tmp_path)) == ['model.dict', 'model.dict.opt']


def test_the_ranker_dictionary_file_is_written_whole(tmp_path):
    from parlai_empathy.agents.hf_dictionary import HFTokenizerDictionary

    dictionary = HFTokenizerDictionary.__new__(HFTokenizerDictionary)
    dictionary.source = 'sentence-transformers/all-MiniLM-L6-v2'
    path = tmp_path / 'sub' / 'model.dict'
    dictionary.save(str(path))
    assert path.read_text(encoding='utf-8') == '# HuggingFace tokenizer of sentence-transformers/all-MiniLM-L6-v2\n'
    assert os.listdir(path.parent) == ['model.dict']


def test_a_killed_saves_temporary_files_are_removed_and_nothing_else(tmp_path):
    import socket
    import subprocess
    import sys

    from parlai_empathy.files.cache_lock import remove_dead_temporaries

    host = socket.gethostname()
    dead = subprocess.Popen([sys.executable, '-c', 'pass'])
    dead.wait()
    names = {
        f'model.checkpoint.opt.tmp-{host}-{dead.pid}': False,  # left by a killed run: removed
        f'model.checkpoint.tmp-{host}-{dead.pid}.trainstats': False,
        f'model.checkpoint.opt.tmp-another-host-{dead.pid}': True,  # cannot tell: kept
        f'model.opt.tmp-{host}-{os.getppid()}': True,  # a live process's
        f'model.opt.tmp-{host}-{os.getpid()}': True,  # this process's
        f'other.opt.tmp-{host}-{dead.pid}': True,  # another model's
        'model.checkpoint.opt': True,
    }
    for name in names:
        (tmp_path / name).write_text('{')
    (tmp_path / f'model.checkpoint.hf.tmp-{host}-{dead.pid}').mkdir()
    remove_dead_temporaries(str(tmp_path / 'model'))
    assert sorted(os.listdir(tmp_path)) == sorted(name for name, kept in names.items() if kept)
