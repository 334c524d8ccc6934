"""The rating server under load, faults and a pool squatter, in figures.

A real uvicorn server on 127.0.0.1 serves a Likert task built from real ParlAI world logs (ED
test; ``gold`` = ParlAI's repeat_label, ``echo`` = repeat_query). ``--workers`` simulated workers
(one thread and HTTP session each, no think time) each complete ``--assignments`` assignments of
``--items`` items plus one attention check, through the same pages and forms a browser uses. While
they work, the server is killed with SIGKILL ``--kills`` times (after 1/(kills+1), 2/(kills+1), ...
of the expected answers were acknowledged) and restarted on the same port at once. Workers whose
request fails retry it until the server is back (bounded by ``--deadline``); an answer whose
acknowledgement was lost is re-sent, and the server's answer tells whether it had been stored.

Halfway through, a prober sends one of each kind of bad input and records the status it got.

With ``--squatter-entries N`` the honest workers come in through the published Prolific-style
entry link, each from its own address (127.0.0.10, .11, ...; Linux loopback takes any
127.x.y.z), and a scripted squatter at 127.0.0.66 makes N entries with made-up participant ids
as fast as it can, starting a task after each, then keeps trying every half second while the
honest workers work. Reported on top: honest workers served, the squatter's bindings and most
reservations held at once, and the refusals it got.

Reported: answers sent (distinct answers the workers submitted), stored (rows in the DB),
acknowledged, lost (acknowledged but not stored; goal 0), duplicated (stored more than once, or
stored without being sent; goal 0), p50/p99 latency of answer posts and page loads (requests cut
by a kill excluded), kills and downtime, and the bad-input table. ``--json`` writes them all.

    PARLAI_EMPATHY_ED_DIR=../shared/data/empatheticdialogues \\
        nice -n 19 .venv/bin/python bench/humaneval_load.py --workers 50 --assignments 4 --items 9 --kills 2
    # with a squatter on the entry link
    nice -n 19 .venv/bin/python bench/humaneval_load.py --workers 20 --assignments 2 --items 5 \\
        --kills 1 --squatter-entries 36 --json bench/results/humaneval_load_squatter.json
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

from humaneval_helpers import Server, entry_link, make_world_logs, peak_rss_kb, session_from, stream_chunked  # noqa: E402
from parlai_empathy.humaneval import providers  # noqa: E402
from parlai_empathy.humaneval.build import build_task  # noqa: E402

SLOT_RE = re.compile(r'name="slot" value="(\d+)"')
ASPECTS = ('empathy', 'relevance', 'fluency')


class ServerDown(Exception):
    """The request could not be completed because the server was being killed/restarted."""


class Client:
    """One simulated worker: an HTTP session that retries through server restarts."""

    def __init__(self, link: str, deadline: float, stats: 'Stats', address: str = None):
        self.link, self.deadline, self.stats = link, deadline, stats
        self.session = session_from(address) if address else requests.Session()

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
        response = self.request('POST', self.link + '/answer', 'answer', data=form, allow_redirects=False)
        if response.status_code == 303:
            self.stats.acknowledged(slot)
        elif response.status_code == 409 and 'already answered' in response.text:
            self.stats.acknowledged(slot)  # our earlier copy was stored before a kill
            self.stats.add('resent_already_stored', 1)
        else:
            raise RuntimeError(f'answer to slot {slot}: HTTP {response.status_code}: {response.text[-300:]}')

    def work(self, assignments: int, rating_of) -> None:
        for _ in range(assignments):
            while True:
                started = self.request('POST', self.link + '/start', 'page', allow_redirects=False)
                if started.status_code != 429:  # 429: all places taken right now; try again
                    break
                self.stats.add('honest_429', 1)
                if time.monotonic() > self.deadline:
                    raise ServerDown(self.link)
                time.sleep(0.5)
            if started.status_code != 303:
                self.stats.add('honest_no_work', 1)
                raise RuntimeError(f'start: HTTP {started.status_code}: {started.text[-200:]}')
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
    mturk_params = {
        'assignmentId': 'LOADPROBEA1',
        'workerId': 'LOADPROBEW1',
        'hitId': 'H',
        'turkSubmitTo': 'https://workersandbox.mturk.com',
    }
    sig = token.split('.')[1]
    bare_entry = providers.generic_entry_url(db, base).split('&', 1)[0]

    class Outcome:
        def __init__(self, status_code):
            self.status_code = status_code

    def own_binding():
        """303 when the same id with another session gets a link of its own (not the first's)."""
        first = s.get(entry_link(db, base, 'PROBE1', 'S1'), allow_redirects=False)
        second = s.get(entry_link(db, base, 'PROBE1', 'S2'), allow_redirects=False)
        same = first.headers.get('location') == second.headers.get('location')
        return Outcome(409 if same else second.status_code)

    def chunked_20mb():
        return Outcome(
            stream_chunked(
                base.split('//')[1].split(':')[0], int(base.rsplit(':', 1)[1]), f'/w/{token}/answer', 20 << 20
            )['status']
        )

    cases = [
        ('forged link signature', 403, lambda: s.get(f'{base}/w/{token[:-1]}{"B" if token[-1] == "A" else "A"}')),
        ('link re-pointed at another worker', 403, lambda: s.get(f'{base}/w/w1.{sig}')),
        ('link from another task database', 403, lambda: s.get(providers.local_links(other_db, base, 1)[0])),
        ('link cut short', 404, lambda: s.get(f'{base}/w/{token[:-3]}')),
        ('malformed item id', 400, lambda: s.post(prober + '/answer', data=dict(rating, slot='1e3'))),
        ('rating out of range', 400, lambda: s.post(prober + '/answer', data=dict(good, empathy='6'))),
        ('missing question', 400, lambda: s.post(prober + '/answer', data={'slot': first, 'empathy': '3'})),
        ('unexpected field', 400, lambda: s.post(prober + '/answer', data=dict(good, extra='1'))),
        (
            'field sent twice',
            400,
            lambda: s.post(
                prober + '/answer',
                data=f'slot={first}&empathy=3&empathy=4&relevance=3&fluency=3',
                headers={'Content-Type': 'application/x-www-form-urlencoded'},
            ),
        ),
        ('oversized form', 413, lambda: s.post(prober + '/answer', data=dict(good, fluency='3' * 5000))),
        (
            'non-UTF-8 form',
            400,
            lambda: s.post(
                prober + '/answer', data=b'slot=\xff\xfe', headers={'Content-Type': 'application/x-www-form-urlencoded'}
            ),
        ),
        ("another worker's item", 403, lambda: s.post(victim + '/answer', data=good)),
        ('item out of order', 409, lambda: s.post(prober + '/answer', data=dict(rating, slot=slots[-1]))),
        (
            'replayed answer',
            409,
            lambda: (s.post(prober + '/answer', data=good), s.post(prober + '/answer', data=good))[1],
        ),
        ('MTurk entry without entry signature', 403, lambda: s.get(base + '/mturk', params=mturk_params)),
        (
            'MTurk workerId without assignmentId',
            400,
            lambda: s.get(mturk, params={k: v for k, v in mturk_params.items() if k != 'assignmentId'}),
        ),
        (
            'MTurk assignment taken by another workerId',
            403,
            lambda: (
                s.get(mturk, params=mturk_params),
                s.get(mturk, params=dict(mturk_params, workerId='LOADPROBEW2')),
            )[1],
        ),
        (
            'MTurk turkSubmitTo not on mturk.com',
            400,
            lambda: s.get(mturk, params=dict(mturk_params, turkSubmitTo='https://evil.example')),
        ),
        ('participant id with another session: a link of its own', 303, own_binding),
        (
            'participant id typed without a session id',
            400,
            lambda: s.get(bare_entry + '&worker_id=PROBE2', allow_redirects=False),
        ),
        (
            'Prolific id without STUDY_ID',
            400,
            lambda: s.get(bare_entry + '&PROLIFIC_PID=PROBE3&SESSION_ID=S1', allow_redirects=False),
        ),
        ('non-ASCII digit as item id', 400, lambda: s.post(prober + '/answer', data=dict(rating, slot='\u00b2'))),
        ('fullwidth digit as rating', 400, lambda: s.post(prober + '/answer', data=dict(good, empathy='\uff15'))),
        ('chunked 20 MB body', 413, chunked_20mb),
        ('admin without Authorization', 401, lambda: s.get(base + '/admin')),
        ('admin token in the URL', 400, lambda: s.get(base + '/admin', params={'token': db.config['admin_token']})),
        ('wrong admin token', 401, lambda: s.get(base + '/admin', headers={'Authorization': 'Bearer nope'})),
    ]
    rows = []
    for kind, expected, send in cases:
        try:
            got = send().status_code
        except requests.RequestException as err:  # a server that dropped the connection
            got = f'no answer ({type(err).__name__})'
        rows.append({'kind': kind, 'expected': expected, 'got': got, 'ok': got == expected})
    return rows


SQUATTER = '127.0.0.66'


class Squatter:
    """Mints participants through the entry link from one address and starts a task for each,
    never answering: first ``entries`` as fast as it can, then one try every half second."""

    def __init__(self, db, base_of, entries: int):
        self.db, self.base_of, self.entries = db, base_of, entries
        self.session = session_from(SQUATTER)
        self.stop = threading.Event()
        self.tried, self.bindings, self.reserved, self.statuses = 0, set(), 0, Counter()
        self.max_held, self.burst_s = 0, None

    def attempt(self, i: int) -> None:
        self.tried += 1
        try:
            entered = self.session.get(entry_link(self.db, self.base_of(), f'SQUAT{i}', f'X{i}'), timeout=30)
            if entered.status_code != 200:
                self.statuses[f'entry {entered.status_code}'] += 1
                return
            self.bindings.add(entered.url)
            started = self.session.post(entered.url + '/start', timeout=30)
            if 'name="slot"' in started.text:
                self.reserved += 1
                self.statuses['start: task reserved'] += 1
            else:
                self.statuses[f'start {started.status_code}'] += 1
        except requests.RequestException:
            self.statuses['server down'] += 1  # a kill in progress

    def held(self, db_path: str) -> int:
        con = sqlite3.connect(db_path)
        query = (
            'SELECT COUNT(*) FROM assignments x JOIN workers w USING (worker_id) WHERE '
            "w.external_id LIKE 'SQUAT%' AND x.completed IS NULL"
        )
        try:
            try:
                return con.execute(query + ' AND x.released IS NULL').fetchone()[0]
            except sqlite3.OperationalError:  # a server without releases (for a before/after)
                return con.execute(query).fetchone()[0]
        finally:
            con.close()

    def run(self, db_path: str) -> None:
        t0 = time.perf_counter()
        for i in range(self.entries):
            self.attempt(i)
        self.burst_s = time.perf_counter() - t0
        i = self.entries
        while not self.stop.wait(0.5):
            self.max_held = max(self.max_held, self.held(db_path))
            self.attempt(i)
            i += 1
        self.max_held = max(self.max_held, self.held(db_path))


def body_memory(base: str, token: str, megabytes: int, pid: int) -> dict:
    """The server's peak RSS before and after one chunked body of ``megabytes``."""
    host, port = base.split('//')[1].split(':')
    stream_chunked(host, int(port), f'/w/{token}/answer', 1 << 20)  # warm-up
    before = peak_rss_kb(pid)
    result = stream_chunked(host, int(port), f'/w/{token}/answer', megabytes << 20)
    return {
        'megabytes': megabytes,
        'status': result['status'],
        'peak_rss_before_mb': before / 1024,
        'peak_rss_after_mb': peak_rss_kb(pid) / 1024,
        'grown_mb': (peak_rss_kb(pid) - before) / 1024,
    }


def run_load(
    workdir: str,
    world_logs: dict,
    workers: int,
    assignments: int,
    items: int,
    kills: int,
    deadline_s: float,
    log=print,
    squatter_entries: int = 0,
    body_mb: int = 0,
) -> dict:
    per_assignment = items + 1
    expected = workers * assignments * per_assignment
    # units with slack, so the last workers still find items they have not seen
    num_items = max(2 * items, int(1.2 * workers * assignments * items / (2 * 3)) + 1)
    if squatter_entries:  # what the squatter may hold (its cap), so the prober still finds work
        num_items += 2 * items
    db_path = os.path.join(workdir, 'load.db')
    db = build_task(
        db_path,
        'likert',
        [f'{n}={p}' for n, p in world_logs.items()],
        num_items=num_items,
        annotators=3,
        items_per_assignment=items,
        checks_per_assignment=1,
        seed=1,
    )
    other_db = build_task(
        os.path.join(workdir, 'other.db'), 'likert', [f'{n}={p}' for n, p in world_logs.items()], num_items=4
    )
    deadline = time.monotonic() + deadline_s
    server = Server(db_path).start(timeout=deadline_s)
    stats = Stats()
    errors = []
    memory = (
        body_memory(
            server.base, providers.local_links(db, server.base, 1)[0].rsplit('/', 1)[1], body_mb, server.proc.pid
        )
        if body_mb
        else None
    )
    squatter = None
    if squatter_entries:
        squatter = Squatter(db, lambda: server.base, squatter_entries)
        squat_thread = threading.Thread(target=squatter.run, args=(db_path,), daemon=True)
        squat_thread.start()
        while squatter.burst_s is None:  # the squatter's burst comes first, as in the attack
            time.sleep(0.05)
        # honest participants come in through the same entry link, each from its own address
        addresses = [f'127.0.{10 + i // 200}.{10 + i % 200}' for i in range(workers)]
        links = [
            session_from(a).get(entry_link(db, server.base, f'HONEST{i}', f'H{i}'), timeout=60).url
            for i, a in enumerate(addresses)
        ]
    else:
        addresses = [None] * workers
        links = providers.local_links(db, server.base, workers)
    served = Counter()

    def rating_of(slot):
        return {a: str(1 + (slot * (i + 2)) % 5) for i, a in enumerate(ASPECTS)}

    def work(link, address):
        try:
            Client(link, deadline, stats, address).work(assignments, rating_of)
            served['workers'] += 1
        except Exception as err:  # reported, and fails the run
            errors.append(f'{link}: {err!r}')

    threads = [threading.Thread(target=work, args=(link, a), daemon=True) for link, a in zip(links, addresses)]
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
        log(f'kill {k}: SIGKILL after {acked_at_kill} acknowledged answers; back in {kill_log[-1]["down_s"]:.1f} s')
        if k == 1:
            probes = bad_inputs(server.base, db, other_db)
    if probes is None:
        probes = bad_inputs(server.base, db, other_db)
    for t in threads:
        t.join(timeout=max(1.0, deadline - time.monotonic()))
    elapsed = time.perf_counter() - started
    if squatter:
        squatter.stop.set()
        squat_thread.join(60)
    server.kill()

    con = sqlite3.connect(db_path)
    rows = con.execute('SELECT slot_id, worker_id, unit_id, answer FROM answers').fetchall()
    stored_slots = Counter(r[0] for r in rows)
    per_worker_unit = Counter((r[1], r[2]) for r in rows)
    stored = {r[0]: json.loads(r[3])['ratings'] for r in rows if r[0] in stats.sent_answers}
    lost = [s for s in stats.acked if s not in stored]
    wrong = [s for s, got in stored.items() if got != {a: int(v) for a, v in stats.sent_answers[s].items()}]
    prober_rows = len(rows) - sum(1 for r in rows if r[0] in stats.sent_answers)
    duplicated = sum(n - 1 for n in stored_slots.values()) + sum(n - 1 for n in per_worker_unit.values())
    completed = con.execute('SELECT COUNT(*) FROM assignments WHERE completed IS NOT NULL').fetchone()[0]
    pct = lambda xs, q: float(np.percentile(xs, q) * 1000) if xs else float('nan')  # noqa: E731
    return {
        'workers': workers,
        'assignments_per_worker': assignments,
        'items_per_assignment': per_assignment,
        'expected_answers': expected,
        'sent': len(stats.sent_answers),
        'acknowledged': len(stats.acked),
        'stored': len(stored),
        'stored_by_prober': prober_rows,
        'lost': len(lost),
        'stored_differently': len(wrong),
        'duplicated': duplicated,
        'resent_already_stored': stats.counts['resent_already_stored'],
        'retried_requests': stats.counts['retries'],
        'completed_assignments': completed,
        'kills': kill_log,
        'elapsed_s': elapsed,
        'answers_per_s': len(stats.acked) / elapsed if elapsed else float('nan'),
        'answer_p50_ms': pct(stats.latencies['answer'], 50),
        'answer_p99_ms': pct(stats.latencies['answer'], 99),
        'page_p50_ms': pct(stats.latencies['page'], 50),
        'page_p99_ms': pct(stats.latencies['page'], 99),
        'requests_timed': sum(len(v) for v in stats.latencies.values()),
        'bad_inputs': probes,
        'errors': errors,
        'honest_workers_served': served['workers'],
        'honest_told_no_work': stats.counts['honest_no_work'],
        'honest_starts_deferred_429': stats.counts['honest_429'],
        'squatter': None
        if squatter is None
        else {
            'address': SQUATTER,
            'entries_tried': squatter.tried,
            'burst_entries': squatter.entries,
            'burst_s': squatter.burst_s,
            'bindings_created': len(squatter.bindings),
            'tasks_reserved': squatter.reserved,
            'most_reservations_held_at_once': squatter.max_held,
            'outcomes': dict(squatter.statuses),
        },
        'body_memory': memory,
    }


def report(r: dict) -> str:
    lines = [
        f'{r["workers"]} workers x {r["assignments_per_worker"]} assignments x '
        f'{r["items_per_assignment"]} items (1 attention check each) = {r["expected_answers"]} answers expected',
        '',
        '| figure | value |',
        '|---|---|',
        f'| answers sent | {r["sent"]} |',
        f'| answers acknowledged | {r["acknowledged"]} |',
        f'| answers stored | {r["stored"]} (+{r["stored_by_prober"]} by the bad-input prober) |',
        f'| lost (acknowledged, not stored) | {r["lost"]} |',
        f'| stored with other values than sent | {r["stored_differently"]} |',
        f'| duplicated | {r["duplicated"]} |',
        f'| re-sent after a kill, already stored | {r["resent_already_stored"]} |',
        f'| requests retried while the server was down | {r["retried_requests"]} |',
        f'| completed assignments | {r["completed_assignments"]} |',
        f'| SIGKILLs survived | {len(r["kills"])} (server back after '
        + ', '.join(f'{k["down_s"]:.1f} s' for k in r['kills'])
        + ') |',
        f'| answer post latency p50 / p99 | {r["answer_p50_ms"]:.0f} / {r["answer_p99_ms"]:.0f} ms |',
        f'| page load latency p50 / p99 | {r["page_p50_ms"]:.0f} / {r["page_p99_ms"]:.0f} ms |',
        f'| wall time / throughput | {r["elapsed_s"]:.0f} s / {r["answers_per_s"]:.1f} answers/s |',
        '',
        '| bad input | expected | got |',
        '|---|---|---|',
    ]
    lines += [f'| {b["kind"]} | {b["expected"]} | {b["got"]}{"" if b["ok"] else " (WRONG)"} |' for b in r['bad_inputs']]
    q = r.get('squatter')
    if q:
        lines += [
            '',
            f'squatter at {q["address"]}: {q["entries_tried"]} entries tried '
            f'({q["burst_entries"]} in a {q["burst_s"]:.1f} s burst), {q["bindings_created"]} '
            f'bindings created, {q["tasks_reserved"]} tasks reserved, at most '
            f'{q["most_reservations_held_at_once"]} held at once; outcomes {q["outcomes"]}',
            f'honest workers served: {r["honest_workers_served"]} of {r["workers"]}; told '
            f"'nothing left': {r['honest_told_no_work']}; starts deferred (429) and retried: "
            f'{r["honest_starts_deferred_429"]}',
        ]
    m = r.get('body_memory')
    if m:
        lines += [
            '',
            f'chunked body of {m["megabytes"]} MB: HTTP {m["status"]}, server peak RSS '
            f'{m["peak_rss_before_mb"]:.0f} -> {m["peak_rss_after_mb"]:.0f} MB '
            f'(+{m["grown_mb"]:.1f} MB)',
        ]
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
    parser.add_argument(
        '--world-logs',
        nargs=2,
        metavar='NAME=PATH',
        default=None,
        help='reuse two eval_model world logs (default: make gold/echo from ED test)',
    )
    parser.add_argument('--workdir', default=None)
    parser.add_argument('--json', default=None, help='also write the figures here')
    parser.add_argument(
        '--squatter-entries',
        type=int,
        default=0,
        help='a squatter bursts this many entries through the entry link (and '
        'keeps trying); honest workers then enter there too, one address each',
    )
    parser.add_argument(
        '--body-mb',
        type=int,
        default=0,
        help="first stream one chunked body of this many MB and report the server's peak RSS before and after",
    )
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix='humaneval_load_')
    if args.world_logs:
        world_logs = dict(spec.split('=', 1) for spec in args.world_logs)
    else:
        print('making gold/echo world logs from ED test with ParlAI eval_model ...', flush=True)
        world_logs = make_world_logs(workdir)
    result = run_load(
        workdir,
        world_logs,
        args.workers,
        args.assignments,
        args.items,
        args.kills,
        args.deadline,
        squatter_entries=args.squatter_entries,
        body_mb=args.body_mb,
    )
    result['command'] = ' '.join(['bench/humaneval_load.py'] + sys.argv[1:])
    print(report(result))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(result, f, indent=1)
    ok = (
        not result['errors']
        and result['lost'] == 0
        and result['duplicated'] == 0
        and all(b['ok'] for b in result['bad_inputs'])
        and result['honest_told_no_work'] == 0
    )
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
