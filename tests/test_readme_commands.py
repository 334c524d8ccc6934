"""Every command in README.md's ``bash`` blocks, run in order as a user types them, on the embedded
ED sample, so the README cannot rot. ``text`` blocks (``make demo``, ``make test``) are not run
here: tests/test_demo.py runs the demo, and CI is ``make test``.

The only substitutions, each keeping the command's meaning at a scale CI can afford:

| README says                              | the test runs                                            |
|------------------------------------------|----------------------------------------------------------|
| ``export PARLAI_EMPATHY_ED_DIR=...``     | the embedded sample's folder                             |
| ``parlai train_model ... -m AGENT ...``  | the same plus ``TINY_TRAIN[AGENT]``: tiny sizes, 4 updates |
| ``parlai eval_model ...``                | the same plus ``-ne 24``                                 |
| ``parlai empathy_leaderboard ...``       | the same plus ``--eval-args "-ne 24 -bs 8"``             |
| ``parlai interactive ...``               | one message on standard input, then ``[EXIT]``           |
| a server (``--port N``)                  | a free port; started, probed over HTTP, stopped          |
| ``http://127.0.0.1:8000`` in a link      | the humaneval server's free port                         |

Every command must exit 0; what a user would look at is asserted per command below.
"""

import json
import os
import re
import shlex
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from parlai_empathy.data.ed_source import sample_dir
from parlai_empathy.data.emotions import ED_EMOTIONS
from tiny_models import PARLAI

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, 'README.md')

TINY_STEPS = [
    '--max-train-steps',
    '4',
    '-bs',
    '8',
    '-vme',
    '100000',
    '--short-final-eval',
    'true',
    '--validation-max-exs',
    '16',
]
TINY_TRAIN = {
    'empathy/mime': [
        '--embedding-size',
        '32',
        '--attention-size',
        '16',
        '--ffn-size',
        '32',
        '--latent-size',
        '16',
        '--n-heads',
        '2',
    ],
}
SERVERS = ('empathy_chat', 'empathy_humaneval_serve')
MESSAGE = 'I finally passed my driving test after three tries!'


def readme_commands(path=README):
    """``(line number, command)`` of every non-comment line in the ```bash blocks."""
    commands, in_bash = [], False
    with open(path, encoding='utf-8') as f:
        for lineno, line in enumerate(f, 1):
            stripped = line.strip()
            if stripped.startswith('```'):
                in_bash = not in_bash and stripped == '```bash'
                continue
            if in_bash and stripped and not stripped.startswith('#'):
                assert not stripped.endswith('\\'), f'README.md:{lineno}: keep each command on one line'
                commands.append((lineno, stripped))
    return commands


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def http(url, data=None, timeout=30, form=False):
    """(status, body) of one request (a POST when ``data`` is given, JSON unless ``form``); an
    HTTP error status is returned, not raised."""
    kind = 'application/x-www-form-urlencoded' if form else 'application/json'
    headers = {'Content-Type': kind} if data is not None else {}
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.read().decode('utf-8')
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode('utf-8', 'replace')


def wait_for(url, proc, log_path, seconds=300):
    for _ in range(seconds * 2):
        if proc.poll() is not None:
            raise AssertionError(f'the server exited with {proc.returncode}:\n' + open(log_path).read()[-3000:])
        try:
            return http(url, timeout=5)
        except (urllib.error.URLError, ConnectionError, socket.timeout):
            time.sleep(0.5)
    raise AssertionError(f'{url} never answered:\n' + open(log_path).read()[-3000:])


def option(args, name):
    return args[args.index(name) + 1] if name in args else None


def test_readme_lists_the_jobs_on_its_first_screen():
    """A newcomer finds train, chat, evaluate and human evaluation in the first 80 lines."""
    with open(README, encoding='utf-8') as f:
        first_screen = ''.join(f.readlines()[:80])
    for command in ('parlai train_model', 'parlai interactive', 'parlai eval_model', 'parlai empathy_humaneval_build'):
        assert command in first_screen, command
    with open(README, encoding='utf-8') as f:
        assert len(f.readlines()) <= 120


