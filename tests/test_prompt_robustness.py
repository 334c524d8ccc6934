"""Every agent at the real ``parlai interactive`` prompt, with the input people actually type.

One test per agent (a tiny trained model each, see ``tiny_models``), all from one mixin: an empty
line, invalid UTF-8, emoji and a 100,000-character message are piped into the stock CLI; each must
get an answer or a clear refusal, never a traceback, and the session must end normally. The empty
line (and a blank one) gets the one short request every agent of ours answers it with, and every
other reply shows the agent's emotion fields without ``--display-add-fields``.
"""

import os
import subprocess
import sys

from parlai_empathy.agents.safety import EMPTY_INPUT_REPLY
from parlai_empathy.data.emotions import ED_EMOTIONS
from tiny_models import PARLAI, cached_tiny_model

HUNDRED_THOUSAND = ('so sad and lonely today ' * 5000)[:100_000]
LINES = [
    ('empty', b''),
    ('blank', b'  \t '),
    ('invalid UTF-8', b'my exam went \xff\xfe badly \xc3('),
    ('emoji', 'I got a puppy today \U0001f436\U0001f60d\u2764\ufe0f'.encode('utf-8')),
    ('100,000 characters', HUNDRED_THOUSAND.encode('utf-8')),
]


class PromptRobustness:
    """Mixin: ``agent`` is the ``empathy/<agent>`` under test, ``speaker`` how ParlAI names its turns."""

    agent = None
    speaker = None
    fields = {}  # reply field -> its possible values, shown by default under every model reply
    extra_args = []

    def interactive(self, model_file, tmp_path):
        stdin = b'\n'.join(line for _, line in LINES) + b'\n[EXIT]\n'
        # raw bytes on stdin, as a terminal or a pipe delivers them
        return subprocess.run(
            [PARLAI, 'interactive', '-mf', model_file, *self.extra_args],
            input=stdin,
            capture_output=True,
            cwd=tmp_path,
            timeout=3600,
            env=dict(os.environ, HF_HUB_OFFLINE='1'),
        )

    def test_answers_every_kind_of_input(self, tmp_path_factory, tmp_path):
        model_file = cached_tiny_model(tmp_path_factory, self.agent)
        done = self.interactive(model_file, tmp_path)
        stdout = done.stdout.decode('utf-8', 'replace')
        stderr = done.stderr.decode('utf-8', 'replace')
        assert done.returncode == 0, stderr[-4000:]
        assert 'Traceback' not in stdout + stderr, (stdout + stderr)[-4000:]
        replies = [
            line.split(f'[{self.speaker}]:', 1)[1].strip()
            for line in stdout.splitlines()
            if f'[{self.speaker}]:' in line
        ]
        assert len(replies) == len(LINES), f'expected one reply per input line:\n{stdout[-4000:]}'
        for (kind, _), reply in zip(LINES, replies):
            assert reply, f'{self.agent}: an empty reply to the {kind} message:\n{stdout[-3000:]}'
            if kind in ('empty', 'blank'):
                assert reply == EMPTY_INPUT_REPLY, f'{self.agent}: {reply!r} to the {kind} message'
            else:
                assert reply != EMPTY_INPUT_REPLY, f'{self.agent}: {reply!r} to the {kind} message'
        # the model ran for the other messages only, never for an empty one
        assert 'empty message' not in stdout + stderr, (stdout + stderr)[-3000:]
        answered = len(LINES) - 2
        for field, values in self.fields.items():
            # (the first line of a reply follows the prompt "Enter Your Message: " on its line)
            shown = [line.split(f'[{field}]:', 1)[1].strip() for line in stdout.splitlines() if f'[{field}]:' in line]
            assert len(shown) == answered, f'{self.agent}: [{field}] shown {len(shown)} times:\n{stdout[-3000:]}'
            assert all(value in values for value in shown), shown


POLARITY = ('positive', 'negative')


class TestBertRanker(PromptRobustness):
    agent, speaker = 'bert_ranker', 'BertRanker'


