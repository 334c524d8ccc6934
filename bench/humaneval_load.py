"""The rating server under load and faults, in figures (issue 21).

A real uvicorn server on 127.0.0.1 serves a Likert task built from real ParlAI world logs (ED
test; ``gold`` = ParlAI's repeat_label, ``echo`` = repeat_query). ``--workers`` simulated workers
(one thread and HTTP session each, no think time) each complete ``--assignments`` assignments of
``--items`` items plus one attention check, through the same pages and forms a browser uses. While
they work, the server is killed with SIGKILL ``--kills`` times (after 1/(kills+1), 2/(kills+1), ...
of the expected answers were acknowledged) and restarted on the same port at once. Workers whose
request fails retry it until the server is back (bounded by ``--deadline``); an answer whose
acknowledgement was lost is re-sent, and the server's answer tells whether it had been stored.

Halfway through, a prober sends one of each kind of bad input and records the status it got.

Reported: answers sent (distinct answers the workers submitted), stored (rows in the DB),
acknowledged, lost (acknowledged but not stored; goal 0), duplicated (stored more than once, or
stored without being sent; goal 0), p50/p99 latency of answer posts and page loads (requests cut
by a kill excluded), kills and downtime, and the bad-input table. ``--json`` writes them all.

    PARLAI_EMPATHY_ED_DIR=../shared/data/empatheticdialogues \\
        nice -n 19 .venv/bin/python bench/humaneval_load.py --workers 50 --assignments 4 --items 9 --kills 2
"""
import argparse
import json
import os
import re
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter

import numpy as np
import requests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, 'tests'))

from humaneval_helpers import Server, make_world_logs  # noqa: E402
from parlai_empathy.humaneval import providers  # noqa: E402
from parlai_empathy.humaneval.build import build_task  # noqa: E402

SLOT_RE = re.compile(r'name="slot" value="(\d+)"')
ASPECTS = ('empathy', 'relevance', 'fluency')


class ServerDown(Exception):
    """The request could not be completed because the server was being killed/restarted."""


class Client:
    """One simulated worker: an HTTP session that retries through server restarts."""

    def __init__(self, link: str, deadline: float, stats: 'Stats'):
        self.link, self.deadline, self.stats = link, deadline, stats
        self.session = requests.Session()

    def request(self, method: str, url: str, kind: str, **kwargs) -> requests.Response:
        """Send until a response arrives; latency is recorded only for uncut requests."""
        while True:
            start = time.perf_counter()
            try:
                response = self.session.request(method, url, timeout=60, **kwargs)
            # a kill can also cut a response mid-body (ChunkedEncodingError): the request is
            # re-sent like any other cut by a kill
            except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError):
                self.stats.add('retries', 1)
                if time.monotonic() > self.deadline:
                    raise ServerDown(url) from None
                time.sleep(0.2)
                continue
            self.stats.latency(kind, time.perf_counter() - start)
            return response

    def current_slot(self):
        page = self.request('GET', self.link, 'page').text
        match = SLOT_RE.search(page)
        return int(match.group(1)) if match else None

    def answer(self, slot: int, rating: dict) -> None:
        """Submit once; after a lost acknowledgement re-send, and let the server say whether the
        first copy was stored (409 'already answered') or not (303, stored now)."""
        form = dict(rating, slot=slot)
        self.stats.sent(slot, rating)
        response = self.request('POST', self.link + '/answer', 'answer', data=form,
                                allow_redirects=False)
        if response.status_code == 303:
            self.stats.acknowledged(slot)
        elif response.status_code == 409 and 'already answered' in response.text:
            self.stats.acknowledged(slot)  # our earlier copy was stored before a kill
            self.stats.add('resent_already_stored', 1)
        else:
            raise RuntimeError(f'answer to slot {slot}: HTTP {response.status_code}: '
                               f'{response.text[-300:]}')

    def work(self, assignments: int, rating_of) -> None:
        for _ in range(assignments):
            self.request('POST', self.link + '/start', 'page', allow_redirects=False)
            slot = self.current_slot()
            while slot is not None:
                self.answer(slot, rating_of(slot))
                slot = self.current_slot()


