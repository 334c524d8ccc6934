"""Human evaluation over HTTP against a real uvicorn process: validation, the admin header,
signed links (forged, re-pointed, foreign and replayed ones refused), MTurk preview and
assignmentId/workerId pairs, what the access log may show, and a crash/restart in the middle of
an assignment."""

import csv
import html
import io
import re
import sqlite3

import pytest
import requests

from humaneval_helpers import Server, cached_world_logs
from parlai_empathy.humaneval import providers
from parlai_empathy.humaneval.build import build_task

RATING = {'empathy': '4', 'relevance': '5', 'fluency': '5'}


@pytest.fixture(scope='module')
def logs(tmp_path_factory):
    return cached_world_logs(tmp_path_factory)


def _current_slot(session, url):
    page = session.get(url).text
    match = re.search(r'name="slot" value="(\d+)"', page)
    progress = re.search(r'Conversation (\d+) of (\d+)', page)
    return (int(match.group(1)) if match else None), page, progress


def test_restart_mid_assignment_loses_nothing(logs, tmp_path):
    db_path = str(tmp_path / 'likert.db')
    db = build_task(
        db_path,
        'likert',
        ['gold=' + logs['gold'], 'echo=' + logs['echo']],
        num_items=5,
        annotators=1,
        items_per_assignment=5,
        checks_per_assignment=1,
    )
    server = Server(db_path).start()
    try:
        link = providers.local_links(db, server.base, 1)[0]
        s = requests.Session()
        assert 'Did the responses show understanding of the feelings' in s.get(link).text
        s.post(link + '/start')
        for _ in range(3):
            slot, _page, _ = _current_slot(s, link)
            r = s.post(link + '/answer', data=dict(RATING, slot=slot), allow_redirects=False)
            assert r.status_code == 303
        server.kill()  # crash with the assignment half done
        rows = sqlite3.connect(db_path).execute('SELECT COUNT(*) FROM answers').fetchone()
        assert rows[0] == 3
        server = Server(db_path, server.port).start()
        slot, page, progress = _current_slot(s, link)
        assert progress.groups() == ('4', '6')  # resumes at the 4th of 5 items + 1 check
        while slot is not None:
            s.post(link + '/answer', data=dict(RATING, slot=slot))
            slot, page, _ = _current_slot(s, link)
        code = re.search(r'id="completion-code">([0-9A-F]+)<', page).group(1)
        stored = (
            sqlite3.connect(db_path)
            .execute('SELECT completion_code, completed IS NOT NULL FROM assignments')
            .fetchone()
        )
        assert stored == (code, 1)
        assert sqlite3.connect(db_path).execute('SELECT COUNT(*) FROM answers').fetchone()[0] == 6
    finally:
        server.kill()


def test_answer_validation_and_admin_header(logs, tmp_path):
    db_path = str(tmp_path / 'ab.db')
    db = build_task(
        db_path,
        'ab',
        ['gold=' + logs['gold'], 'echo=' + logs['echo']],
        num_items=6,
        annotators=1,
        items_per_assignment=3,
        checks_per_assignment=1,
    )
    server = Server(db_path).start()
    try:
        w1, w2 = providers.local_links(db, server.base, 2)
        s = requests.Session()
        s.post(w1 + '/start')
        slot, page, _ = _current_slot(s, w1)
        assert 'gold' not in page and 'echo' not in page  # blind
        bad = s.post(w1 + '/answer', data={'slot': slot, 'overall': 'C'})
        assert bad.status_code == 400
        assert "overall: choice must be A, B or tie, got 'C'" in html.unescape(bad.text)
        missing = s.post(w1 + '/answer', data={'slot': slot})
        assert "missing: ['overall']" in html.unescape(missing.text)
        assert s.post(w1 + '/answer', data={'slot': slot, 'overall': 'A', 'x': '1'}).status_code == 400
        assert s.post(w1 + '/answer', data={'slot': 'abc', 'overall': 'A'}).status_code == 400
        big = s.post(w1 + '/answer', data={'slot': slot, 'overall': 'A' * 5000})
        assert big.status_code == 413 and 'form too large' in big.text
        assert s.post(w2 + '/answer', data={'slot': slot, 'overall': 'A'}).status_code == 403
        assert s.post(w1 + '/answer', data={'slot': slot, 'overall': 'tie'}).status_code == 200
        assert s.post(w1 + '/answer', data={'slot': slot, 'overall': 'A'}).status_code == 409

        token = db.config['admin_token']
        plain = s.get(server.base + '/admin')
        assert plain.status_code == 401 and plain.headers['WWW-Authenticate'].startswith('Basic')
        in_url = s.get(server.base + '/admin', params={'token': token})
        assert in_url.status_code == 400 and 'never in the URL' in in_url.text
        assert s.get(server.base + '/admin', headers={'Authorization': 'Bearer wrong'}).status_code == 401
        admin = s.get(server.base + '/admin', auth=('anyone', token))  # HTTP Basic, as browsers
        assert admin.status_code == 200 and 'echo vs gold' in admin.text
        export = s.get(server.base + '/admin/export.csv', headers={'Authorization': f'Bearer {token}'})
        assert export.headers['Content-Type'].startswith('text/csv')
        assert export.headers['X-Content-Type-Options'] == 'nosniff'
        rows = list(csv.DictReader(io.StringIO(export.text)))
        assert len(rows) == 1 and '"tie"' in rows[0]['answer']
        assert 'script-src' not in admin.headers['Content-Security-Policy']  # none allowed:
        assert "default-src 'none'" in admin.headers['Content-Security-Policy']
    finally:
        server.kill()
    log = server.log()
    assert token not in log and 'GET /admin?<redacted>' in log
    for link in (w1, w2):  # signed links are logged without their signature
        assert link.rsplit('.', 1)[1] not in log
    assert f'/w/{w1.rsplit("/", 1)[1].split(".")[0]}.<redacted>' in log


