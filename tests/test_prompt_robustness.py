"""Every agent at the real ``parlai interactive`` prompt, with the input people actually type.

One test per agent (a tiny trained model each, see ``tiny_models``), all from one mixin: an empty
line, invalid UTF-8, emoji and a 100,000-character message are piped into the stock CLI; each must
get an answer or a clear refusal, never a traceback, and the session must end normally.
"""
import os
import subprocess

from tiny_models import PARLAI, cached_tiny_model

HUNDRED_THOUSAND = ('so sad and lonely today ' * 5000)[:100_000]
LINES = [
    ('empty', b''),
    ('invalid UTF-8', b'my exam went \xff\xfe badly \xc3('),
    ('emoji', 'I got a puppy today \U0001F436\U0001F60D\u2764\ufe0f'.encode('utf-8')),
    ('100,000 characters', HUNDRED_THOUSAND.encode('utf-8')),
]


class PromptRobustness:
    """Mixin: ``agent`` is the ``empathy/<agent>`` under test, ``speaker`` how ParlAI names its turns."""

    agent = None
    speaker = None

    def test_answers_every_kind_of_input(self, tmp_path_factory, tmp_path):
        model_file = cached_tiny_model(tmp_path_factory, self.agent)
        stdin = b'\n'.join(line for _, line in LINES) + b'\n[EXIT]\n'
        # raw bytes on stdin, as a terminal or a pipe delivers them
        done = subprocess.run([PARLAI, 'interactive', '-mf', model_file], input=stdin, capture_output=True,
                              cwd=tmp_path, timeout=3600, env=dict(os.environ, HF_HUB_OFFLINE='1'))
        stdout = done.stdout.decode('utf-8', 'replace')
        stderr = done.stderr.decode('utf-8', 'replace')
        assert done.returncode == 0, stderr[-4000:]
        assert 'Traceback' not in stdout + stderr, (stdout + stderr)[-4000:]
        replies = [line.split(f'[{self.speaker}]:', 1)[1].strip()
                   for line in stdout.splitlines() if f'[{self.speaker}]:' in line]
        assert len(replies) == len(LINES), f'expected one reply per input line:\n{stdout[-4000:]}'
        for (kind, _), reply in zip(LINES, replies):
            assert reply, f'{self.agent}: an empty reply to the {kind} message:\n{stdout[-3000:]}'


class TestBertRanker(PromptRobustness):
    agent, speaker = 'bert_ranker', 'BertRanker'


class TestMime(PromptRobustness):
    agent, speaker = 'mime', 'Mime'


class TestMultitaskTransformer(PromptRobustness):
    agent, speaker = 'multitask_transformer', 'MultitaskTransformer'


class TestEthreed(PromptRobustness):
    agent, speaker = 'ethreed', 'Ethreed'


class TestEmotionClassifier(PromptRobustness):
    agent, speaker = 'emotion_classifier', 'EmotionClassifier'