def test_every_readme_command_runs_on_the_sample(tmp_path):
    commands = readme_commands()
    assert len(commands) >= 10, commands
    env = dict(
        os.environ,
        HF_HUB_OFFLINE='1',
        OMP_NUM_THREADS='1',
        PATH=os.path.dirname(PARLAI) + os.pathsep + os.environ.get('PATH', ''),
    )
    humaneval_port = free_port()
    seen = set()
    for lineno, command in commands:
        where = f'README.md:{lineno}: {command}'
        if command.startswith('export '):
            name, _, _ = command[len('export ') :].partition('=')
            assert name == 'PARLAI_EMPATHY_ED_DIR', where
            env[name] = sample_dir()
            continue
        command = command.replace('http://127.0.0.1:8000', f'http://127.0.0.1:{humaneval_port}')
        args = shlex.split(command)
        assert args[0] == 'parlai', where
        job = args[1]
        seen.add(job)
        if job in SERVERS:
            port = humaneval_port if job == 'empathy_humaneval_serve' else free_port()
            args[args.index('--port') + 1] = str(port)
            check_server(job, args, port, env, tmp_path, where)
            continue
        stdin = None
        if job == 'train_model':
            args += TINY_TRAIN.get(option(args, '-m'), []) + TINY_STEPS
        elif job == 'eval_model':
            args += ['-ne', '24']
        elif job == 'empathy_leaderboard':
            args += ['--eval-args', '-ne 24 -bs 8']
        elif job == 'interactive':
            stdin = f'{MESSAGE}\n[EXIT]\n'
        done = subprocess.run(args, cwd=tmp_path, env=env, input=stdin, capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, f'{where}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}'
        check_output(job, args, done.stdout + done.stderr, tmp_path, where)
    assert {
        'train_model',
        'interactive',
        'empathy_chat',
        'eval_model',
        'empathy_leaderboard',
        'empathy_humaneval_build',
        'empathy_humaneval_serve',
        'empathy_score',
        'empathy_reproduce',
    } <= seen


def check_output(job, args, out, cwd, where):
    """What a user looks at after each command."""
    if job == 'train_model':
        assert (cwd / option(args, '-mf')).exists(), where
    elif job == 'interactive':
        # the reply and the emotion the model read, without any --display-add-fields
        assert re.search(r'^\[\w+\]: \S', out, flags=re.M), where + '\n' + out[-2000:]
        emotion = re.search(r'^\[predicted_emotion\]: (\S+)$', out, flags=re.M)
        assert emotion and emotion.group(1) in ED_EMOTIONS, where + '\n' + out[-2000:]
    elif job == 'eval_model':
        assert re.search(r'\bppl\b', out) and 'dist-2' in out, where
        logs = option(args, '--world-logs')
        if logs:
            with open(cwd / logs, encoding='utf-8') as f:
                replies = [json.loads(line)['dialog'][0][1].get('text') for line in f if line.strip()]
            assert replies and all(isinstance(r, str) and r.strip() for r in replies), where
    elif job == 'empathy_leaderboard':
        table = (cwd / option(args, '--outdir') / 'leaderboard.md').read_text(encoding='utf-8')
        for name in option(args, '--entries').split():
            assert f'| {name.split("=")[0]} ' in table, where
        assert (cwd / option(args, '--outdir') / 'leaderboard.png').exists(), where
    elif job == 'empathy_humaneval_build':
        assert 'Admin token:' in out and (cwd / option(args, '--db')).exists(), where
    elif job == 'empathy_humaneval_links':
        links = re.findall(r'^(http://127\.0\.0\.1:\d+/w/\S+)$', out, flags=re.M)
        assert len(links) == int(option(args, '-n')), where
        (cwd / 'links.txt').write_text('\n'.join(links))
    elif job == 'empathy_humaneval_analyze':
        assert (cwd / option(args, '--outdir')).is_dir(), where
    elif job == 'empathy_score':
        # each reply matched with its ED test example, then the suite's table
        assert re.search(r'^\S+ \(world_logs\): (\d+) outputs: \1 matched with ED test examples', out, flags=re.M), (
            where + '\n' + out[-2000:]
        )
        for row in ('| avg_bleu |', '| avg_bleu_lc |', '| dist-2 |', '| bertscore_f |', '| distinct_replies |'):
            assert row in out, where + '\n' + out[-2000:]
    elif job == 'empathy_reproduce':
        assert 'parlai train_model -t empathy_ed_clean -m empathy/mime' in out, where


def check_server(job, args, port, env, cwd, where):
    log_path = cwd / f'{job}.log'
    with open(log_path, 'w') as log:
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        status, page = wait_for(f'http://127.0.0.1:{port}/', proc, log_path)
        assert status == 200, where
        if job == 'empathy_chat':
            status, body = http(f'http://127.0.0.1:{port}/api/chat', json.dumps({'text': MESSAGE}).encode())
            reply = json.loads(body)
            assert status == 200 and reply['text'].strip() and reply['predicted_emotion'] in ED_EMOTIONS, where
        else:
            links = (cwd / 'links.txt').read_text().split()
            status, page = http(links[0])
            assert status == 200 and 'Rate responses in conversations' in page, where + '\n' + page[:2000]
            start = re.search(r'<form method="post" action="([^"]+)"', page).group(1)
            status, page = http(f'http://127.0.0.1:{port}{start}', data=b'', form=True)
            # the first item: the conversation, then the reply to rate
            assert status == 200 and 'Speaker' in page and 'Empathy' in page, where + '\n' + page[:3000]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f'{where}: the server did not stop on SIGTERM')


def test_every_relative_link_of_the_readme_and_docs_resolves():
    pages = [README] + [
        os.path.join(REPO, 'docs', n) for n in sorted(os.listdir(os.path.join(REPO, 'docs'))) if n.endswith('.md')
    ]
    broken = []
    for page in pages:
        with open(page, encoding='utf-8') as f:
            text = f.read()
        for target in re.findall(r'\]\(([^)\s]+)\)', text):
            if re.match(r'[a-z]+:', target) or target.startswith('#'):
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(page), target.split('#')[0]))
            if not os.path.exists(path):
                broken.append(f'{os.path.relpath(page, REPO)}: {target}')
    assert not broken, broken