class Stats:
    """What the clients saw, thread-safe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sent_answers = {}  # slot -> rating the client submitted
        self.acked = set()
        self.latencies = {'answer': [], 'page': []}
        self.counts = Counter()

    def sent(self, slot, rating):
        with self.lock:
            if slot in self.sent_answers:
                raise RuntimeError(f'slot {slot} was handed to a worker twice')
            self.sent_answers[slot] = rating

    def acknowledged(self, slot):
        with self.lock:
            self.acked.add(slot)

    def latency(self, kind, seconds):
        with self.lock:
            self.latencies[kind].append(seconds)

    def add(self, key, n):
        with self.lock:
            self.counts[key] += n


def bad_inputs(base: str, db, other_db) -> list:
    """One request of each kind of bad input; returns rows (kind, expected, got, stored_nothing)."""
    s = requests.Session()
    worker = db.add_worker('local')
    token = worker['token']
    prober = f'{base}/w/{token}'
    s.post(prober + '/start')
    slots = [slot['slot_id'] for slot in db.slots(db.open_assignment(worker['worker_id'])['assignment_id'])]
    first = slots[0]
    rating = {a: '3' for a in ASPECTS}
    good = dict(rating, slot=first)
    victim = providers.local_links(db, base, 1)[0]
    mturk = providers.mturk_entry_url(db, base)
    mturk_params = {'assignmentId': 'LOADPROBEA1', 'workerId': 'LOADPROBEW1', 'hitId': 'H',
                    'turkSubmitTo': 'https://workersandbox.mturk.com'}
    generic = providers.generic_entry_url(db, base).replace('{{%PROLIFIC_PID%}}', 'PROBE1')
    sig = token.split('.')[1]
    cases = [
        ('forged link signature', 403, lambda: s.get(f'{base}/w/{token[:-1]}{"B" if token[-1] == "A" else "A"}')),
        ('link re-pointed at another worker', 403, lambda: s.get(f'{base}/w/w1.{sig}')),
        ('link from another task database', 403,
         lambda: s.get(providers.local_links(other_db, base, 1)[0])),
        ('link cut short', 404, lambda: s.get(f'{base}/w/{token[:-3]}')),
        ('malformed item id', 400, lambda: s.post(prober + '/answer', data=dict(rating, slot='1e3'))),
        ('rating out of range', 400, lambda: s.post(prober + '/answer', data=dict(good, empathy='6'))),
        ('missing question', 400, lambda: s.post(prober + '/answer', data={'slot': first, 'empathy': '3'})),
        ('unexpected field', 400, lambda: s.post(prober + '/answer', data=dict(good, extra='1'))),
        ('field sent twice', 400, lambda: s.post(
            prober + '/answer', data=f'slot={first}&empathy=3&empathy=4&relevance=3&fluency=3',
            headers={'Content-Type': 'application/x-www-form-urlencoded'})),
        ('oversized form', 413, lambda: s.post(prober + '/answer', data=dict(good, fluency='3' * 5000))),
        ('non-UTF-8 form', 400, lambda: s.post(prober + '/answer', data=b'slot=\xff\xfe',
                                               headers={'Content-Type': 'application/x-www-form-urlencoded'})),
        ("another worker's item", 403, lambda: s.post(victim + '/answer', data=good)),
        ('item out of order', 409, lambda: s.post(prober + '/answer', data=dict(rating, slot=slots[-1]))),
        ('replayed answer', 409, lambda: (s.post(prober + '/answer', data=good),
                                          s.post(prober + '/answer', data=good))[1]),
        ('MTurk entry without entry signature', 403, lambda: s.get(base + '/mturk', params=mturk_params)),
        ('MTurk workerId without assignmentId', 400, lambda: s.get(
            mturk, params={k: v for k, v in mturk_params.items() if k != 'assignmentId'})),
        ('MTurk assignment taken by another workerId', 403, lambda: (
            s.get(mturk, params=mturk_params), s.get(mturk, params=dict(mturk_params, workerId='LOADPROBEW2')))[1]),
        ('MTurk turkSubmitTo not on mturk.com', 400, lambda: s.get(
            mturk, params=dict(mturk_params, turkSubmitTo='https://evil.example'))),
        ('participant id with another session', 403, lambda: (
            s.get(generic.replace('{{%SESSION_ID%}}', 'S1')),
            s.get(generic.replace('{{%SESSION_ID%}}', 'S2')))[1]),
        ('admin without Authorization', 401, lambda: s.get(base + '/admin')),
        ('admin token in the URL', 400, lambda: s.get(base + '/admin', params={'token': db.config['admin_token']})),
        ('wrong admin token', 401, lambda: s.get(base + '/admin', headers={'Authorization': 'Bearer nope'})),
    ]
    rows = []
    for kind, expected, send in cases:
        got = send().status_code
        rows.append({'kind': kind, 'expected': expected, 'got': got, 'ok': got == expected})
    return rows


def run_load(workdir: str, world_logs: dict, workers: int, assignments: int, items: int,
             kills: int, deadline_s: float, log=print) -> dict:
    per_assignment = items + 1
    expected = workers * assignments * per_assignment
    # units with slack, so the last workers still find items they have not seen
    num_items = max(2 * items, int(1.2 * workers * assignments * items / (2 * 3)) + 1)
    db_path = os.path.join(workdir, 'load.db')
    db = build_task(db_path, 'likert', [f'{n}={p}' for n, p in world_logs.items()],
                    num_items=num_items, annotators=3, items_per_assignment=items,
                    checks_per_assignment=1, seed=1)
    other_db = build_task(os.path.join(workdir, 'other.db'), 'likert',
                          [f'{n}={p}' for n, p in world_logs.items()], num_items=4)
    deadline = time.monotonic() + deadline_s
    server = Server(db_path).start(timeout=deadline_s)
    stats = Stats()
    links = providers.local_links(db, server.base, workers)
    errors = []

    def rating_of(slot):
        return {a: str(1 + (slot * (i + 2)) % 5) for i, a in enumerate(ASPECTS)}

    def work(link):
        try:
            Client(link, deadline, stats).work(assignments, rating_of)
        except Exception as err:  # reported, and fails the run
            errors.append(f'{link}: {err!r}')

    threads = [threading.Thread(target=work, args=(link,), daemon=True) for link in links]
    started = time.perf_counter()
    for t in threads:
        t.start()
    kill_log, probes = [], None
    for k in range(1, kills + 1):
        while len(stats.acked) < expected * k / (kills + 1) and any(t.is_alive() for t in threads):
            time.sleep(0.05)
        acked_at_kill = len(stats.acked)
        server.kill()
        down = time.perf_counter()
        server = Server(db_path, server.port).start(timeout=max(300.0, deadline - time.monotonic()))
        kill_log.append({'after_acked': acked_at_kill, 'down_s': time.perf_counter() - down})
        log(f'kill {k}: SIGKILL after {acked_at_kill} acknowledged answers; back in '
            f'{kill_log[-1]["down_s"]:.1f} s')
        if k == 1:
            probes = bad_inputs(server.base, db, other_db)
    if probes is None:
        probes = bad_inputs(server.base, db, other_db)
    for t in threads:
        t.join(timeout=max(1.0, deadline - time.monotonic()))
    elapsed = time.perf_counter() - started
    server.kill()

    con = sqlite3.connect(db_path)
    rows = con.execute('SELECT slot_id, worker_id, unit_id, answer FROM answers').fetchall()
    stored_slots = Counter(r[0] for r in rows)
    per_worker_unit = Counter((r[1], r[2]) for r in rows)
    stored = {r[0]: json.loads(r[3])['ratings'] for r in rows if r[0] in stats.sent_answers}
    lost = [s for s in stats.acked if s not in stored]
    wrong = [s for s, got in stored.items()
             if got != {a: int(v) for a, v in stats.sent_answers[s].items()}]
    prober_rows = len(rows) - sum(1 for r in rows if r[0] in stats.sent_answers)
    duplicated = (sum(n - 1 for n in stored_slots.values())
                  + sum(n - 1 for n in per_worker_unit.values()))
    completed = con.execute('SELECT COUNT(*) FROM assignments WHERE completed IS NOT NULL').fetchone()[0]
    pct = lambda xs, q: float(np.percentile(xs, q) * 1000) if xs else float('nan')  # noqa: E731
    return {
        'workers': workers, 'assignments_per_worker': assignments, 'items_per_assignment': per_assignment,
        'expected_answers': expected, 'sent': len(stats.sent_answers), 'acknowledged': len(stats.acked),
        'stored': len(stored), 'stored_by_prober': prober_rows, 'lost': len(lost),
        'stored_differently': len(wrong), 'duplicated': duplicated,
        'resent_already_stored': stats.counts['resent_already_stored'],
        'retried_requests': stats.counts['retries'], 'completed_assignments': completed,
        'kills': kill_log, 'elapsed_s': elapsed,
        'answers_per_s': len(stats.acked) / elapsed if elapsed else float('nan'),
        'answer_p50_ms': pct(stats.latencies['answer'], 50), 'answer_p99_ms': pct(stats.latencies['answer'], 99),
        'page_p50_ms': pct(stats.latencies['page'], 50), 'page_p99_ms': pct(stats.latencies['page'], 99),
        'requests_timed': sum(len(v) for v in stats.latencies.values()),
        'bad_inputs': probes, 'errors': errors,
    }


def report(r: dict) -> str:
    lines = [
        f"{r['workers']} workers x {r['assignments_per_worker']} assignments x "
        f"{r['items_per_assignment']} items (1 attention check each) = {r['expected_answers']} answers expected",
        '',
        '| figure | value |', '|---|---|',
        f"| answers sent | {r['sent']} |",
        f"| answers acknowledged | {r['acknowledged']} |",
        f"| answers stored | {r['stored']} (+{r['stored_by_prober']} by the bad-input prober) |",
        f"| lost (acknowledged, not stored) | {r['lost']} |",
        f"| stored with other values than sent | {r['stored_differently']} |",
        f"| duplicated | {r['duplicated']} |",
        f"| re-sent after a kill, already stored | {r['resent_already_stored']} |",
        f"| requests retried while the server was down | {r['retried_requests']} |",
        f"| completed assignments | {r['completed_assignments']} |",
        f"| SIGKILLs survived | {len(r['kills'])} (server back after "
        + ', '.join(f"{k['down_s']:.1f} s" for k in r['kills']) + ') |',
        f"| answer post latency p50 / p99 | {r['answer_p50_ms']:.0f} / {r['answer_p99_ms']:.0f} ms |",
        f"| page load latency p50 / p99 | {r['page_p50_ms']:.0f} / {r['page_p99_ms']:.0f} ms |",
        f"| wall time / throughput | {r['elapsed_s']:.0f} s / {r['answers_per_s']:.1f} answers/s |",
        '', '| bad input | expected | got |', '|---|---|---|',
    ]
    lines += [f"| {b['kind']} | {b['expected']} | {b['got']}{'' if b['ok'] else ' (WRONG)'} |"
              for b in r['bad_inputs']]
    if r['errors']:
        lines += ['', 'worker errors:'] + r['errors'][:10]
    return '\n'.join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workers', type=int, default=50)
    parser.add_argument('--assignments', type=int, default=4, help='per worker')
    parser.add_argument('--items', type=int, default=9, help='rated items per assignment (+1 check)')
    parser.add_argument('--kills', type=int, default=2)
    parser.add_argument('--deadline', type=float, default=1800, help='seconds; the run stops by then')
    parser.add_argument('--world-logs', nargs=2, metavar='NAME=PATH', default=None,
                        help='reuse two eval_model world logs (default: make gold/echo from ED test)')
    parser.add_argument('--workdir', default=None)
    parser.add_argument('--json', default=None, help='also write the figures here')
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix='humaneval_load_')
    if args.world_logs:
        world_logs = dict(spec.split('=', 1) for spec in args.world_logs)
    else:
        print('making gold/echo world logs from ED test with ParlAI eval_model ...', flush=True)
        world_logs = make_world_logs(workdir)
    result = run_load(workdir, world_logs, args.workers, args.assignments, args.items, args.kills,
                      args.deadline)
    print(report(result))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(result, f, indent=1)
    ok = not result['errors'] and result['lost'] == 0 and result['duplicated'] == 0 and all(
        b['ok'] for b in result['bad_inputs'])
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
