"""The task database: one SQLite file holding the task, the workers, and every answer.

Each write is one ``BEGIN IMMEDIATE`` transaction in WAL mode with ``synchronous=FULL``, so an
answer the server acknowledged is on disk and survives a crash or restart. Answers are
insert-only: a slot can be answered once and is never overwritten.
"""
import json
import os
import random
import secrets
import sqlite3
import threading
import time
from contextlib import contextmanager
from typing import Dict, List, Optional, Sequence

from parlai_empathy.humaneval import sampling, votes
from parlai_empathy.humaneval.errors import TaskError
from parlai_empathy.humaneval.identity import ASSIGNMENT, WORKER, LinkSigner, new_secret
from parlai_empathy.humaneval.inputs import Item

SECRET_KEY = 'link_secret'  # meta key of the task's HMAC secret (never in the config)
SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE items (item_id TEXT PRIMARY KEY, emotion TEXT, situation TEXT, context TEXT, gold TEXT);
CREATE TABLE units (
  unit_id INTEGER PRIMARY KEY, item_id TEXT NOT NULL REFERENCES items(item_id),
  models TEXT NOT NULL, display TEXT NOT NULL, needed INTEGER NOT NULL,
  is_check INTEGER NOT NULL, expected TEXT, extra TEXT NOT NULL);
CREATE TABLE workers (
  worker_id INTEGER PRIMARY KEY, provider TEXT NOT NULL, external_id TEXT,
  token TEXT NOT NULL UNIQUE, created REAL NOT NULL, session_ref TEXT,
  UNIQUE (provider, external_id));
CREATE TABLE assignments (
  assignment_id INTEGER PRIMARY KEY, worker_id INTEGER NOT NULL REFERENCES workers(worker_id),
  created REAL NOT NULL, started REAL, last_active REAL NOT NULL, completed REAL,
  completion_code TEXT NOT NULL, external_ref TEXT, submit_to TEXT);
CREATE UNIQUE INDEX assignments_external ON assignments(external_ref);
CREATE TABLE slots (
  slot_id INTEGER PRIMARY KEY, assignment_id INTEGER NOT NULL REFERENCES assignments(assignment_id),
  position INTEGER NOT NULL, unit_id INTEGER NOT NULL REFERENCES units(unit_id),
  UNIQUE (assignment_id, position));
CREATE TABLE answers (
  answer_id INTEGER PRIMARY KEY, slot_id INTEGER NOT NULL UNIQUE REFERENCES slots(slot_id),
  worker_id INTEGER NOT NULL, unit_id INTEGER NOT NULL, answer TEXT NOT NULL,
  check_passed INTEGER, submitted REAL NOT NULL, seconds REAL);
