"""A Hugging Face hub name that cannot be loaded (not cached, hub unreachable) stops the real
``parlai train_model`` at once with one paragraph naming the model and the offline choices,
instead of the hub library's minute of retries per file and a traceback; a cached one loads
from the cache without retrying the hub.
"""

import os
import socket
import subprocess
import threading

import pytest

from conftest import VENV_BIN
from parlai_empathy.files import offline_models
from tiny_models import COMMON

PARLAI = os.path.join(VENV_BIN, 'parlai')


class ClosingServer:
    """Plays an unreachable hub on 127.0.0.1: counts each connection and closes it unanswered."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(16)
        self.url = f'http://127.0.0.1:{self.sock.getsockname()[1]}'
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def stop(self):
        self.sock.close()


def train(tmp_path, *args, hub=None):
    """``parlai train_model`` with an empty hub cache; ``hub``: an endpoint to use instead of the
    offline switch (HF_HUB_OFFLINE) that every other test sets."""
    env = {k: v for k, v in os.environ.items() if k not in offline_models.OFFLINE_ENVS}
    env['HF_HOME'] = str(tmp_path / 'hf_home')
    if hub:
        env['HF_ENDPOINT'] = hub
    else:
        env['HF_HUB_OFFLINE'] = '1'
    argv = [PARLAI, 'train_model', '-mf', tmp_path / 'model', *COMMON, *args]
    return subprocess.run([str(a) for a in argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)


def test_the_ranker_offline_names_its_hub_model_and_the_offline_choices(tmp_path):
    done = train(tmp_path, '-t', 'empathy_ed_clean', '-m', 'empathy/bert_ranker')
    assert done.returncode == 1, done.stderr[-3000:]
    assert 'Traceback' not in done.stderr and 'Retrying' not in done.stdout + done.stderr, done.stderr[-3000:]
    message = done.stderr.strip().splitlines()[-1]  # one paragraph, the last thing printed
    assert message.startswith(
        "--bert-model 'bert-base-cased' is a Hugging Face hub model that is not in the "
        'local cache, and the hub cannot be reached: HF_HUB_OFFLINE is set.'
    ), message
    for choice in ('--bert-model offline-minilm', '--bert-model offline-mpnet', '--bert-model DIR'):
        assert choice in message


def test_an_unreachable_hub_is_asked_once_not_retried(tmp_path):
    hub = ClosingServer()
    try:
        done = train(
            tmp_path,
            '-t',
            'empathy_ed_emotion',
            '-m',
            'empathy/emotion_classifier',
            '--encoder',
            'someone/some-encoder',
            hub=hub.url,
        )
    finally:
        hub.stop()
    assert done.returncode == 1, done.stderr[-3000:]
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith(
        "--encoder 'someone/some-encoder' is a Hugging Face hub model that is not in the "
        f'local cache, and the hub cannot be reached: {hub.url} did not answer'
    ), message
    assert '--encoder offline-minilm' in message and 'Traceback' not in done.stderr
    assert hub.connections == 1  # one look, no retries


def test_a_cached_hub_model_loads_from_the_cache_when_the_hub_is_unreachable(tmp_path):
    """The cache layout the hub library writes (models--ORG--NAME/snapshots/REV, refs/main)."""
    from test_emotions_support import make_tiny_bert

    snapshot = tmp_path / 'hf_home' / 'hub' / 'models--someone--tiny-bert' / 'snapshots' / ('0' * 40)
    make_tiny_bert(str(snapshot))
    (snapshot.parent.parent / 'refs').mkdir()
    (snapshot.parent.parent / 'refs' / 'main').write_text('0' * 40)
    hub = ClosingServer()
    try:
        done = train(
            tmp_path,
            '-t',
            'empathy_ed_clean',
            '-m',
            'empathy/bert_ranker',
            '--bert-model',
            'someone/tiny-bert',
            '--pooling',
            'mean',
            '-vmt',
            'loss',
            '-vmm',
            'min',
            '--eval-candidates',
            'batch',
            '--pool-ed-datapath',
            'sample',
            hub=hub.url,
        )
    finally:
        hub.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / 'model').is_file()
    assert hub.connections == 1  # one look for the whole run (dictionary, model, evaluations), no retries


def test_bertscore_offline_names_its_choices(monkeypatch):
    from parlai_empathy.metrics.bertscore import BertScore, BertScoreConfig

    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    with pytest.raises(offline_models.HubModelUnavailable) as err:
        BertScore(BertScoreConfig(model='someone/not-cached'))
    assert str(err.value).startswith("--bertscore-model 'someone/not-cached' is a Hugging Face hub model")
    assert '--bertscore-model minilm' in str(err.value) and '--bertscore-model none' in str(err.value)


def test_local_folders_and_offline_names_never_ask_the_hub(tmp_path, monkeypatch):
    monkeypatch.setattr(offline_models, 'hub_unreachable', lambda name: pytest.fail(f'asked the hub for {name}'))
    assert offline_models.resolve_encoder(str(tmp_path)) == str(tmp_path)
    assert offline_models.resolve_encoder('./not-made-yet') == './not-made-yet'
    assert os.path.isdir(offline_models.resolve_encoder(offline_models.OFFLINE_MINILM))
