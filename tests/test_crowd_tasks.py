"""ParlAI's ACUTE-Eval and turn-annotation tasks on Mephisto, run as a researcher runs them.

Two models' world logs come from the real ``parlai eval_model`` on the embedded ED sample (ParlAI's
repeat_label and repeat_query agents; the second one's replies carry HTML that must show as text).
``parlai empathy_acute_build`` turns them into ACUTE pairings and turn-annotation data,
``parlai empathy_acute_run`` serves the task with Mephisto's mock provider and local architect, a
headless Chromium plays the workers (one fails onboarding, one passes), and
``parlai empathy_acute_analyze`` must count exactly the clicks the passing worker made.
Screenshots of every page go to ``$TMPDIR/parlai_empathy_crowd_*.png``.
"""

import json
import os
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import VENV_BIN, require_crowd
from humaneval_helpers import free_port, headless_chromium

ARTIFACTS = tempfile.gettempdir()
HOSTILE = '<img src=x onerror="document.title=\'pwned\'"><b>bold</b> '


def parlai(*args, cwd, check=True, timeout=600):
    done = subprocess.run(
        [os.path.join(VENV_BIN, 'parlai'), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, HF_HUB_OFFLINE='1'),
    )
    if check and done.returncode != 0:
        raise AssertionError(f'parlai {args[0]} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-4000:]}')
    return done


@pytest.fixture(scope='module')
def world_logs(tmp_path_factory):
    require_crowd()
    root = tmp_path_factory.mktemp('crowd_logs')
    paths = {}
    for name, agent in (('label', 'repeat_label'), ('query', 'repeat_query')):
        paths[name] = root / f'{name}.jsonl'
        parlai(
            'eval_model',
            '-t',
            'empathy_ed_clean',
            '--ed-datapath',
            'sample',
            '-dt',
            'test',
            '-m',
            agent,
            '--world-logs',
            paths[name],
            '--datapath',
            root / 'data',
            cwd=root,
        )
    # the second model's replies carry markup: the pages must show it as text
    lines = [json.loads(line) for line in open(paths['query'], encoding='utf-8')]
    for convo in lines:
        for turn in convo['dialog']:
            turn[1]['text'] = HOSTILE + turn[1]['text']
    with open(paths['query'], 'w', encoding='utf-8') as f:
        f.writelines(json.dumps(c) + '\n' for c in lines)
    return paths


@pytest.fixture(scope='module')
def inputs(world_logs, tmp_path_factory):
    out = tmp_path_factory.mktemp('crowd_inputs')
    done = parlai(
        'empathy_acute_build',
        '--outdir',
        out,
        '--world-logs',
        f'label={world_logs["label"]}',
        f'query={world_logs["query"]}',
        '--num-items',
        4,
        '--onboarding',
        1,
        cwd=out,
    )
    assert '2 models (label, query): 122 items shared by all, dropped as not shared: label 0, query 0' in done.stdout
    assert 'ACUTE-Eval: 4 pairings on 4 items + 1 onboarding pairs' in done.stdout
    assert 'turn annotation: 4 conversations of label' in done.stdout
    return out


def _listening(port=None, pgid=None):
    """The local addresses of the listening sockets on ``port``, or of every process of the
    process group ``pgid`` (IPv4 and IPv6, as /proc/net shows them)."""
    inodes = None
    if pgid is not None:
        inodes = set()
        for pid in filter(str.isdigit, os.listdir('/proc')):
            try:
                if os.getpgid(int(pid)) != pgid:
                    continue
                for fd in os.listdir(f'/proc/{pid}/fd'):
                    target = os.readlink(f'/proc/{pid}/fd/{fd}')
                    if target.startswith('socket:['):
                        inodes.add(target[8:-1])
            except OSError:  # a process that ended meanwhile
                continue
    found = []
    for table in ('/proc/net/tcp', '/proc/net/tcp6'):
        with open(table) as f:
            for row in f.readlines()[1:]:
                fields = row.split()
                address, hexport = fields[1].rsplit(':', 1)
                if fields[3] != '0A':
                    continue
                if (port is not None and int(hexport, 16) == port) or (inodes is not None and fields[9] in inodes):
                    found.append(address)
    return found


LOOPBACK = {'0100007F', '00000000000000000000000001000000'}  # 127.0.0.1 and ::1 in /proc/net


