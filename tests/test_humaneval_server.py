"""Human evaluation over HTTP against a real uvicorn process: validation, admin, MTurk entry,
and a crash/restart in the middle of an assignment."""
import csv
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
    db = build_task(db_path, 'likert', ['gold=' + logs['gold'], 'echo=' + logs['echo']],
                    num_items=5, annotators=1, items_per_assignment=5, checks_per_assignment=1)
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
        stored = sqlite3.connect(db_path).execute(
            'SELECT completion_code, completed IS NOT NULL FROM assignments').fetchone()
        assert stored == (code, 1)
        assert sqlite3.connect(db_path).execute('SELECT COUNT(*) FROM answers').fetchone()[0] == 6
    finally:
        server.kill()


def test_validation_admin_and_mturk_entry(logs, tmp_path):
    db_path = str(tmp_path / 'ab.db')
    db = build_task(db_path, 'ab', ['gold=' + logs['gold'], 'echo=' + logs['echo']], num_items=6,
                    annotators=1, items_per_assignment=3, checks_per_assignment=1)
    server = Server(db_path).start()
    try:
        w1, w2 = providers.local_links(db, server.base, 2)
        s = requests.Session()
        s.post(w1 + '/start')
        slot, page, _ = _current_slot(s, w1)
        assert 'gold' not in page and 'echo' not in page  # blind
        assert s.post(w1 + '/answer', data={'slot': slot, 'overall': 'C'}).status_code == 400
        assert s.post(w1 + '/answer', data={'slot': slot}).status_code == 400
        assert s.post(w1 + '/answer', data={'slot': slot, 'overall': 'A', 'x': '1'}).status_code == 400
        assert s.post(w1 + '/answer', data={'slot': 'abc', 'overall': 'A'}).status_code == 400
        assert s.post(w2 + '/answer', data={'slot': slot, 'overall': 'A'}).status_code == 403
        assert s.get(server.base + '/w/not-a-real-token').status_code == 404
        assert s.post(w1 + '/answer', data={'slot': slot, 'overall': 'tie'}).status_code == 200
        assert s.post(w1 + '/answer', data={'slot': slot, 'overall': 'A'}).status_code == 409

        assert s.get(server.base + '/admin').status_code == 401
        assert s.get(server.base + '/admin?token=wrong').status_code == 401
        token = db.config['admin_token']
        admin = s.get(server.base + '/admin', params={'token': token}).text
        assert 'echo vs gold' in admin
        export = s.get(server.base + '/admin/export.csv',
                       headers={'Authorization': f'Bearer {token}'}).text
        rows = list(csv.DictReader(io.StringIO(export)))
        assert len(rows) == 1 and '"tie"' in rows[0]['answer']

        preview = s.get(server.base + '/mturk',
                        params={'assignmentId': 'ASSIGNMENT_ID_NOT_AVAILABLE'}).text
        assert 'Accept the HIT' in preview
        bad = s.get(server.base + '/mturk', params={
            'assignmentId': 'A1', 'workerId': 'W1', 'hitId': 'H', 'turkSubmitTo': 'https://evil.example'})
        assert bad.status_code == 400
        params = {'assignmentId': 'ASG1', 'workerId': 'WKR1', 'hitId': 'H1',
                  'turkSubmitTo': 'https://workersandbox.mturk.com'}
        entry = s.get(server.base + '/mturk', params=params)
        assert entry.url.startswith(server.base + '/w/') and 'Start' in entry.text
        link = entry.url
        s.post(link + '/start')
        slot, _, _ = _current_slot(s, link)
        while slot is not None:
            s.post(link + '/answer', data={'slot': slot, 'overall': 'B'})
            slot, page, _ = _current_slot(s, link)
        assert 'action="https://workersandbox.mturk.com/mturk/externalSubmit"' in page
        assert 'name="assignmentId" value="ASG1"' in page
        assert s.get(server.base + '/mturk', params=params).url == link  # same HIT, same work
    finally:
        server.kill()


def test_mturk_requests_validate_against_the_mturk_api(logs, tmp_path, capsys):
    """Dry run prints the requests; the same requests pass botocore's MTurk model."""
    botocore_stub = pytest.importorskip('botocore.stub')
    import boto3

    reqs = providers.mturk_requests('https://eval.example.org', 2, '0.80', 'Rate replies',
                                    'Rate short replies', 'dialogue')
    assert providers.create_hits(reqs, 'sandbox', dry_run=True) == []
    printed = capsys.readouterr().out
    assert printed.count('"CreateHIT"') == 2 and 'mturk-requester-sandbox' in printed
    assert '<ExternalURL>https://eval.example.org/mturk</ExternalURL>' in printed
    client = boto3.client('mturk', region_name='us-east-1', aws_access_key_id='x',
                          aws_secret_access_key='x',
                          endpoint_url=providers.MTURK_ENDPOINTS['sandbox'])
    with botocore_stub.Stubber(client) as stub:
        stub.add_response('get_account_balance', {'AvailableBalance': '10000.00'})
        for i, req in enumerate(reqs):
            stub.add_response('create_hit', {'HIT': {'HITId': f'H{i}', 'HITTypeId': 'T'}}, req)
        created = providers.create_hits(reqs, 'sandbox', client=client, printer=lambda _m: None)
        stub.assert_no_pending_responses()
    assert [h['HITId'] for h in created] == ['H0', 'H1']
    with pytest.raises(ValueError, match='https'):
        providers.mturk_requests('http://insecure', 1, '1.00', 't', 'd', 'k')
