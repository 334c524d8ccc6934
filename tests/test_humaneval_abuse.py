"""Attacks on the rating server, each mounted for real: draining the pool through the published
entry link, racing one worker's starts, squatting on someone's participant id, forged MTurk
assignments, hostile inputs to every route, and a huge streamed body.

The squatter, lease and body tests run against a real uvicorn process on 127.0.0.1; clients
play distinct addresses by connecting from 127.0.0.x (Linux loopback accepts any of them)."""

import collections
import re
import socket
import sqlite3
import threading
import time
from urllib.parse import quote

import pandas as pd
import pytest

from humaneval_helpers import Server, cached_world_logs, entry_link, peak_rss_kb, session_from, stream_chunked
from parlai_empathy.humaneval import analysis, providers
from parlai_empathy.humaneval.build import build_task

RATING = {'empathy': '4', 'relevance': '2', 'fluency': '5'}
SLOT_RE = re.compile(r'name="slot" value="(\d+)"')


@pytest.fixture(scope='module')
def logs(tmp_path_factory):
    return cached_world_logs(tmp_path_factory)


def _task(logs, path, **kw):
    kw.setdefault('annotators', 1)
    kw.setdefault('checks_per_assignment', 0)
    return build_task(str(path), 'likert', ['gold=' + logs['gold'], 'echo=' + logs['echo']], **kw)


def _finish(session, link):
    """Answer every item of the worker's current assignment; the final page's text."""
    page = session.get(link).text
    while True:
        match = SLOT_RE.search(page)
        if not match:
            return page
        r = session.post(link + '/answer', data=dict(RATING, slot=match.group(1)))
        assert r.status_code == 200, r.text[-400:]
        page = r.text


def _sql(db_path, query, args=()):
    con = sqlite3.connect(db_path)
    try:
        return con.execute(query, args).fetchall()
    finally:
        con.close()