class TestBertRankerWithEmoPrepend(PromptRobustness):
    """The tiny ranker with the tiny ED 32-way classifier prepending its top label (EmoPrepend-1):
    replies show the emotion the classifier read in the context."""

    agent, speaker = 'bert_ranker', 'BertRanker'
    fields = {'predicted_emotion': ED_EMOTIONS}

    def interactive(self, model_file, tmp_path):
        classifier = os.path.join(os.path.dirname(os.path.dirname(model_file)), 'emotion_classifier', 'model')
        self.extra_args = ['--emo-prepend-k', '1', '--emo-classifier-file', classifier]
        return super().interactive(model_file, tmp_path)

    def test_answers_every_kind_of_input(self, tmp_path_factory, tmp_path):
        cached_tiny_model(tmp_path_factory, 'emotion_classifier')  # beside the ranker's folder
        super().test_answers_every_kind_of_input(tmp_path_factory, tmp_path)


class TestMime(PromptRobustness):
    agent, speaker = 'mime', 'Mime'
    fields = {'predicted_emotion': ED_EMOTIONS, 'emotion_polarity': POLARITY}


class TestMultitaskTransformer(PromptRobustness):
    agent, speaker = 'multitask_transformer', 'MultitaskTransformer'
    fields = {'predicted_emotion': ED_EMOTIONS, 'emotion_polarity': POLARITY}


class TestEthreed(PromptRobustness):
    agent, speaker = 'ethreed', 'Ethreed'
    fields = {'predicted_emotion': ED_EMOTIONS, 'predicted_listener_emotion': ED_EMOTIONS}


class TestEmotionClassifier(PromptRobustness):
    agent, speaker = 'emotion_classifier', 'EmotionClassifier'
    fields = {'predicted_emotion': ED_EMOTIONS}


def test_eval_model_display_shows_the_emotion_fields_too(tmp_path_factory, tmp_path):
    model_file = cached_tiny_model(tmp_path_factory, 'mime')
    done = subprocess.run(
        [
            PARLAI,
            'eval_model',
            '-mf',
            model_file,
            '-t',
            'empathy_ed_clean',
            '--ed-datapath',
            'sample',
            '-dt',
            'valid',
            '-d',
            'true',
            '-ne',
            '2',
            '-bs',
            '1',
            '--skip-generation',
            'false',
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=3600,
        env=dict(os.environ, HF_HUB_OFFLINE='1'),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    replies = [i for i, line in enumerate(lines) if line.strip().startswith('[Mime]:')]
    assert len(replies) == 2, done.stdout[-3000:]
    for i in replies:  # ParlAI prints a reply's extra fields just above its text
        assert lines[i - 1].strip().split(']: ')[0] == '[predicted_emotion'
        assert lines[i - 1].split(']: ')[1] in ED_EMOTIONS
        assert lines[i - 2].strip().split(']: ')[1] in POLARITY


UNDECODABLE = b'my exam went \xff\xfe badly \xc3('
OBSERVE_UNDECODABLE = (
    """
import sys
from parlai.core.agents import create_agent_from_model_file
errors = sys.stdin.errors
agent = create_agent_from_model_file(sys.argv[1], {'interactive_mode': True, 'skip_generation': False})
raw = %r
observed = agent.observe({'text': raw.decode('utf-8', sys.stdin.errors), 'episode_done': True})
reply = agent.act()
print('STDIN', errors, sys.stdin.errors)
print('TEXT', observed['text'] == raw.decode('utf-8', 'replace'), bool(reply['text'].strip()))
"""
    % UNDECODABLE
)


def test_undecodable_bytes_are_observed_as_replacement_characters_and_stdin_is_left_alone(tmp_path_factory):
    """Under the C.UTF-8 locale Python's stdin hands undecodable bytes over as lone surrogates
    (``surrogateescape``), which HuggingFace tokenizers refuse. The agent observes such a message
    with U+FFFD where a decoder with ``errors='replace'`` puts them, and answers it; building the
    agent for chat leaves ``sys.stdin`` as it was."""
    model_file = cached_tiny_model(tmp_path_factory, 'mime')
    done = subprocess.run(
        [sys.executable, '-c', OBSERVE_UNDECODABLE, model_file],
        input=b'',
        capture_output=True,
        timeout=600,
        env=dict(os.environ, HF_HUB_OFFLINE='1', LANG='C.UTF-8', LC_ALL='C.UTF-8'),
    )
    out = done.stdout.decode('utf-8', 'replace')
    assert done.returncode == 0, done.stderr.decode('utf-8', 'replace')[-4000:]
    assert 'STDIN surrogateescape surrogateescape' in out, out[-2000:]
    assert 'TEXT True True' in out, out[-2000:]