class Launch:
    """``parlai empathy_acute_run`` in its own process, its output in a log file."""

    def __init__(self, inputs, run_dir, task, **extra):
        self.port, self.run_dir = free_port(), run_dir
        self.log_path = os.path.join(os.path.dirname(run_dir), f'{task}.log')
        args = [
            'empathy_acute_run',
            '--inputs',
            inputs,
            '--run-dir',
            run_dir,
            '--crowd-task',
            task,
            '--port',
            self.port,
            '--no-submission-patience',
            900,
        ]
        for key, value in extra.items():
            args += [f'--{key.replace("_", "-")}', value]
        with open(self.log_path, 'w') as log:
            self.proc = subprocess.Popen(
                [os.path.join(VENV_BIN, 'parlai'), *map(str, args)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=os.path.dirname(run_dir),
                start_new_session=True,
            )
        deadline = time.monotonic() + 300
        while 'workers open' not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f'the task did not start:\n{self.log()[-4000:]}')
            time.sleep(0.5)

    def log(self):
        with open(self.log_path, encoding='utf-8', errors='replace') as f:
            return f.read()

    def url(self, worker):
        return f'http://127.0.0.1:{self.port}/?worker_id={worker}&assignment_id=1'

    def wait(self, timeout=120):
        """The run ends by itself once every unit is done."""
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.stop()

    def stop(self):
        """Only a failed test gets here with the run still going: end it and its router."""
        from parlai_empathy.humaneval.crowd.launch import stop_routers

        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        stop_routers(self.run_dir)


def _accept_alert(driver, timeout=15):
    """The mock provider confirms a submission with an alert()."""
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    WebDriverWait(driver, timeout).until(expected_conditions.alert_is_present()).accept()


def _wait_for(driver, *ids, timeout=120):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    WebDriverWait(driver, timeout).until(lambda d: any(d.find_elements(By.ID, i) for i in ids))
    return next(i for i in ids if driver.find_elements(By.ID, i))


ROLE = {'human_speaker': 'speaker', 'human_listener': 'listener'}


def _acute_worker(driver, launch, worker, pairings, fail_onboarding, shot=None):
    """Do one ACUTE unit; returns [(matchup models, chosen model, is_onboarding)]."""
    from selenium.webdriver.common.by import By

    driver.get(launch.url(worker))
    clicks = []
    while _wait_for(driver, 'next', 'done') == 'next':
        turns = driver.find_elements(By.CSS_SELECTOR, '#context .turn')
        shown = [(t.get_attribute('data-role'), t.find_element(By.CSS_SELECTOR, '.text').text) for t in turns]
        replies = [driver.find_element(By.CSS_SELECTOR, f'#cand-{i} .turn.judged .text').text for i in (0, 1)]
        pairing = next(p for p in pairings if {d['dialogue'][-1]['text'] for d in p['dialogue_dicts']} == set(replies))
        dialogue = pairing['dialogue_dicts'][0]['dialogue']
        # every context turn once, in the data's order, with its role, and then the two replies
        assert shown == [(ROLE[t['id']], t['text']) for t in dialogue[:-1]], shown
        side_model = {d['dialogue'][-1]['text']: d['speakers'][-1] for d in pairing['dialogue_dicts']}
        models = [side_model[r] for r in replies]
        if pairing['is_onboarding']:
            wrong = 1 - models.index(pairing['correct_answer'])
            pick = wrong if fail_onboarding else 1 - wrong
        else:
            pick = len(clicks) % 2  # both sides get chosen
        if shot and not pairing['is_onboarding'] and not any(not c[2] for c in clicks):
            driver.save_screenshot(shot)
        # a model's markup is shown as the text it is
        assert all(r.startswith(HOSTILE.strip()) for r, m in zip(replies, models) if m == 'query')
        assert driver.find_element(By.ID, 'next').get_attribute('disabled')  # no choice yet
        driver.find_element(By.ID, f'choice-{"AB"[pick]}').click()
        driver.find_element(By.ID, 'reason').send_keys('fits the feelings')
        last = driver.find_element(By.ID, 'next').text == 'Submit'
        driver.find_element(By.ID, 'next').click()
        clicks.append((tuple(sorted(models)), models[pick], pairing['is_onboarding']))
        if last:
            _accept_alert(driver)
    assert driver.title != 'pwned'
    return clicks