# -- draining the pool ------------------------------------------------------------------------
def test_a_squatter_on_the_entry_link_leaves_units_for_honest_workers(logs, tmp_path):
    """36 scripted entries and starts from one address, beside honest participants from
    others: the honest ones all get units and finish, the squatter holds at most its cap."""
    db_path = tmp_path / 'pool.db'
    db = _task(logs, db_path, num_items=20, items_per_assignment=3)  # 40 units, 14 assignments
    server = Server(str(db_path)).start()
    squatter = session_from('127.0.0.66')
    reserved, refused = [], []

    def squat():
        for i in range(36):
            r = squatter.get(entry_link(db, server.base, f'SQUAT{i}', f'SESS{i}'))
            if r.status_code != 200:
                refused.append(r.status_code)
                continue
            started = squatter.post(r.url + '/start')
            if 'name="slot"' in started.text:
                reserved.append(r.url)
            else:
                refused.append(started.status_code)

    try:
        t0 = time.monotonic()
        squat()  # the squatter goes first, as fast as it can
        squat_s = time.monotonic() - t0
        results = {}

        def honest(i):
            s = session_from(f'127.0.0.{10 + i}')
            r = s.get(entry_link(db, server.base, f'HONEST{i}', f'HS{i}'))
            assert r.status_code == 200, r.text[-300:]
            started = s.post(r.url + '/start')
            results[i] = (
                started.status_code,
                'name="slot"' in started.text,
                _finish(s, r.url) if 'name="slot"' in started.text else started.text,
            )

        threads = [threading.Thread(target=honest, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        server.kill()
    print(f'squatter: {len(reserved)} reservations, {len(refused)} refusals in {squat_s:.1f} s')
    for i, (status, got_units, final) in sorted(results.items()):
        assert got_units, f'honest worker {i} got no units (HTTP {status}): {final[-300:]}'
        assert 'id="completion-code"' in final
    assert len(reserved) <= 2 and set(refused) == {429}
    held = _sql(
        str(db_path), 'SELECT COUNT(*) FROM assignments WHERE client = ? AND completed IS NULL', ('127.0.0.66',)
    )[0][0]
    assert held <= 2
    assert _sql(str(db_path), "SELECT COUNT(*) FROM workers WHERE external_id LIKE 'SQUAT%'")[0][0] <= 6


def test_concurrent_starts_give_one_worker_one_assignment(logs, tmp_path):
    """Many starts of one worker sent at the same instant on open connections: one assignment."""
    db_path = tmp_path / 'race.db'
    db = _task(logs, db_path, num_items=30, items_per_assignment=2)
    server = Server(str(db_path)).start()
    try:
        for _round in range(3):
            link = providers.local_links(db, server.base, 1)[0]
            path = link[len(server.base) :] + '/start'
            request = (
                f'POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'
            ).encode()
            socks = [socket.create_connection(('127.0.0.1', server.port), timeout=60) for _ in range(16)]
            barrier = threading.Barrier(len(socks))

            def fire(sock, barrier=barrier, request=request):
                barrier.wait()
                sock.sendall(request)
                sock.recv(100)
                sock.close()

            threads = [threading.Thread(target=fire, args=(s,)) for s in socks]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
    finally:
        server.kill()
    per_worker = _sql(str(db_path), 'SELECT worker_id, COUNT(*) FROM assignments GROUP BY worker_id')
    assert len(per_worker) == 3 and all(n == 1 for _w, n in per_worker), per_worker


def test_two_starts_that_both_saw_no_open_assignment_still_give_one(logs, tmp_path):
    """The race behind concurrent starts, made deterministic: two connections (two request
    threads, or two server processes on one database) each claim for a worker that had no open
    assignment when they looked. The claim itself must see the other's assignment."""
    from parlai_empathy.humaneval.db import TaskDB

    db_path = tmp_path / 'race2.db'
    db = _task(logs, db_path, num_items=12, items_per_assignment=2)
    other = TaskDB(str(db_path))
    worker = db.add_worker('local')
    assert db.open_assignment(worker['worker_id']) is None
    assert other.open_assignment(worker['worker_id']) is None
    first = db.claim(worker['worker_id'])
    second = other.claim(worker['worker_id'])
    assert first == second
    assert _sql(str(db_path), 'SELECT COUNT(*) FROM assignments')[0][0] == 1
    with pytest.raises(sqlite3.IntegrityError):  # and the schema refuses a second open one
        con = sqlite3.connect(str(db_path))
        con.execute(
            'INSERT INTO assignments (worker_id, created, last_active, completion_code) VALUES (?, 0, 0, ?)',
            (worker['worker_id'], 'X'),
        )
        con.commit()


def test_leases_are_renewed_by_answers_only_and_unanswered_holds_give_way(logs, tmp_path):
    """Two assignments of work in the pool. Holds without an answer give way to a newcomer, oldest
    first; page views renew nothing; an answer confirms a hold, which then lapses only after the
    lease without answers; leaving releases at once; a returning worker never rates a unit that
    others have filled."""
    db_path = tmp_path / 'lease.db'
    db = _task(logs, db_path, num_items=2, items_per_assignment=2, lease_seconds=3)
    default_lease = _task(logs, tmp_path / 'default.db', num_items=2).config['lease_seconds']
    assert default_lease <= 600  # minutes, not an hour
    server = Server(str(db_path)).start()
    try:
        a, b, c, d = providers.local_links(db, server.base, 4)
        sa, sb, sc, sd = (session_from(f'127.0.0.{21 + i}') for i in range(4))
        assert 'name="slot"' in sa.post(a + '/start').text
        assert 'name="slot"' in sb.post(b + '/start').text
        for _ in range(3):  # a keeps looking at its items: no renewal, no protection
            sa.get(a)
        page = sc.post(c + '/start').text  # the pool is held, by holds without answers: a gives way
        assert 'name="slot"' in page
        assert 'id="start"' in sa.get(a).text or 'name="slot"' not in sa.get(a).text
        reason = _sql(str(db_path), 'SELECT release_reason FROM assignments ORDER BY assignment_id')
        assert reason == [('preempted',), (None,), (None,)]
        r = sc.post(c + '/answer', data=dict(RATING, slot=SLOT_RE.search(page).group(1)))
        assert r.status_code == 200  # c confirmed: its items are held for the lease
        left = sb.post(b + '/leave')  # b gives its task back
        assert left.status_code == 200 and 'id="left"' in left.text
        assert 'name="slot"' in sd.post(d + '/start').text
        _finish(sc, c)
        _finish(sd, d)
        back = _finish(sa, a)  # a returns: its units were filled meanwhile
        assert 'name="slot"' not in back
    finally:
        server.kill()
    over = _sql(
        str(db_path),
        'SELECT u.unit_id, u.needed, COUNT(a.answer_id) FROM units u JOIN '
        'answers a USING (unit_id) GROUP BY u.unit_id HAVING COUNT(a.answer_id) > '
        'u.needed',
    )
    assert over == []


def test_twenty_squatters_beside_thirty_honest_participants_every_honest_one_is_served(logs, tmp_path):
    """20 squatting clients, each from its own loopback address, forge well-formed Prolific ids,
    start tasks as fast as they may and keep reloading their pages and starting again, holding the
    whole pool before anyone honest arrives; 30 honest participants, each from its own address,
    then arrive together. Every honest one gets work and a completion code, every answer
    acknowledged is stored once, no unit is rated more often than it needs, nothing gets a 5xx."""
    db_path = tmp_path / 'squat.db'
    db = _task(logs, db_path, num_items=40, items_per_assignment=2)  # 80 units: 40 assignments
    server = Server(str(db_path)).start()
    statuses, stop = [], threading.Event()

    def squatter(n, rounds):
        s = session_from(f'127.0.1.{n + 1}')
        links = []
        for i in range(6):  # the per-address cap of new participants
            r = s.get(
                entry_link(
                    db, server.base, f'5f{n:02d}{i:020x}', f'6a{n:02d}{i:020x}', study='64c0ffee00000000000000aa'
                )
            )
            statuses.append(r.status_code)
            if r.status_code == 200:
                links.append(r.url)
                statuses.append(s.post(r.url + '/start').status_code)
        for _ in range(rounds):  # keep the holds: reload, start again
            if stop.is_set():
                break
            for link in links:
                statuses.append(s.get(link).status_code)
                statuses.append(s.post(link + '/start').status_code)
        return links

    squatters = [threading.Thread(target=squatter, args=(n, 0)) for n in range(20)]
    for t in squatters:
        t.start()
    for t in squatters:
        t.join(300)
    held = _sql(str(db_path), 'SELECT COUNT(*) FROM assignments WHERE completed IS NULL AND released IS NULL')[0][0]
    results, acknowledged = {}, collections.Counter()

    def honest(i):
        s = session_from(f'127.0.2.{i + 1}')
        r = s.get(entry_link(db, server.base, f'60{i:022x}', f'61{i:022x}', study='64c0ffee00000000000000aa'))
        statuses.append(r.status_code)
        link, page = r.url, ''
        for _ in range(10):  # a participant presses start (again, if its task went elsewhere)
            page = s.post(link + '/start').text
            while True:
                match = SLOT_RE.search(page)
                if not match:
                    break
                answer = s.post(link + '/answer', data=dict(RATING, slot=match.group(1)))
                statuses.append(answer.status_code)
                if answer.status_code == 200:
                    acknowledged[i] += 1
                page = answer.text if answer.status_code == 200 else s.get(link).text
            if 'id="completion-code"' in page:
                break
        results[i] = page

    background = [threading.Thread(target=squatter, args=(n, 40)) for n in range(20)]
    try:
        for t in background:
            t.start()
        honest_threads = [threading.Thread(target=honest, args=(i,)) for i in range(30)]
        for t in honest_threads:
            t.start()
        for t in honest_threads:
            t.join(300)
    finally:
        stop.set()
        for t in background:
            t.join(300)
        server.kill()
    print(f'squatters held {held} of 40 assignments before the honest came; {collections.Counter(statuses)}')
    assert held == 40  # the squatters held the whole pool
    served = [i for i, page in results.items() if 'id="completion-code"' in page]
    assert sorted(served) == list(range(30)), {i: p[-300:] for i, p in results.items() if i not in served}
    assert not [code for code in statuses if code >= 500]
    stored = dict(
        _sql(
            str(db_path),
            'SELECT w.external_id, COUNT(*) FROM answers a JOIN workers w '
            "USING (worker_id) WHERE w.external_id LIKE '60%' GROUP BY w.external_id",
        )
    )
    assert stored == {f'60{i:022x}': n for i, n in acknowledged.items()} and sum(stored.values()) >= 30
    over = _sql(
        str(db_path),
        'SELECT u.unit_id FROM units u JOIN answers a USING (unit_id) GROUP BY '
        'u.unit_id HAVING COUNT(a.answer_id) > u.needed',
    )
    assert over == []


# -- identity by typing an id -----------------------------------------------------------------
def test_participant_ids_need_the_platform_binding(logs, tmp_path):
    db_path = tmp_path / 'pid.db'
    db = _task(logs, db_path, num_items=6, items_per_assignment=2)
    server = Server(str(db_path)).start()
    try:
        s = session_from('127.0.0.31')
        entry = providers.generic_entry_url(db, server.base).split('&', 1)[0]
        typed = s.get(entry + '&worker_id=alice')  # no session id from a platform
        assert typed.status_code == 400 and 'SESSION_ID is missing' in typed.text
        no_study = s.get(entry + '&PROLIFIC_PID=P1&SESSION_ID=S1')
        assert no_study.status_code == 400 and 'STUDY_ID is missing' in no_study.text
        # a squatter registers under the real participant's id first, with a made-up session
        squat = s.get(entry_link(db, server.base, 'REALPID', 'MADEUP'))
        assert squat.url.startswith(server.base + '/w/w')
        assert 'name="slot"' in s.post(squat.url + '/start').text
        _finish(s, squat.url)
        # the real participant arrives with the session id Prolific issued: own link, own work
        real = session_from('127.0.0.32')
        mine = real.get(entry_link(db, server.base, 'REALPID', 'PROLIFIC-SESSION-1'))
        assert mine.status_code == 200 and mine.url != squat.url
        assert 'name="slot"' in real.post(mine.url + '/start').text
        assert 'id="completion-code"' in _finish(real, mine.url)
        again = real.get(entry_link(db, server.base, 'REALPID', 'PROLIFIC-SESSION-1'))
        assert again.url == mine.url  # the same binding comes back to the same worker
    finally:
        server.kill()
    out = analysis.analyze(str(db_path), str(tmp_path / 'out'))
    held = pd.read_csv(out['unverified'])
    assert set(held['external_id']) == {'REALPID'} and len(held) == 2  # both held back
    export = tmp_path / 'prolific.csv'
    export.write_text('Submission id,Participant id,Status\nPROLIFIC-SESSION-1,REALPID,APPROVED\n')
    out = analysis.analyze(str(db_path), str(tmp_path / 'out2'), prolific_submissions=str(export))
    held = pd.read_csv(out['unverified'])
    assert list(held['binding']) == ['STUDY1/MADEUP']  # only the squatter's answers are out
    assert pd.read_csv(out['csv'])['ratings'].sum() == 2  # the real participant's two answers


# -- forged MTurk assignments -----------------------------------------------------------------
class FakeClientError(LookupError):
    def __init__(self, code):
        super().__init__(code)
        self.response = {'Error': {'Code': code, 'Message': code}}


class FakeMTurk:
    """What MTurk knows: our HITs and the assignments submitted so far (no network)."""

    def __init__(self, hits, assignments):
        self.hits, self.assignments, self.calls = set(hits), dict(assignments), []

    def get_hit(self, HITId):
        self.calls.append(('get_hit', HITId))
        if HITId not in self.hits:
            raise FakeClientError('RequestError')
        return {'HIT': {'HITId': HITId}}

    def get_assignment(self, AssignmentId):
        self.calls.append(('get_assignment', AssignmentId))
        if AssignmentId not in self.assignments:
            raise FakeClientError('RequestError')
        return {'Assignment': dict(self.assignments[AssignmentId], AssignmentId=AssignmentId)}


def _mturk_answers(client, db, params):
    r = client.get(
        '/mturk?entry=' + db.links.entry('mturk') + '&' + '&'.join(f'{k}={quote(v)}' for k, v in params.items())
    )
    if r.status_code != 200 or 'id="start"' not in r.text:
        return r.status_code, r.text
    link = r.url.path
    client.post(link + '/start')
    page = client.get(link).text
    while SLOT_RE.search(page):
        page = client.post(link + '/answer', data=dict(RATING, slot=SLOT_RE.search(page)[1])).text
    return 200, page


def test_forged_mturk_assignments_are_refused_or_not_counted(logs, tmp_path):
    from fastapi.testclient import TestClient

    from parlai_empathy.humaneval.app import create_app

    db_path = tmp_path / 'mturk.db'
    db = _task(logs, db_path, num_items=8, items_per_assignment=2)
    real = {
        'assignmentId': 'REALASG1',
        'workerId': 'REALWKR1',
        'hitId': 'OURHIT1',
        'turkSubmitTo': 'https://workersandbox.mturk.com',
    }
    forged = dict(real, assignmentId='MADEUPASG', workerId='MADEUPWKR')
    # no MTurk client at the entry (no credentials): both get in, as before ...
    plain = TestClient(create_app(str(db_path)), client=('127.0.0.41', 5000))
    assert _mturk_answers(plain, db, real)[0] == 200
    assert _mturk_answers(plain, db, forged)[0] == 200
    # ... but the analysis counts no MTurk answer it cannot verify, and says so
    out = analysis.analyze(str(db_path), str(tmp_path / 'none'))
    held = pd.read_csv(out['unverified'])
    assert set(held['external_id']) == {'REALWKR1', 'MADEUPWKR'}
    assert 'MTurk answers left out: nothing to verify them against' in open(out['markdown']).read()
    mturk = FakeMTurk(
        {'OURHIT1'}, {'REALASG1': {'WorkerId': 'REALWKR1', 'HITId': 'OURHIT1', 'AssignmentStatus': 'Submitted'}}
    )
    out = analysis.analyze(str(db_path), str(tmp_path / 'api'), mturk=analysis.mturk_verifier(mturk))
    held = pd.read_csv(out['unverified'])
    assert list(held['external_id']) == ['MADEUPWKR'] and held['answers'].sum() == 2
    assert 'not confirmed by MTurk' in held['reason'][0]
    assert pd.read_csv(out['csv'])['ratings'].sum() == 2  # the real worker's two
    export = tmp_path / 'batch.csv'
    export.write_text(
        'HITId,AssignmentId,WorkerId,AssignmentStatus\n'
        'OURHIT1,REALASG1,REALWKR1,Approved\nOURHIT1,MADEUPASG,SOMEONE,Approved\n'
    )
    out = analysis.analyze(str(db_path), str(tmp_path / 'file'), mturk=analysis.mturk_verifier(export_path=str(export)))
    held = pd.read_csv(out['unverified'])
    assert list(held['external_id']) == ['MADEUPWKR'] and 'SOMEONE' in held['reason'][0]

    # with a client at the entry, a HIT that is not ours is refused before anything is stored
    checked = TestClient(create_app(str(db_path), mturk_api=mturk), client=('127.0.0.42', 5000))
    before = _sql(str(db_path), 'SELECT COUNT(*) FROM workers')[0][0]
    status, text = _mturk_answers(checked, db, dict(forged, hitId='NOTOURHIT', assignmentId='OTHERASG'))
    assert status == 403 and 'does not know HIT NOTOURHIT' in text
    mturk.assignments['STOLENASG'] = {'WorkerId': 'VICTIM', 'HITId': 'OURHIT1', 'AssignmentStatus': 'Submitted'}
    status, _ = _mturk_answers(checked, db, dict(real, assignmentId='STOLENASG'))
    assert status == 403
    assert _sql(str(db_path), 'SELECT COUNT(*) FROM workers')[0][0] == before
    assert _mturk_answers(checked, db, dict(real, assignmentId='REALASG2'))[0] == 200


# -- hostile inputs to every route ------------------------------------------------------------
HOSTILE_VALUES = [
    '\u0661',
    '\uff15',
    '\u00b2',
    '%ED%A0%80',
    '%00',
    '\x00'.join('ab'),
    '9' * 40,
    'x' * 20000,
    '%FF%FE',
    '<script>',
    '-1',
    '1e3',
    ' 1',
    '1\n',
    '',
]
CONTENT_TYPES = [
    'application/x-www-form-urlencoded',
    'application/json',
    'text/plain;;;;',
    'multipart/form-data; boundary=',
    'application/x-www-form-urlencoded; charset=utf-7',
    'a/b/c/d; x="y',
    '',
]


def _paths(app, tokens):
    """Every route of the app with its path parameters filled with good and hostile values."""
    from starlette.routing import Mount

    out = []
    for route in app.routes:
        if isinstance(route, Mount):
            out.append((route.path + '/style.css', {'GET'}, True))
            out.append((route.path + '/..%2f..%2fapp.py', {'GET'}, False))
            continue
        methods = set(route.methods or {'GET'}) - {'HEAD'}
        if '{token}' in route.path:
            for n, token in enumerate(tokens):  # the first two are genuine links
                out.append((route.path.replace('{token}', token), methods, n < 2))
        else:
            assert '{' not in route.path, f'{route.path}: fill in its new path parameter here'
            out.append((route.path, methods, True))
    return out


def test_hostile_inputs_to_every_route_get_4xx_not_5xx(logs, tmp_path):
    from fastapi.testclient import TestClient

    from parlai_empathy.humaneval.app import create_app

    db_path = tmp_path / 'fuzz.db'
    db = _task(logs, db_path, num_items=6, items_per_assignment=2)
    app = create_app(str(db_path))
    client = TestClient(app, raise_server_exceptions=False)
    worker = db.add_worker('local')
    client.post(f'/w/{worker["token"]}/start')
    slot = str(db.slots(db.open_assignment(worker['worker_id'])['assignment_id'])[0]['slot_id'])
    mturk_worker = db.add_worker('mturk', 'FUZZW')
    assignment = db.claim(mturk_worker['worker_id'], 'mturk:FUZZA', 'https://www.mturk.com')
    tokens = [
        worker['token'],
        db.assignment_token(assignment),
        'w\u0661.' + 'A' * 22,
        'w1.' + '\uff21' * 22,
        '%ED%A0%80',
        '%00',
        'w' + '9' * 30 + '.' + 'A' * 22,
        'a' * 5000,
        'w1.%FF%FE',
    ]
    entries = {'generic': db.links.entry('generic'), 'mturk': db.links.entry('mturk')}
    queries = ['', 'token=x', 'entry=' + entries['generic'] + '&entry=' + entries['generic']]
    for name in (
        'entry',
        'PROLIFIC_PID',
        'STUDY_ID',
        'SESSION_ID',
        'worker_id',
        'assignmentId',
        'workerId',
        'hitId',
        'turkSubmitTo',
    ):
        for value in HOSTILE_VALUES:
            base = {
                'entry': entries['generic'],
                'PROLIFIC_PID': 'P1',
                'STUDY_ID': 'S',
                'SESSION_ID': 'X',
                'assignmentId': 'A1',
                'workerId': 'W1',
                'hitId': 'H',
                'turkSubmitTo': 'https://www.mturk.com',
            }
            base[name] = value
            queries.append('&'.join(f'{k}={v if "%" in v else quote(v)}' for k, v in base.items()))
    queries.append('a=' + 'b' * 60000)  # an overlong query string (httpx sends at most 64 KiB)
    good_form = dict(RATING, slot=slot)
    bodies = [
        b'',
        b'slot=' + slot.encode() + b'&slot=' + slot.encode(),
        b'\xff\xfe\x00',
        b'slot=%ED%A0%80',
        b'=&&==',
        b'slot=' + b'1' * 5000,
    ]
    for field in ('slot', 'empathy', 'relevance', 'fluency'):
        for value in HOSTILE_VALUES:
            form = dict(good_form, **{field: value})
            bodies.append('&'.join(f'{k}={v if "%" in v else quote(v)}' for k, v in form.items()).encode())
    headers = [
        {},
        {'Authorization': b'Bearer \xff\xfe'},
        {'Authorization': 'Basic //79'},
        {'Authorization': 'Basic ' + '=' * 9},
        {'Authorization': 'Digest x'},
        {'Authorization': 'Bearer ' + db.config['admin_token']},
    ]
    seen, failures = 0, []

    def check(method, url, **kw):
        nonlocal seen
        r = client.request(method, url, **kw)
        seen += 1
        if r.status_code >= 500:
            failures.append((method, url[:120], {k: str(v)[:80] for k, v in kw.items()}, r.status_code, r.text[-200:]))
        return r

    paths = _paths(app, tokens)
    for path, methods, genuine in paths:
        for method in sorted(methods | {'PUT', 'DELETE', 'PATCH', 'OPTIONS'}):  # wrong ones too
            for query in queries[:: 1 if method in methods and genuine else 25]:
                for header in headers[:: 1 if query == '' else 6]:
                    check(method, path + ('?' + query if query else ''), headers=header)
        for method in methods:
            for body in bodies[:: 1 if genuine else 7]:
                for ctype in CONTENT_TYPES[:: 1 if body is bodies[0] else 3]:
                    check(method, path, content=body, headers={'Content-Type': ctype} if ctype else {})

            def twenty_mb():
                for _ in range(20):
                    yield b'slot=' + b'1' * (1 << 20)

            check(method, path, content=twenty_mb(), headers={'Content-Type': 'application/x-www-form-urlencoded'})
    # the answer the good form gives is stored once, the hostile ones nothing
    assert not failures, f'{len(failures)} of {seen} requests got 5xx, e.g. {failures[:5]}'
    assert seen > 1000


# -- a huge streamed body ---------------------------------------------------------------------
def test_a_huge_chunked_body_is_refused_without_being_held(logs, tmp_path):
    db_path = tmp_path / 'body.db'
    db = _task(logs, db_path, num_items=4, items_per_assignment=2)
    server = Server(str(db_path)).start()
    try:
        token = providers.local_links(db, server.base, 1)[0].rsplit('/', 1)[1]
        stream_chunked('127.0.0.1', server.port, f'/w/{token}/answer', 1 << 20)  # warm up
        before = peak_rss_kb(server.proc.pid)
        result = stream_chunked('127.0.0.1', server.port, f'/w/{token}/answer', 100 << 20)
        grown_mb = (peak_rss_kb(server.proc.pid) - before) / 1024
        assert server.proc.poll() is None
        health = session_from('127.0.0.1').get(server.base + '/healthz')
    finally:
        server.kill()
    print(f'100 MB chunked body: status {result["status"]}, server peak RSS +{grown_mb:.1f} MB')
    assert result['status'] in (413, None)  # None: the server closed first, as it may
    assert health.status_code == 200
    assert grown_mb < 20, f'the server grew {grown_mb:.0f} MB for a 100 MB body'


def test_a_client_that_goes_away_mid_form_is_one_line_in_the_log(logs, tmp_path):
    db_path = tmp_path / 'gone.db'
    db = _task(logs, db_path, num_items=2, items_per_assignment=2)
    server = Server(str(db_path)).start()
    try:
        link = providers.local_links(db, server.base, 1)[0]
        path = link[len(server.base) :] + '/answer'
        for _ in range(3):
            sock = socket.create_connection(('127.0.0.1', server.port))
            sock.sendall(
                f'POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n'
                'Content-Length: 1000\r\n\r\nslot=1&empathy='.encode()
            )
            sock.close()  # gone before the rest of the body
        time.sleep(1)
        assert session_from('127.0.0.41').get(server.base + '/healthz').text == 'ok'
    finally:
        server.kill()
    log = open(str(db_path) + '.server.log', encoding='utf-8').read()
    assert 'Traceback' not in log and 'Exception in ASGI application' not in log, log[-3000:]