def _counts(db_path):
    con = sqlite3.connect(db_path)
    return [
        con.execute(f'SELECT COUNT(*) FROM {t}').fetchone()[0] for t in ('workers', 'assignments', 'slots', 'answers')
    ]


def test_mturk_entry_preview_and_assignment_pair(logs, tmp_path):
    db_path = str(tmp_path / 'ab.db')
    db = build_task(
        db_path,
        'ab',
        ['gold=' + logs['gold'], 'echo=' + logs['echo']],
        num_items=6,
        annotators=1,
        items_per_assignment=2,
        checks_per_assignment=1,
    )
    server = Server(db_path).start()
    try:
        entry = providers.mturk_entry_url(db, server.base)
        s = requests.Session()
        before = _counts(db_path)
        preview = s.get(entry, params={'assignmentId': 'ASSIGNMENT_ID_NOT_AVAILABLE', 'hitId': 'H1'})
        assert preview.status_code == 200 and 'Accept the HIT' in preview.text
        assert 'id="preview-example"' in preview.text and '<form' not in preview.text
        assert _counts(db_path) == before  # the preview recorded nothing

        params = {
            'assignmentId': 'ASG1',
            'workerId': 'WKR1',
            'hitId': 'H1',
            'turkSubmitTo': 'https://workersandbox.mturk.com',
        }
        unsigned = s.get(server.base + '/mturk', params=params)
        assert unsigned.status_code == 403 and 'entry=' in unsigned.text
        forged = s.get(server.base + '/mturk', params=dict(params, entry='x' * 22))
        assert forged.status_code == 403
        for missing in ('assignmentId', 'workerId'):
            r = s.get(entry, params={k: v for k, v in params.items() if k != missing})
            assert r.status_code == 400 and f'{missing} is missing' in r.text
        assert s.get(entry, params=dict(params, workerId='<b>')).status_code == 400
        evil = s.get(entry, params=dict(params, turkSubmitTo='https://evil.example'))
        assert evil.status_code == 400 and 'turkSubmitTo' in evil.text
        assert _counts(db_path) == before

        first = s.get(entry, params=params)
        link = first.url
        assert link.startswith(server.base + '/w/a') and 'Start' in first.text
        assert s.get(entry, params=params).url == link  # the same pair resumes the same work
        stolen = s.get(entry, params=dict(params, workerId='WKR2'))  # someone else's assignment
        assert stolen.status_code == 403 and 'another worker' in stolen.text
        second = s.get(entry, params=dict(params, assignmentId='ASG2')).url  # WKR1's 2nd HIT
        assert second != link
        s.post(link + '/start')
        s.post(second + '/start')
        slot, _, _ = _current_slot(s, link)
        crossed = s.post(second + '/answer', data={'slot': slot, 'overall': 'A'})
        assert crossed.status_code == 403  # an assignment link answers only its own items
        while slot is not None:
            s.post(link + '/answer', data={'slot': slot, 'overall': 'B'})
            slot, page, _ = _current_slot(s, link)
        assert 'action="https://workersandbox.mturk.com/mturk/externalSubmit"' in page
        assert 'name="assignmentId" value="ASG1"' in page and 'id="another"' not in page
    finally:
        server.kill()