"""


class TaskDB:
    def __init__(self, path: str):
        if not os.path.exists(path):
            raise FileNotFoundError(f'no task database at {path}; build one first')
        self.path = path
        self._lock = threading.Lock()
        self._conn = self._connect(path)
        self.config = json.loads(self._one('SELECT value FROM meta WHERE key = ?', ('config',))[0])
        self._upgrade()
        self.links = LinkSigner(self._one('SELECT value FROM meta WHERE key = ?', (SECRET_KEY,))[0])

    def _upgrade(self):
        """Bring a database built by an earlier version up to date (its old links stop working:
        they were unsigned)."""
        has_secret = self._one('SELECT 1 FROM meta WHERE key = ?', (SECRET_KEY,)) is not None
        has_session = 'session_ref' in {r['name'] for r in self._all('PRAGMA table_info(workers)')}
        if has_secret and has_session:
            return
        with self.transaction() as conn:
            conn.execute('INSERT OR IGNORE INTO meta VALUES (?, ?)', (SECRET_KEY, new_secret()))
            if not has_session:
                conn.execute('ALTER TABLE workers ADD COLUMN session_ref TEXT')

    @staticmethod
    def _connect(path):
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute('PRAGMA journal_mode=WAL')
        conn.execute('PRAGMA synchronous=FULL')
        conn.execute('PRAGMA foreign_keys=ON')
        return conn

    @classmethod
    def create(
        cls, path: str, config: dict, items: Dict[str, Item], units: Sequence[sampling.UnitSpec],
        overwrite: bool = False,
    ) -> 'TaskDB':
        """Write a new task; refuses to replace an existing file unless ``overwrite``."""
        if os.path.exists(path):
            if not overwrite:
                raise FileExistsError(f'{path} exists; it may hold answers (use --overwrite)')
            for suffix in ('', '-wal', '-shm'):
                if os.path.exists(path + suffix):
                    os.remove(path + suffix)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        config = dict(config)
        config.setdefault('admin_token', secrets.token_urlsafe(18))
        conn = cls._connect(path)
        conn.executescript(SCHEMA)
        used = {u.item_id for u in units}
        with cls._transaction_on(conn):
            conn.execute('INSERT INTO meta VALUES (?, ?)', ('config', json.dumps(config)))
            conn.execute('INSERT INTO meta VALUES (?, ?)', (SECRET_KEY, new_secret()))
            conn.executemany(
                'INSERT INTO items VALUES (?, ?, ?, ?, ?)',
                [
                    (i.item_id, i.emotion, i.situation, json.dumps(i.context), i.gold)
                    for i in items.values()
                    if i.item_id in used
                ],
            )
            conn.executemany(
                'INSERT INTO units (item_id, models, display, needed, is_check, expected, extra) '
                'VALUES (?, ?, ?, ?, ?, ?, ?)',
                [
                    (u.item_id, json.dumps(list(u.models)), json.dumps(u.display), u.needed,
                     int(u.is_check), u.expected, json.dumps(u.extra))
                    for u in units
                ],
            )
        conn.close()
        return cls(path)

    # -- plumbing -----------------------------------------------------------------------------
    @staticmethod
    @contextmanager
    def _transaction_on(conn):
        conn.execute('BEGIN IMMEDIATE')
        try:
            yield conn
        except BaseException:
            conn.execute('ROLLBACK')
            raise
        conn.execute('COMMIT')

    @contextmanager
    def transaction(self):
        with self._lock, self._transaction_on(self._conn) as conn:
            yield conn

    def _one(self, sql, args=()):
        with self._lock:
            return self._conn.execute(sql, args).fetchone()

    def _all(self, sql, args=()):
        with self._lock:
            return self._conn.execute(sql, args).fetchall()

    def close(self):
        self._conn.close()

    # -- workers ------------------------------------------------------------------------------
    def add_worker(self, provider: str, external_id: Optional[str] = None,
                   session_ref: Optional[str] = None) -> dict:
        """The worker for (provider, external_id), created on first sight; ``token`` is its
        signed link token.

        ``session_ref`` (a provider's per-participant session id) is bound at first sight: the
        same participant id with another session is refused (403), so knowing someone's id is
        not enough to take over their work.
        """
        with self.transaction() as conn:
            if external_id is not None:
                row = conn.execute(
                    'SELECT * FROM workers WHERE provider = ? AND external_id = ?',
                    (provider, external_id),
                ).fetchone()
                if row:
                    if row['session_ref'] != session_ref:
                        raise TaskError('this participant id is already in use by another '
                                        'session', 403)
                    return dict(row)
            cur = conn.execute(
                'INSERT INTO workers (provider, external_id, token, created, session_ref) '
                'VALUES (?, ?, ?, ?, ?)',
                (provider, external_id, secrets.token_hex(16), time.time(), session_ref),
            )
            conn.execute('UPDATE workers SET token = ? WHERE worker_id = ?',
                         (self.links.token(WORKER, cur.lastrowid), cur.lastrowid))
            return dict(conn.execute(
                'SELECT * FROM workers WHERE worker_id = ?', (cur.lastrowid,)).fetchone())

    def worker(self, worker_id: int) -> Optional[dict]:
        row = self._one('SELECT * FROM workers WHERE worker_id = ?', (worker_id,))
        return dict(row) if row else None

    def assignment(self, assignment_id: int) -> Optional[dict]:
        row = self._one('SELECT * FROM assignments WHERE assignment_id = ?', (assignment_id,))
        return dict(row) if row else None

    def assignment_token(self, assignment_id: int) -> str:
        return self.links.token(ASSIGNMENT, assignment_id)

    # -- assignments --------------------------------------------------------------------------
    def open_assignment(self, worker_id: int) -> Optional[dict]:
        row = self._one(
            'SELECT * FROM assignments WHERE worker_id = ? AND completed IS NULL '
            'ORDER BY assignment_id LIMIT 1', (worker_id,))
        return dict(row) if row else None

    def latest_assignment(self, worker_id: int) -> Optional[dict]:
        row = self._one(
            'SELECT * FROM assignments WHERE worker_id = ? ORDER BY assignment_id DESC LIMIT 1',
            (worker_id,))
        return dict(row) if row else None

    def claim(self, worker_id: int, external_ref: str = None, submit_to: str = None) -> Optional[int]:
        """Give the worker a new assignment from the neediest units; None when none is left.

        With ``external_ref`` (e.g. an MTurk assignment id) the worker who already holds it gets
        that assignment back; anyone else gets a 403 :class:`TaskError`.

        Slots handed out in assignments active within ``lease_seconds`` count as reserved, so
        parallel workers spread over the units; abandoned ones are released after the lease.
        """
        cfg = self.config
        now = time.time()
        with self.transaction() as conn:
            if external_ref:  # a provider's assignment id: resuming is for its own worker only
                row = conn.execute(
                    'SELECT assignment_id, worker_id = ? AS own FROM assignments WHERE external_ref = ?',
                    (worker_id, external_ref)).fetchone()
                if row and not row['own']:
                    raise TaskError('this HIT assignment belongs to another worker', 403)
                if row:
                    return row['assignment_id']
            fresh = now - cfg['lease_seconds']
            rows = conn.execute(
                """SELECT u.unit_id, u.item_id, u.is_check, u.needed
                     - (SELECT COUNT(*) FROM answers a WHERE a.unit_id = u.unit_id)
                     - (SELECT COUNT(*) FROM slots s JOIN assignments x USING (assignment_id)
                        WHERE s.unit_id = u.unit_id AND x.completed IS NULL AND x.last_active > ?
                        AND NOT EXISTS (SELECT 1 FROM answers a WHERE a.slot_id = s.slot_id))
                     AS remaining
                   FROM units u""", (fresh,)).fetchall()
            seen = {r[0] for r in conn.execute(
                'SELECT u.item_id FROM slots s JOIN assignments x USING (assignment_id) '
                'JOIN units u USING (unit_id) WHERE x.worker_id = ?', (worker_id,))}
            open_units = [sampling.OpenUnit(r['unit_id'], r['item_id'], r['remaining'])
                          for r in rows if not r['is_check']]
            checks = [sampling.OpenUnit(r['unit_id'], r['item_id'], 1) for r in rows if r['is_check']]
            rng = random.Random(f"{cfg['seed']}:{worker_id}:{len(seen)}")
            plan = sampling.plan_assignment(
                rng, open_units, checks, seen, cfg['items_per_assignment'],
                cfg['checks_per_assignment'])
            if not plan:
                return None
            cur = conn.execute(
                'INSERT INTO assignments (worker_id, created, last_active, completion_code, '
                'external_ref, submit_to) VALUES (?, ?, ?, ?, ?, ?)',
                (worker_id, now, now, secrets.token_hex(4).upper(), external_ref, submit_to))
            conn.executemany(
                'INSERT INTO slots (assignment_id, position, unit_id) VALUES (?, ?, ?)',
                [(cur.lastrowid, pos, unit_id) for pos, unit_id in enumerate(plan)])
            return cur.lastrowid

    def start(self, assignment_id: int) -> None:
        with self.transaction() as conn:
            conn.execute('UPDATE assignments SET started = COALESCE(started, ?), last_active = ? '
                         'WHERE assignment_id = ?', (time.time(), time.time(), assignment_id))

    def slots(self, assignment_id: int) -> List[dict]:
        """The assignment's slots in order, each with its unit's display and whether answered."""
        rows = self._all(
            'SELECT s.slot_id, s.position, u.display, a.answer_id IS NOT NULL AS answered '
            'FROM slots s JOIN units u USING (unit_id) LEFT JOIN answers a USING (slot_id) '
            'WHERE s.assignment_id = ? ORDER BY s.position', (assignment_id,))
        return [dict(r, display=json.loads(r['display'])) for r in rows]

    def example_display(self) -> Optional[dict]:
        """What the first unit shows (for a preview that writes nothing)."""
        row = self._one('SELECT display FROM units WHERE is_check = 0 ORDER BY unit_id LIMIT 1')
        return json.loads(row[0]) if row else None

    # -- answers ------------------------------------------------------------------------------
    def submit(self, worker_id: int, slot_id: int, answer: dict,
               assignment_id: Optional[int] = None) -> dict:
        """Store one answer for the worker's current slot; returns the assignment's state.

        Rejects slots that are not this worker's (or not in ``assignment_id``, when the worker
        came through an assignment link), already answered, or not the current one.
        ``answer`` is {'ratings': {aspect: 1..5}} (Likert) or {'choices': {aspect: 0|1|'tie'}}
        (A/B, 0/1 = the candidate shown first/second), already validated by the app.
        """
        cfg = self.config
        now = time.time()
        with self.transaction() as conn:
            slot = conn.execute(
                'SELECT s.*, x.worker_id, x.last_active, u.models, u.is_check, u.expected '
                'FROM slots s JOIN assignments x USING (assignment_id) JOIN units u USING (unit_id) '
                'WHERE s.slot_id = ?', (slot_id,)).fetchone()
            if slot is None or slot['worker_id'] != worker_id or (
                    assignment_id is not None and slot['assignment_id'] != assignment_id):
                raise TaskError('this item is not assigned to you', 403)
            if conn.execute('SELECT 1 FROM answers WHERE slot_id = ?', (slot_id,)).fetchone():
                raise TaskError('this item was already answered', 409)
            current = conn.execute(
                'SELECT MIN(position) FROM slots s WHERE assignment_id = ? AND NOT EXISTS '
                '(SELECT 1 FROM answers a WHERE a.slot_id = s.slot_id)',
                (slot['assignment_id'],)).fetchone()[0]
            if slot['position'] != current:
                raise TaskError('please answer the items in order', 409)
            models = json.loads(slot['models'])
            record = dict(answer)
            passed = None
            if cfg['mode'] == sampling.AB:
                record['winners'] = {
                    aspect: votes.TIE if c == 'tie' else models[c]
                    for aspect, c in answer['choices'].items()}
                if slot['is_check']:
                    passed = all(w == slot['expected'] for w in record['winners'].values())
            elif slot['is_check']:
                passed = answer['ratings'][sampling.CHECK_ASPECT] <= sampling.CHECK_MAX_RELEVANCE
            conn.execute(
                'INSERT INTO answers (slot_id, worker_id, unit_id, answer, check_passed, '
                'submitted, seconds) VALUES (?, ?, ?, ?, ?, ?, ?)',
                (slot_id, worker_id, slot['unit_id'], json.dumps(record),
                 None if passed is None else int(passed), now, now - slot['last_active']))
            if cfg['mode'] == sampling.AB and not slot['is_check']:
                self._maybe_call_fourth(conn, slot['unit_id'])
            left = conn.execute(
                'SELECT COUNT(*) FROM slots s WHERE assignment_id = ? AND NOT EXISTS '
                '(SELECT 1 FROM answers a WHERE a.slot_id = s.slot_id)',
                (slot['assignment_id'],)).fetchone()[0]
            conn.execute(
                'UPDATE assignments SET last_active = ?, completed = CASE WHEN ? = 0 THEN ? '
                'ELSE completed END WHERE assignment_id = ?',
                (now, left, now, slot['assignment_id']))
            return {'left': left, 'check_passed': passed}

    @staticmethod
    def _maybe_call_fourth(conn, unit_id):
        """MIME: when three annotators split A / B / Tie on any aspect, ask one more."""
        rows = conn.execute(
            'SELECT a.answer FROM answers a WHERE a.unit_id = ? AND a.worker_id NOT IN '
            '(SELECT worker_id FROM answers WHERE check_passed = 0) ORDER BY a.answer_id',
            (unit_id,)).fetchall()
        if len(rows) != votes.BASE_ANNOTATORS:
            return
        winners = [json.loads(r[0])['winners'] for r in rows]
        split = any(votes.needs_extra_annotator([w[a] for w in winners]) for a in winners[0])
        if split:
            conn.execute('UPDATE units SET needed = MAX(needed, ?) WHERE unit_id = ?',
                         (votes.BASE_ANNOTATORS + 1, unit_id))

    # -- reporting ----------------------------------------------------------------------------
    def failed_workers(self) -> List[dict]:
        rows = self._all(
            'SELECT w.worker_id, w.provider, w.external_id, SUM(a.check_passed = 0) AS failed, '
            'COUNT(a.check_passed) AS checks FROM answers a JOIN workers w USING (worker_id) '
            'GROUP BY w.worker_id HAVING failed > 0 ORDER BY w.worker_id')
        return [dict(r) for r in rows]

    def progress(self) -> List[dict]:
        """Answers collected vs. wanted, per model (Likert) or model pair (A/B)."""
        rows = self._all(
            'SELECT u.models, SUM(u.needed) AS wanted, '
            '(SELECT COUNT(*) FROM answers a JOIN units v USING (unit_id) '
            ' WHERE v.models = u.models AND v.is_check = 0) AS answered '
            'FROM units u WHERE u.is_check = 0 GROUP BY u.models')
        merged: Dict[str, dict] = {}
        for r in rows:
            key = ' vs '.join(sorted(json.loads(r['models'])))
            entry = merged.setdefault(key, {'models': key, 'wanted': 0, 'answered': 0})
            entry['wanted'] += r['wanted']
            entry['answered'] += r['answered']
        return list(merged.values())

    def answer_rows(self) -> List[dict]:
        """Every answer with its unit, worker and assignment: the raw export."""
        rows = self._all(
            'SELECT a.answer_id, a.submitted, a.seconds, a.answer, a.check_passed, '
            'w.worker_id, w.provider, w.external_id, x.assignment_id, x.completion_code, '
            'x.external_ref, s.position, u.unit_id, u.item_id, u.models, u.is_check, u.extra, '
            'i.emotion FROM answers a JOIN slots s USING (slot_id) '
            'JOIN assignments x USING (assignment_id) JOIN workers w ON w.worker_id = a.worker_id '
            'JOIN units u ON u.unit_id = a.unit_id JOIN items i ON i.item_id = u.item_id '
            'ORDER BY a.answer_id')
        out = []
        for r in rows:
            d = dict(r)
            d['answer'] = json.loads(d['answer'])
            d['models'] = json.loads(d['models'])
            d['extra'] = json.loads(d['extra'])
            out.append(d)
        return out

    def counts(self) -> dict:
        one = lambda sql: self._one(sql)[0]  # noqa: E731
        return {
            'workers': one('SELECT COUNT(*) FROM workers'),
            'assignments': one('SELECT COUNT(*) FROM assignments'),
            'completed': one('SELECT COUNT(*) FROM assignments WHERE completed IS NOT NULL'),
            'answers': one('SELECT COUNT(*) FROM answers'),
        }