def test_acute_eval_on_mephisto_counts_the_clicks_of_workers_who_passed_onboarding(inputs, tmp_path):

    pairings = [json.loads(line) for line in open(inputs / 'pairings.jsonl', encoding='utf-8')]
    launch = Launch(inputs, str(tmp_path / 'run'), 'acute', annotations_per_pair=2)
    try:
        # the router Mephisto's local architect started listens on this machine only, and so does
        # every other server of the run (Mephisto's metrics endpoint)
        assert _listening(launch.port) == ['0100007F'], _listening(launch.port)
        everything = _listening(pgid=launch.proc.pid)
        assert everything and set(everything) <= LOOPBACK, everything  # the router has a group of its own
        driver = headless_chromium(tmp_path / 'profile_alice')
        try:
            failed = _acute_worker(driver, launch, 'alice', pairings, fail_onboarding=True)
        finally:
            driver.quit()
        driver = headless_chromium(tmp_path / 'profile_bob')
        try:
            shot = os.path.join(ARTIFACTS, 'parlai_empathy_crowd_acute.png')
            passed = _acute_worker(driver, launch, 'bob', pairings, fail_onboarding=False, shot=shot)
            assert _wait_for(driver, 'done') == 'done'
            driver.save_screenshot(os.path.join(ARTIFACTS, 'parlai_empathy_crowd_acute_done.png'))
        finally:
            driver.quit()
        assert launch.wait() == 0, launch.log()[-3000:]  # every unit done: the run ended itself
    finally:
        launch.stop()
    assert _listening(launch.port) == []
    assert sum(onboarding for *_, onboarding in failed) == 1
    assert [c for c in passed if c[2]] and len([c for c in passed if not c[2]]) == 4

    out = tmp_path / 'results'
    done = parlai(
        'empathy_acute_analyze', '--run-dir', tmp_path / 'run', '--outdir', out, '--reference', 'query', cwd=tmp_path
    )
    report = json.loads((out / 'results.json').read_text())
    wins = sum(1 for _, chosen, onboarding in passed if not onboarding and chosen == 'label')
    (matchup,) = report['matchups']
    assert (matchup['Comparison'], matchup['wins'], matchup['losses']) == ('label vs query', wins, 4 - wins)
    assert report['judgments'] == 4 and report['judgments_per_worker'] == {'bob_sandbox': 4}
    assert report['failed_onboarding'] == ['alice_sandbox']
    against = report['win_rate_against_reference']['label']
    assert (against['wins'], against['judgments']) == (wins, 4)
    assert 0 <= against['ci_low'] <= against['win_rate'] <= against['ci_high'] <= 1
    assert 'Workers who failed onboarding: 1 (excluded with all their judgments)' in done.stdout
    assert (out / 'results.png').stat().st_size > 0


