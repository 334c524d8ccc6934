"""The human-evaluation journey as a user walks it, through the real commands.

Tiny models of ours (MIME, ETHREED, the BERT ranker) and a stock ParlAI ``transformer/generator``
are evaluated on the embedded ED sample with ``parlai eval_model --world-logs``; their logs have
every shape our agents and teachers write: MIME's flat examples (``--ed-history-length 1000``,
text = the history joined by newlines), ETHREED's, the ranker's and the stock model's ParlAI
episodes (the agent keeps the history). ``parlai empathy_humaneval_build`` makes a Likert and an
A/B task of them, ``parlai empathy_humaneval_serve`` serves it on 127.0.0.1, and a headless
Chromium rates one assignment of each: every page must show each context turn exactly once, in
the data's order, with the data's roles, then the reply.

Also the trap a user falls into first: our generators save ``skip_generation true``, so a plain
``eval_model --world-logs`` writes no replies; the agent warns at start-up and the build step
says, in one line, what is wrong and how to rerun.

Screenshots: ``$TMPDIR/parlai_empathy_journey_{likert,ab}.png``.
"""

import json
import os
import subprocess
import sys
import tempfile

import pytest

from conftest import ed_teacher_examples
from humaneval_helpers import click_and_wait, headless_chromium
from local_server import LocalServer
from tiny_models import cached_tiny_model

PARLAI = os.path.join(os.path.dirname(sys.executable), 'parlai')
SAMPLE_TEST = ['-t', 'empathy_ed_clean', '--ed-datapath', 'sample', '-dt', 'test']
SHOTS = {mode: os.path.join(tempfile.gettempdir(), f'parlai_empathy_journey_{mode}.png') for mode in ('likert', 'ab')}
ROLE_NAMES = {'speaker': 'Speaker', 'listener': 'Listener'}
# a stock ParlAI generator, as small as it gets; 16 tokens at most keep its untrained greedy
# replies (which never end) quick
STOCK = [
    '-m',
    'transformer/generator',
    '--n-layers',
    1,
    '--embedding-size',
    16,
    '--ffn-size',
    32,
    '--n-heads',
    2,
    '--truncate',
    64,
    '--label-truncate',
    16,
    '--dict-maxtokens',
    1500,
]


def norm(text):
    """Text as a browser renders it: runs of white space shown as one space."""
    return ' '.join(text.split())


def parlai(*args, cwd, check=True):
    done = subprocess.run(
        [PARLAI] + [str(a) for a in args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1800,
        env=dict(os.environ, HF_HUB_OFFLINE='1'),
    )
    if check and done.returncode != 0:
        raise AssertionError(f'parlai {args[0]} exited {done.returncode}:\n{done.stderr[-4000:]}')
    return done


def parlai_together(commands, cwd):
    """{name: stdout and stderr} of several ``parlai`` commands run at once (each fails the test
    if it fails)."""
    procs = {
        name: subprocess.Popen(
            [PARLAI] + [str(a) for a in args],
            cwd=cwd,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, HF_HUB_OFFLINE='1'),
        )
        for name, args in commands.items()
    }
    outputs = {name: proc.communicate(timeout=1800)[0] for name, proc in procs.items()}
    for name, proc in procs.items():
        assert proc.returncode == 0, f'{commands[name]} exited {proc.returncode}:\n{outputs[name][-4000:]}'
    return outputs


