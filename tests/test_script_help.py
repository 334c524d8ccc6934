"""``parlai <command> --help`` for every command of ours (every ``register_script`` in scripts/).

Each must exit 0, list each option once, and say what every option does. Unrepaired, ParlAI's
superscript lists every option twice, and the commands with a required option (``-mf``) end their
help with "Parse Error: the following arguments are required" and exit status 2
(``parlai_empathy.integration.compat`` repairs both).
"""

import concurrent.futures
import os
import re
import subprocess

import pytest

from tiny_models import PARLAI

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(REPO, 'scripts')
# ParlAI's own SLURM scripts, registered by scripts/empathy_distributed.py: their options are
# ParlAI's train_model/eval_model options, some of which ParlAI ships without help
PARLAI_OPTIONS = {'distributed_train', 'distributed_eval'}
OPTION = re.compile(r'^  (-{1,2}[A-Za-z][\w-]*)')


def registered_commands():
    names = []
    for filename in sorted(os.listdir(SCRIPTS)):
        if filename.endswith('.py'):
            with open(os.path.join(SCRIPTS, filename), encoding='utf-8') as f:
                names += re.findall(r"@register_script\('([\w-]+)'", f.read())
    return names


COMMANDS = registered_commands()


def options_and_help(text):
    """``(option, its help lines)`` of every option line of an argparse help text."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        match = OPTION.match(line)
        if match:
            help_lines = []
            for following in lines[i + 1 :]:
                if not following.startswith('        ') or OPTION.match(following):
                    break
                help_lines.append(following.strip())
            found.append((match.group(1), help_lines))
    return found


@pytest.fixture(scope='module')
def helps(tmp_path_factory):
    cwd = tmp_path_factory.mktemp('help')

    def run(name):
        return name, subprocess.run(
            [PARLAI, name, '--help'],
            capture_output=True,
            text=True,
            cwd=cwd,
            timeout=600,
            env=dict(os.environ, HF_HUB_OFFLINE='1'),
        )

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return dict(pool.map(run, COMMANDS))


def test_every_script_file_registers_a_command():
    assert 'empathy_chat' in COMMANDS and 'empathy_score' in COMMANDS and len(COMMANDS) >= 15


@pytest.mark.parametrize('name', COMMANDS)
def test_help_lists_each_option_once_with_its_help_and_exits_0(helps, name):
    done = helps[name]
    assert done.returncode == 0, f'parlai {name} --help exited {done.returncode}:\n{done.stderr[-2000:]}'
    assert 'Parse Error' not in done.stdout + done.stderr
    options = [option for option, _ in options_and_help(done.stdout)]
    assert '--help' in options and len(options) > 1, done.stdout[-2000:]
    repeated = sorted({option for option in options if options.count(option) > 1})
    assert not repeated, f'parlai {name} --help lists these options more than once: {repeated}'
    if name not in PARLAI_OPTIONS:
        bare = [option for option, help_lines in options_and_help(done.stdout) if not help_lines]
        assert not bare, f'parlai {name} --help: no help text for {bare}'


def test_a_missing_required_option_is_still_an_error(tmp_path):
    done = subprocess.run([PARLAI, 'empathy_chat'], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 2 and 'required: --model-file' in done.stderr