def _turns_worker(driver, launch, worker, practice, fail_practice, shots=()):
    """Do the practice and one unit; returns [(judged text, marked relevant, practice?)]."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    driver.get(launch.url(worker))
    marks = []
    shots = list(shots)
    while True:
        state = _wait_for(driver, 'next', 'done', 'blocked')
        if state == 'blocked':
            return marks, 'blocked'
        if state == 'done':
            # after the practice, Mephisto soon replaces this page with the task (or the refusal)
            try:
                text = driver.find_element(By.ID, 'done').text
            except WebDriverException:  # replaced meanwhile
                text = 'practice'
            if 'practice' not in text:
                return marks, 'done'
            _wait_for(driver, 'next', 'blocked')
            continue
        in_practice = bool(driver.find_elements(By.ID, 'onboarding'))
        turns = driver.find_elements(By.CSS_SELECTOR, '#context .turn')
        roles = [t.get_attribute('data-role') for t in turns]
        assert roles == ['speaker', 'listener'] * (len(roles) // 2)  # alternating, Speaker first
        judged = driver.find_elements(By.CSS_SELECTOR, '#context .turn.judged')
        assert len(judged) == 1 and judged[0] == turns[-1]  # the reply, last
        text = judged[0].find_element(By.CSS_SELECTOR, '.text').text
        index = driver.find_element(By.CSS_SELECTOR, 'fieldset.annotation').get_attribute('id').split('-')[1]
        relevant = (practice[text] != fail_practice) if in_practice else True
        if shots:
            driver.save_screenshot(shots.pop(0))
        assert driver.find_element(By.ID, 'next').get_attribute('disabled')  # nothing ticked yet
        if relevant:
            driver.find_element(By.ID, f'bucket-{index}-relevance').click()
        driver.find_element(By.ID, f'bucket-{index}-fluency').click()
        last = driver.find_element(By.ID, 'next').text == 'Submit'
        driver.find_element(By.ID, 'next').click()
        marks.append((text, relevant, in_practice))
        if last and not in_practice:
            _accept_alert(driver)


def test_turn_annotations_on_mephisto_turn_away_a_failed_practice_and_count_the_marks(inputs, tmp_path):
    from selenium.webdriver.common.by import By

    onboarding = json.loads((inputs / 'turns_onboarding.json').read_text())
    practice = {c[-1]['text']: a['relevance'] for c, a in zip(onboarding['conversations'], onboarding['answers'])}
    launch = Launch(inputs, str(tmp_path / 'run'), 'turns')
    try:
        assert _listening(launch.port) == ['0100007F']
        assert set(_listening(pgid=launch.proc.pid)) <= LOOPBACK
        driver = headless_chromium(tmp_path / 'profile_eve')
        try:
            marks, end = _turns_worker(driver, launch, 'eve', practice, fail_practice=True)
            assert end == 'blocked' and all(p for *_, p in marks) and len(marks) == 2
            assert 'its practice did not qualify you' in driver.find_element(By.ID, 'blocked').text
            driver.save_screenshot(os.path.join(ARTIFACTS, 'parlai_empathy_crowd_turns_blocked.png'))
        finally:
            driver.quit()
        driver = headless_chromium(tmp_path / 'profile_frank')
        try:
            shots = [
                os.path.join(ARTIFACTS, f'parlai_empathy_crowd_turns_{n}.png')
                for n in ('practice', 'practice_2', 'task')
            ]
            marks, end = _turns_worker(driver, launch, 'frank', practice, fail_practice=False, shots=shots)
            assert end == 'done'
        finally:
            driver.quit()
        assert launch.wait() == 0, launch.log()[-3000:]
    finally:
        launch.stop()
    task_marks = [m for m in marks if not m[2]]
    assert len(task_marks) == 4 and len(marks) == 6

    out = tmp_path / 'results'
    parlai('empathy_acute_analyze', '--run-dir', tmp_path / 'run', '--outdir', out, cwd=tmp_path)
    report = json.loads((out / 'results.json').read_text())
    buckets = {b['bucket']: (b['marked'], b['replies']) for b in report['buckets']}
    assert buckets['Relevant'] == (4, 4) and buckets['Fluent'] == (4, 4)
    assert buckets['Empathetic'] == (0, 4) and buckets['None of these'] == (0, 4)
    assert report['failed_onboarding'] == ['eve_sandbox'] and report['model'] == 'label'
    judged = (out / 'judgments.csv').read_text()
    assert judged.count('frank_sandbox') == 4  # each annotation found its item again


def test_mturk_sandbox_dry_run_prints_the_cost_and_validated_requests(inputs, tmp_path):
    done = parlai(
        'empathy_acute_run',
        '--inputs',
        inputs,
        '--run-dir',
        tmp_path / 'run',
        '--provider',
        'mturk_sandbox',
        '--requester',
        'my-aws-profile',
        '--reward',
        '0.8',
        '--annotations-per-pair',
        2,
        '--public-url',
        'https://tasks.example.org',
        '--dry-run',
        'true',
        cwd=tmp_path,
    )
    assert "cost: 2 HITs x $0.80 = $1.60 + MTurk's 20% fee $0.32 = $1.92" in done.stdout
    decoder, text, requests = json.JSONDecoder(), done.stdout, []
    while '{' in text:
        obj, end = decoder.raw_decode(text[text.index('{') :])
        requests.append(obj)
        text = text[text.index('{') + end :]
    assert [r['operation'] for r in requests] == ['CreateHITType'] + ['CreateHITWithHITType'] * 2
    assert requests[0]['params']['Reward'] == '0.8'
    assert 'https://tasks.example.org' in requests[1]['params']['Question']
    assert 'dry run: nothing launched' in done.stdout
    assert not os.path.exists(tmp_path / 'run' / 'mephisto' / 'database.db')


@pytest.mark.parametrize(
    'args, message',
    [
        (['--provider', 'mturk'], '--provider mturk needs --requester'),
        (['--provider', 'mturk_sandbox', '--requester', 'p'], 'MTurk workers cannot reach 127.0.0.1'),
        (['--question', 'charm'], '--question must be one of empathy, relevance, fluency, overall'),
        (['--inputs', 'nowhere'], 'nowhere/pairings.jsonl: missing; write the inputs with parlai empathy_acute_build'),
    ],
)
def test_run_refuses_bad_options_in_one_line(inputs, tmp_path, args, message):
    base = {'--inputs': str(inputs), '--run-dir': str(tmp_path / 'run')}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    done = parlai(
        'empathy_acute_run', *[x for kv in base.items() for x in kv], '--dry-run', 'true', cwd=tmp_path, check=False
    )
    assert done.returncode != 0 and message in done.stderr
    assert 'Traceback' not in done.stderr


def test_build_refuses_bad_inputs_in_one_line(world_logs, tmp_path):
    broken = tmp_path / 'broken.jsonl'
    lines = open(world_logs['label'], encoding='utf-8').read().splitlines()
    broken.write_text('\n'.join(lines[:3] + ['{"dialog": [[{"text": "hi"}]]}'] + lines[3:]) + '\n')
    cases = [
        ([f'a={world_logs["label"]}'], 'ACUTE-Eval compares 2 or more models'),
        (
            [f'a={world_logs["label"]}', f'b={broken}'],
            f"{broken}:4: 'dialog'[0] must be [teacher message, model message]",
        ),
        ([f'a={world_logs["label"]}', f'a={world_logs["query"]}'], 'model names must be unique'),
    ]
    for logs, message in cases:
        done = parlai(
            'empathy_acute_build', '--outdir', tmp_path / 'out', '--world-logs', *logs, cwd=tmp_path, check=False
        )
        assert done.returncode != 0 and message in done.stderr, done.stderr[-2000:]
        assert 'Traceback' not in done.stderr
    done = parlai(
        'empathy_acute_build',
        '--outdir',
        tmp_path / 'out',
        '--world-logs',
        f'a={world_logs["label"]}',
        f'b={world_logs["query"]}',
        '--annotate',
        'c',
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode != 0 and '--annotate c: not one of the models (a, b)' in done.stderr


def test_analyze_refuses_a_folder_that_is_no_run(tmp_path):
    require_crowd()
    done = parlai(
        'empathy_acute_analyze', '--run-dir', tmp_path, '--outdir', tmp_path / 'out', cwd=tmp_path, check=False
    )
    assert done.returncode != 0 and 'launch.json: missing' in done.stderr
    assert 'Traceback' not in done.stderr


def test_prepare_crowd_keeps_mephisto_out_of_home_and_site_packages(tmp_path):
    require_crowd()
    import sysconfig

    code = (
        'import sys; from parlai_empathy.integration import compat\n'
        f'compat.prepare_crowd({str(tmp_path / "run")!r})\n'
        'from mephisto.operations.operator import Operator\n'
        'from mephisto.utils.dirs import get_mephisto_tmp_dir, get_root_data_dir\n'
        'print(get_mephisto_tmp_dir()); print(get_root_data_dir())\n'
        f'compat.prepare_crowd({str(tmp_path / "run")!r})  # the same folder again: nothing to do\n'
        'try:\n'
        f'    compat.prepare_crowd({str(tmp_path / "other")!r})\n'
        'except compat.CrowdVersionError as err:\n'
        '    print("refused:", err)\n'
    )
    site_tmp = os.path.join(sysconfig.get_paths()['purelib'], 'tmp')
    existed = os.path.exists(site_tmp)
    done = subprocess.run(
        [os.path.join(VENV_BIN, 'python'), '-c', code],
        capture_output=True,
        text=True,
        env=dict(os.environ, HOME=str(tmp_path / 'home')),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    tmp_dir, data_dir, refused = done.stdout.strip().splitlines()[-3:]
    assert (tmp_dir, data_dir) == (str(tmp_path / 'run' / 'tmp'), str(tmp_path / 'run' / 'data'))
    assert refused.startswith('refused: mephisto.') and 'one crowd run folder per process' in refused
    assert not (tmp_path / 'home' / '.mephisto').exists()  # import mephisto wrote no config there
    assert (tmp_path / 'run' / 'config' / 'config.yml').is_file()
    assert os.path.exists(site_tmp) == existed


def test_a_killed_run_leaves_its_router_to_stop_routers_and_starts_again_in_its_folder(inputs, tmp_path):
    from parlai_empathy.humaneval.crowd.launch import stop_routers

    run_dir = str(tmp_path / 'run')
    launch = Launch(inputs, run_dir, 'acute')
    os.killpg(launch.proc.pid, signal.SIGKILL)  # no chance to shut anything down
    launch.proc.wait(timeout=30)
    assert _listening(launch.port) == ['0100007F']  # the router, in a group of its own, survived
    assert stop_routers(run_dir) == 1
    assert _listening(launch.port) == []
    again = Launch(inputs, run_dir, 'acute')  # the same folder: a new task run of the same task
    try:
        assert 'run 2' in again.log()
    finally:
        again.stop()
    assert _listening(again.port) == []


HOSTILE_REQUESTS = [  # (method, path, content type, body)
    ('GET', '/download_file/..%2Fetc%2Fhostname', None, None),  # Mephisto's router served any file
    ('GET', '/download_file/x', None, None),
    ('GET', '/%2e%2e/%2e%2e/etc/hostname', None, None),
    ('POST', '/request_agent', 'application/json', '{}'),
    ('POST', '/request_agent', 'application/json', '[]'),
    ('POST', '/request_agent', 'application/json', '"x"'),
    ('POST', '/request_agent', 'application/json', '{"provider_data": 5}'),
    ('POST', '/request_agent', 'application/json', '{"provider_data": {"worker_name": {"$gt": ""}}}'),
    (
        'POST',
        '/request_agent',
        'application/json',
        '{"provider_data": {"worker_name": "w", "agent_registration_id": "' + 'a' * 5000 + '"}}',
    ),
    ('POST', '/request_agent', 'application/json', '{"provider_data": '),
    ('POST', '/submit_onboarding', 'application/json', '{}'),
    (
        'POST',
        '/submit_onboarding',
        'application/json',
        '{"provider_data": {"USED_AGENT_ID": "1", "onboarding_data": 3}}',
    ),
    ('POST', '/submit_task', 'application/json', '{}'),
    ('POST', '/submit_task', 'application/json', '{"USED_AGENT_ID": "1", "final_string_data": "{not json"}'),
    ('POST', '/submit_task', 'application/json', '{"USED_AGENT_ID": "1", "final_data": [1]}'),
    (
        'POST',
        '/submit_task',
        'multipart/form-data; boundary=b',
        '--b\r\nContent-Disposition: form-data; name="f"; filename="x.txt"\r\n\r\nhello\r\n--b--\r\n',
    ),
    ('POST', '/submit_task', 'application/json', '{"USED_AGENT_ID": "' + 'x' * 300_000 + '"}'),
    ('POST', '/submit_metadata', 'application/json', '{"metadata": 1}'),
    ('POST', '/log_error', 'application/json', '[1, 2]'),
    ('POST', '/log_error', 'text/plain', 'hello'),
    ('POST', '/', 'application/x-www-form-urlencoded', 'a[b][c][d][e][f]=1&' * 2000),
]


def test_every_route_of_the_router_answers_hostile_input_with_a_4xx(inputs, tmp_path):
    import requests

    launch = Launch(inputs, str(tmp_path / 'run'), 'acute')
    base = f'http://127.0.0.1:{launch.port}'
    try:
        answers = []
        for method, path, content_type, body in HOSTILE_REQUESTS:
            headers = {'Content-Type': content_type} if content_type else {}
            url = base + path
            prepared = requests.Request(method, url, headers=headers, data=body).prepare()
            prepared.url = url  # as sent, "../" and %2F included
            answer = requests.Session().send(prepared, timeout=10)
            answers.append((method, path[:40], answer.status_code, answer.text[:80]))
        assert all(400 <= status < 500 for _, _, status, _ in answers), answers
        hostname = open('/etc/hostname').read().strip()
        assert not any(text.strip() == hostname for *_, text in answers)
        assert requests.get(base + '/', timeout=10).status_code == 200  # still serving
        assert requests.get(base + '/task_config.json', timeout=10).status_code == 200
        assert 'workers open' in launch.log() and launch.proc.poll() is None
    finally:
        launch.stop()