def test_forged_and_replayed_links_are_refused(logs, tmp_path):
    worlds = ['gold=' + logs['gold'], 'echo=' + logs['echo']]
    db_path = str(tmp_path / 'l.db')
    db = build_task(
        db_path,
        'likert',
        worlds,
        num_items=4,
        annotators=2,
        items_per_assignment=2,
        checks_per_assignment=0,
        completion_url='https://study.example/done?cc={code}',
    )
    other = build_task(str(tmp_path / 'other.db'), 'likert', worlds, num_items=4)
    server = Server(db_path).start()
    try:
        s = requests.Session()
        link = providers.local_links(db, server.base, 1)[0]
        token = link.rsplit('/', 1)[1]
        assert s.get(link).status_code == 200
        payload, sig = token.split('.')
        flipped = sig[:-1] + ('A' if sig[-1] != 'A' else 'B')
        assert s.get(f'{server.base}/w/{payload}.{flipped}').status_code == 403
        assert s.get(f'{server.base}/w/w2.{sig}').status_code == 403  # re-pointed at worker 2
        assert s.get(f'{server.base}/w/a1.{sig}').status_code == 403  # or at an assignment
        foreign = providers.local_links(other, server.base, 1)[0]  # worker 1 of another task
        assert foreign.rsplit('/', 1)[1].startswith('w1.')
        refused = s.get(foreign)
        assert refused.status_code == 403 and 'not issued by this task' in refused.text
        assert s.get(server.base + '/w/not-a-real-token').status_code == 404
        assert s.post(foreign + '/start').status_code == 403
        assert _counts(db_path)[1] == 0  # nothing was handed out to a forged link

        s.post(link + '/start')
        slot, _, _ = _current_slot(s, link)
        form = dict(RATING, slot=slot)
        assert s.post(link + '/answer', data=form, allow_redirects=False).status_code == 303
        replayed = s.post(link + '/answer', data=form, allow_redirects=False)
        assert replayed.status_code == 409 and 'already answered' in replayed.text
        assert _counts(db_path)[3] == 1

        entry = providers.generic_entry_url(db, server.base)
        pid = (
            entry.replace('{{%PROLIFIC_PID%}}', 'P123')
            .replace('{{%STUDY_ID%}}', 'ST1')
            .replace('{{%SESSION_ID%}}', 'S1')
        )
        arrived = s.get(pid)
        assert arrived.url.startswith(server.base + '/w/w') and s.get(pid).url == arrived.url
        # another session of the same id is a binding of its own, never the first one's link
        other = s.get(pid.replace('SESSION_ID=S1', 'SESSION_ID=S2'))
        assert other.status_code == 200 and other.url.startswith(server.base + '/w/w')
        assert other.url != arrived.url
        no_entry = s.get(server.base + '/start', params={'PROLIFIC_PID': 'P999'})
        assert no_entry.status_code == 403
        bad_pid = s.get(pid.replace('P123', '<script>'))
        assert bad_pid.status_code == 400 and 'PROLIFIC_PID is malformed' in bad_pid.text
    finally:
        server.kill()


def test_mturk_requests_validate_against_the_mturk_api(logs, tmp_path, capsys):
    """Dry run prints the requests; the same requests pass botocore's MTurk model."""
    botocore_stub = pytest.importorskip('botocore.stub')
    import boto3

    reqs = providers.mturk_requests(
        'https://eval.example.org/mturk?entry=SIG', 2, '0.80', 'Rate replies', 'Rate short replies', 'dialogue'
    )
    assert providers.create_hits(reqs, 'sandbox', dry_run=True) == []
    printed = capsys.readouterr().out
    assert printed.count('"CreateHIT"') == 2 and 'mturk-requester-sandbox' in printed
    assert '<ExternalURL>https://eval.example.org/mturk?entry=SIG</ExternalURL>' in printed
    client = boto3.client(
        'mturk',
        region_name='us-east-1',
        aws_access_key_id='x',
        aws_secret_access_key='x',
        endpoint_url=providers.MTURK_ENDPOINTS['sandbox'],
    )
    with botocore_stub.Stubber(client) as stub:
        stub.add_response('get_account_balance', {'AvailableBalance': '10000.00'})
        for i, req in enumerate(reqs):
            stub.add_response('create_hit', {'HIT': {'HITId': f'H{i}', 'HITTypeId': 'T'}}, req)
        created = providers.create_hits(reqs, 'sandbox', client=client, printer=lambda _m: None)
        stub.assert_no_pending_responses()
    assert [h['HITId'] for h in created] == ['H0', 'H1']
    with pytest.raises(ValueError, match='https'):
        providers.mturk_requests('http://insecure', 1, '1.00', 't', 'd', 'k')