@pytest.fixture(scope='module')
def journey(tmp_path_factory):
    """World logs of every model (and MIME's without replies), and the data's own contexts."""
    root = tmp_path_factory.mktemp('journey')
    stock = str(root / 'stock' / 'model')
    os.makedirs(root / 'stock')
    stock_training = subprocess.Popen(  # meanwhile the tiny models of ours are trained
        [PARLAI]
        + [
            str(a)
            for a in [
                'train_model',
                *STOCK,
                '-mf',
                stock,
                '-t',
                'empathy_ed_clean',
                '--ed-datapath',
                'sample',
                '-bs',
                8,
                '--max-train-steps',
                3,
                '--validation-max-exs',
                8,
                '--short-final-eval',
                'true',
                '-vme',
                10_000,
            ]
        ],
        cwd=root,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        models = {
            name: cached_tiny_model(tmp_path_factory, agent)
            for name, agent in (('mime', 'mime'), ('ethreed', 'ethreed'), ('ranker', 'bert_ranker'))
        }
    finally:
        out = stock_training.communicate(timeout=1800)[0]
    assert stock_training.returncode == 0, f'training the stock model failed:\n{out[-4000:]}'
    models['stock'] = stock
    logs, commands = {}, {}
    for name, model_file in models.items():
        logs[name] = str(root / f'{name}.jsonl')
        generate = ['--skip-generation', 'false'] if name in ('mime', 'ethreed') else []
        greedy = ['--inference', 'greedy'] if name == 'stock' else []
        commands[name] = ['eval_model', '-mf', model_file, *SAMPLE_TEST, *generate, *greedy, '--world-logs', logs[name]]
    # what a user runs first: the generator's saved options say skip_generation true
    logs['mime_no_replies'] = str(root / 'mime_no_replies.jsonl')
    commands['mime_no_replies'] = [
        'eval_model',
        '-mf',
        models['mime'],
        *SAMPLE_TEST,
        '--world-logs',
        logs['mime_no_replies'],
    ]
    runs = parlai_together(commands, root)
    from parlai_empathy.tasks.ed import CleanTeacher

    examples = ed_teacher_examples(CleanTeacher, 'test', root / 'parlai_data', '--ed-datapath', 'sample')
    truth = {
        f'{m["conv_id"]}#{m["turn"]}': [(r, norm(u)) for r, u in zip(m['context_roles'], m['context_utterances'])]
        for m in examples
    }
    replies = {}  # item -> every reply a rater may see there: the models', and golds (checks)
    for name in models:
        for line in open(logs[name], encoding='utf-8'):
            for teacher, reply in json.loads(line)['dialog']:
                key = f'{teacher["conv_id"]}#{teacher["turn"]}'
                replies.setdefault(key, set()).add(norm(reply['text']))
    golds = {norm(m['eval_labels'][0]) for m in examples}
    return {
        'root': root,
        'logs': logs,
        'runs': runs,
        'truth': truth,
        'replies': replies,
        'golds': golds,
        'models': models,
    }


def test_world_logs_have_the_shapes_of_each_agent(journey):
    """The logs really differ in shape (else the rest proves less than it claims)."""
    first = {}
    for name in ('mime', 'ethreed', 'ranker', 'stock'):
        with open(journey['logs'][name], encoding='utf-8') as f:
            first[name] = [json.loads(line)['dialog'] for line in f]
    assert all(len(d) == 1 for d in first['mime'])  # one example per episode
    assert any('\n' in d[0][0]['text'] for d in first['mime'])  # the history, newline-joined
    for name in ('ethreed', 'ranker', 'stock'):  # ParlAI episodes: text = the last utterance
        assert any(len(d) > 1 for d in first[name])
        assert not any('\n' in t['text'] for d in first[name] for t, _ in d)
    assert all(isinstance(r.get('text'), str) for d in first['stock'] for _, r in d)


def test_skip_generation_is_warned_about_and_the_build_says_how_to_fix_it(journey):
    assert 'will hold no generated replies: skip_generation is true' in journey['runs']['mime_no_replies']
    assert 'will hold no generated replies' not in journey['runs']['mime']
    path = journey['logs']['mime_no_replies']
    done = parlai(
        'empathy_humaneval_build',
        '--db',
        journey['root'] / 'no_replies.db',
        '--world-logs',
        path,
        cwd=journey['root'],
        check=False,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # one line, no traceback
    assert lines[0].startswith(
        f"parlai empathy_humaneval_build: {path}:1: 'dialog'[0] model "
        "message (Mime) has no 'text': the log holds no generated replies"
    )
    assert lines[0].endswith('rerun parlai eval_model with --skip-generation false')


def _build_and_serve(journey, mode, *args):
    """``empathy_humaneval_build`` then ``empathy_humaneval_serve``; (server, one worker link)."""
    root, logs = journey['root'], journey['logs']
    db = root / f'{mode}.db'
    specs = [f'{name}={logs[name]}' for name in ('mime', 'ethreed', 'ranker', 'stock')]
    built = parlai(
        'empathy_humaneval_build',
        '--db',
        db,
        '--mode',
        mode,
        '--world-logs',
        *specs,
        '--annotators',
        1,
        '--overwrite',
        'true',
        *args,
        cwd=root,
    )
    assert "models ['mime', 'ethreed', 'ranker', 'stock']" in built.stdout
    return _serve(db, root)


def _serve(db, root):
    """``empathy_humaneval_serve`` on 127.0.0.1; (server, one worker link)."""
    server = LocalServer(
        lambda port: [PARLAI, 'empathy_humaneval_serve', '--db', db, '--host', '127.0.0.1', '--port', port],
        ready_path='/healthz',
        cwd=root,
    )
    try:
        link = parlai(
            'empathy_humaneval_links', '--db', db, '--base-url', server.url, '-n', 1, cwd=root
        ).stdout.split()[-1]
    except BaseException:
        server.stop()
        raise
    return server, link


def _turns(driver, css):
    """[(role class, label shown, text)] of the turns under ``css``, in page order."""
    rows = driver.execute_script(
        'return Array.from(document.querySelectorAll(arguments[0])).map(e => '
        '[e.className, e.querySelector(".who").textContent, e.textContent]);',
        css,
    )
    out = []
    for cls, who, text in rows:
        roles = [c for c in cls.split() if c != 'turn']
        assert len(roles) == 1, cls
        assert text.startswith(who)
        out.append((roles[0], norm(who), norm(text[len(who) :])))
    return out


def _check_page(driver, journey, n_candidates):
    """The page's context is the data's, turn by turn, once each; the replies follow it."""
    context = _turns(driver, 'section.dialogue .turn')
    shown = [(role, text) for role, _who, text in context]
    matches = [k for k, turns in journey['truth'].items() if turns == shown]
    assert len(matches) == 1, f'the page shows a context the data does not have: {shown}'
    item = matches[0]
    for role, who, _text in context:
        assert who == ROLE_NAMES[role] + ':'
    assert context[-1][0] == 'speaker'
    replies = [_turns(driver, f'#cand-{i} .turn') for i in range(n_candidates)]
    for reply in replies:
        assert len(reply) == 1 and reply[0][:2] == ('listener', 'Listener:'), reply
        assert reply[0][2] in journey['replies'][item] | journey['golds']
    return item, len(context)


def _walk(driver, link, journey, answers, n_candidates, screenshot):
    """Rate one assignment; screenshot the page with the longest context. Returns the items."""
    from selenium.webdriver.common.by import By

    driver.get(link)
    click_and_wait(driver, 'start')
    seen, longest = [], 0
    while driver.find_elements(By.ID, 'answer-form'):
        item, length = _check_page(driver, journey, n_candidates)
        seen.append(item)
        if length > longest:
            longest = length
            driver.save_screenshot(screenshot)
        for fieldset, value in zip(driver.find_elements(By.TAG_NAME, 'fieldset'), answers):
            fieldset.find_element(By.CSS_SELECTOR, f'input[value="{value}"]').click()
        click_and_wait(driver, 'next')
    assert driver.find_element(By.ID, 'completion-code').text
    assert longest >= 3  # a page with history: Speaker, Listener, Speaker at least
    return seen


@pytest.fixture()
def browser(tmp_path):
    driver = headless_chromium(tmp_path / 'profile')
    yield driver
    driver.quit()


def test_likert_pages_show_each_context_turn_once_in_order(journey, browser):
    for path in SHOTS.values():
        if os.path.exists(path):
            os.remove(path)
    server, link = _build_and_serve(journey, 'likert', '--num-items', 8, '--items-per-assignment', 8, '--seed', 2)
    try:
        seen = _walk(browser, link, journey, ['4', '3', '5'], 1, SHOTS['likert'])
    finally:
        server.stop()
    assert len(seen) == 9 and len(set(seen)) == 9  # 8 items and a check, none twice
    assert os.path.getsize(SHOTS['likert']) > 10_000


def test_ab_pages_show_each_context_turn_once_in_order(journey, browser):
    server, link = _build_and_serve(journey, 'ab', '--num-items', 4, '--items-per-assignment', 4, '--seed', 5)
    try:
        seen = _walk(browser, link, journey, ['A'], 2, SHOTS['ab'])
    finally:
        server.stop()
    assert len(seen) == 5
    assert os.path.getsize(SHOTS['ab']) > 10_000


def test_a_row_without_its_model_takes_part_through_its_committed_outputs(journey, browser):
    """MIME's evidence row, written by ``empathy_leaderboard --artifacts`` as a table row's is,
    stands in for its model: the A/B pages show its replies to the data's own conversations."""
    root = journey['root']
    parlai(
        'empathy_leaderboard',
        '--entries',
        f'mime={journey["models"]["mime"]}',
        '--ed-datapath',
        'sample',
        '--artifacts',
        root / 'runs',
        '--outdir',
        root / 'board',
        '--bertscore-model',
        'none',
        '--p100-shuffled',
        'false',
        '--progress',
        'false',
        cwd=root,
    )
    outputs = root / 'runs' / 'mime' / 'outputs.jsonl.gz'
    db = root / 'ab_outputs.db'
    built = parlai(
        'empathy_humaneval_build',
        '--db',
        db,
        '--mode',
        'ab',
        '--world-logs',
        f'ethreed={journey["logs"]["ethreed"]}',
        '--outputs',
        outputs,
        '--ed-datapath',
        'sample',
        '--annotators',
        1,
        '--num-items',
        4,
        '--items-per-assignment',
        4,
        '--seed',
        5,
        cwd=root,
    )
    assert "models ['ethreed', 'mime']" in built.stdout
    import sqlite3

    from parlai_empathy.humaneval import inputs

    mime_log = inputs.read_world_log(str(root / 'board' / 'mime.world_logs.jsonl'))
    with sqlite3.connect(db) as conn:
        units = conn.execute('SELECT item_id, models, display FROM units WHERE is_check = 0').fetchall()
    assert len(units) == 4
    for item, models, display in units:
        side = json.loads(models).index('mime')
        # the model's own reply (its world log's), read back from its evidence
        assert json.loads(display)['candidates'][side] == [['listener', mime_log.responses[item]]]
    server, link = _serve(db, root)
    try:
        seen = _walk(browser, link, journey, ['B'], 2, str(root / 'ab_outputs.png'))
    finally:
        server.stop()
    assert len(seen) == 5  # 4 items and a check
