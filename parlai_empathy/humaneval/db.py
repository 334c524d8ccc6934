"""The task database: one SQLite file holding the task, the workers, and every answer.

Each write is one ``BEGIN IMMEDIATE`` transaction in WAL mode with ``synchronous=FULL``, so an
answer the server acknowledged is on disk and survives a crash or restart. Answers are
insert-only: a slot can be answered once and is never overwritten.

Reservations: an assignment's unanswered slots hold their units for other workers only while the
assignment is *open* (not completed, not released) and either *confirmed* -- it has an answer, and
its last start or answer is within ``lease_seconds`` -- or *young*: unconfirmed, claimed within
``unconfirmed_seconds``. Opening a page is not activity (anyone can reload a page forever; an
answer costs the work it records), and the first answer is the heartbeat that turns a short
unconfirmed lease into a lease. A claim never goes without work while unconfirmed
reservations hold the pool: the oldest of them are released (``preempted``) until it can be
planned, so clients that open tasks and never answer cannot keep the honest out, and an honest
participant, who answers within moments of starting, is confirmed long before it is the oldest. A worker has at most one
open assignment of its own (a partial unique index, checked inside the claiming transaction, so
concurrent starts cannot hand out two); each provider assignment id (MTurk's) opens one assignment
of its own.
"""

import json
import os
import random
import secrets
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
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
  token TEXT NOT NULL UNIQUE, created REAL NOT NULL, session_ref TEXT, study_ref TEXT,
  client TEXT);
CREATE TABLE assignments (
  assignment_id INTEGER PRIMARY KEY, worker_id INTEGER NOT NULL REFERENCES workers(worker_id),
  created REAL NOT NULL, started REAL, last_active REAL NOT NULL, completed REAL,
  completion_code TEXT NOT NULL, external_ref TEXT, submit_to TEXT,
  released REAL, release_reason TEXT, client TEXT, entry TEXT);
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
# Indexes every database gets, new or upgraded. A worker is one binding: the provider's
# participant id together with the study and session ids the platform sent with it.
INDEXES = """
CREATE UNIQUE INDEX IF NOT EXISTS workers_binding ON workers(
  provider, external_id, COALESCE(study_ref, ''), COALESCE(session_ref, ''))
  WHERE external_id IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS one_open_assignment ON assignments(worker_id)
  WHERE completed IS NULL AND released IS NULL AND external_ref IS NULL;
CREATE INDEX IF NOT EXISTS assignments_client ON assignments(client) WHERE completed IS NULL;
"""
WORKER_COLUMNS = ('worker_id', 'provider', 'external_id', 'token', 'created', 'session_ref', 'study_ref', 'client')
NEW_COLUMNS = {
    'workers': ('session_ref', 'study_ref', 'client'),
    'assignments': ('released', 'release_reason', 'client', 'entry'),
}
OPEN = 'completed IS NULL AND released IS NULL'
# an assignment with at least one answer (``x`` is the assignments table)
CONFIRMED = 'EXISTS (SELECT 1 FROM slots s2 JOIN answers a2 USING (slot_id) WHERE s2.assignment_id = x.assignment_id)'
# a reservation that counts: confirmed and fresh (first ?), or unconfirmed and young (second ?)
RESERVING = f'((x.last_active > ? AND {CONFIRMED}) OR (x.created > ? AND NOT {CONFIRMED}))'
NEVER = float('inf')  # as the "young" bound: no unconfirmed reservation counts


@dataclass
class Limits:
    """How much of the pool one client or one entry link may hold at once.

    A reservation counts while it is open and confirmed and fresh, or unconfirmed and young (see
    the module docstring). ``None`` or 0 means no cap. ``client`` is the address the server sees
    (see ``app.client_address``). ``open_per_entry`` counts confirmed reservations only, so clients
    that never answer cannot fill it."""

    lease_seconds: float = 300.0
    unconfirmed_seconds: float = 120.0
    open_per_client: Optional[int] = 2
    open_per_entry: Optional[int] = None
    new_workers_per_client: Optional[int] = 6
    window_seconds: float = 600.0


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
        """Bring a database built by an earlier version up to date (its old links stop working
        if they were unsigned)."""
        missing = {
            t: [c for c in cols if c not in {r['name'] for r in self._all(f'PRAGMA table_info({t})')}]
            for t, cols in NEW_COLUMNS.items()
        }
        workers_sql = self._one("SELECT sql FROM sqlite_master WHERE name = 'workers'")[0]
        # one participant id may now hold several bindings (one per platform session)
        old_unique = 'UNIQUE (provider, external_id)' in workers_sql
        if old_unique:
            self._rebuild_workers_table(missing['workers'])
            missing['workers'] = []
        with self.transaction() as conn:
            conn.execute('INSERT OR IGNORE INTO meta VALUES (?, ?)', (SECRET_KEY, new_secret()))
            for table, cols in missing.items():
                for col in cols:
                    kind = 'REAL' if col == 'released' else 'TEXT'
                    conn.execute(f'ALTER TABLE {table} ADD COLUMN {col} {kind}')
            # earlier versions could give a worker two open assignments; keep the first open
            conn.execute(
                f"UPDATE assignments SET released = last_active, release_reason = 'duplicate' "
                f'WHERE {OPEN} AND external_ref IS NULL AND assignment_id NOT IN '
                f'(SELECT MIN(assignment_id) FROM assignments WHERE {OPEN} AND external_ref IS '
                'NULL GROUP BY worker_id)'
            )
        with self._lock:
            self._conn.executescript(INDEXES)

    def _rebuild_workers_table(self, missing_cols):
        cols = [c for c in WORKER_COLUMNS if c not in missing_cols]
        create = SCHEMA.split('CREATE TABLE workers', 1)[1].split(';', 1)[0]
        with self._lock:
            self._conn.execute('PRAGMA foreign_keys=OFF')
            try:
                with self._transaction_on(self._conn) as conn:
                    conn.execute('CREATE TABLE workers_new' + create)
                    conn.execute(f'INSERT INTO workers_new ({", ".join(cols)}) SELECT {", ".join(cols)} FROM workers')
                    conn.execute('DROP TABLE workers')
                    conn.execute('ALTER TABLE workers_new RENAME TO workers')
            finally:
                self._conn.execute('PRAGMA foreign_keys=ON')

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
        cls,
        path: str,
        config: dict,
        items: Dict[str, Item],
        units: Sequence[sampling.UnitSpec],
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
        conn.executescript(SCHEMA + INDEXES)
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
                    (
                        u.item_id,
                        json.dumps(list(u.models)),
                        json.dumps(u.display),
                        u.needed,
                        int(u.is_check),
                        u.expected,
                        json.dumps(u.extra),
                    )
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
    def add_worker(
        self,
        provider: str,
        external_id: Optional[str] = None,
        session_ref: Optional[str] = None,
        study_ref: Optional[str] = None,
        client: Optional[str] = None,
        limits: Optional[Limits] = None,
    ) -> dict:
        """The worker for one binding -- (provider, external_id, study_ref, session_ref) --
        created on first sight; ``token`` is its signed link token.

        The same binding again gets the same worker. The same participant id with another
        session is another binding, so it gets a worker (and link) of its own: knowing someone's
        id neither opens their work nor, registered first, locks them out. Which of several
        bindings of one id is genuine is decided at analysis (:mod:`.analysis`).

        With ``limits``, one client may create at most ``new_workers_per_client`` workers per
        ``window_seconds`` (429).
        """
        with self.transaction() as conn:
            if external_id is not None:
                row = conn.execute(
                    'SELECT * FROM workers WHERE provider = ? AND external_id = ? AND '
                    "COALESCE(study_ref, '') = ? AND COALESCE(session_ref, '') = ?",
                    (provider, external_id, study_ref or '', session_ref or ''),
                ).fetchone()
                if row:
                    return dict(row)
            cap = limits.new_workers_per_client if limits else None
            if cap and client:
                recent = conn.execute(
                    'SELECT COUNT(*) FROM workers WHERE client = ? AND created > ?',
                    (client, time.time() - limits.window_seconds),
                ).fetchone()[0]
                if recent >= cap:
                    raise TaskError(
                        f'too many new participants from your address ({recent} in the last '
                        f'{limits.window_seconds / 60:.0f} minutes; at most {cap}); please try '
                        'again later',
                        429,
                    )
            cur = conn.execute(
                'INSERT INTO workers (provider, external_id, token, created, session_ref, '
                'study_ref, client) VALUES (?, ?, ?, ?, ?, ?, ?)',
                (provider, external_id, secrets.token_hex(16), time.time(), session_ref, study_ref, client),
            )
            conn.execute(
                'UPDATE workers SET token = ? WHERE worker_id = ?',
                (self.links.token(WORKER, cur.lastrowid), cur.lastrowid),
            )
            return dict(conn.execute('SELECT * FROM workers WHERE worker_id = ?', (cur.lastrowid,)).fetchone())

    def worker(self, worker_id: int) -> Optional[dict]:
        row = self._one('SELECT * FROM workers WHERE worker_id = ?', (worker_id,))
        return dict(row) if row else None

    def assignment(self, assignment_id: int) -> Optional[dict]:
        row = self._one('SELECT * FROM assignments WHERE assignment_id = ?', (assignment_id,))
        return dict(row) if row else None

    def assignment_token(self, assignment_id: int) -> str:
        return self.links.token(ASSIGNMENT, assignment_id)

    # -- assignments --------------------------------------------------------------------------
    def lease_seconds(self, limits: Optional[Limits] = None) -> float:
        return limits.lease_seconds if limits else float(self.config['lease_seconds'])

    def unconfirmed_seconds(self, limits: Optional[Limits] = None) -> float:
        return limits.unconfirmed_seconds if limits else Limits.unconfirmed_seconds

    def open_assignment(self, worker_id: int) -> Optional[dict]:
        """The worker's own open assignment (not one opened by a provider assignment id)."""
        row = self._one(
            f'SELECT * FROM assignments WHERE worker_id = ? AND {OPEN} AND external_ref IS NULL '
            'ORDER BY assignment_id LIMIT 1',
            (worker_id,),
        )
        return dict(row) if row else None

    def latest_assignment(self, worker_id: int) -> Optional[dict]:
        row = self._one(
            'SELECT * FROM assignments WHERE worker_id = ? ORDER BY assignment_id DESC LIMIT 1', (worker_id,)
        )
        return dict(row) if row else None

    @staticmethod
    def _remaining(conn, fresh: float, exclude_assignment: int = 0, young: float = NEVER):
        """Per unit: ratings still wanted, less answers and other reservations that count:
        confirmed ones active after ``fresh``, and unconfirmed ones claimed after ``young``
        (by default none: only answers and confirmed work hold a unit against a first answer)."""
        return conn.execute(
            f"""SELECT u.unit_id, u.item_id, u.is_check, u.needed
                 - (SELECT COUNT(*) FROM answers a WHERE a.unit_id = u.unit_id)
                 - (SELECT COUNT(*) FROM slots s JOIN assignments x USING (assignment_id)
                    WHERE s.unit_id = u.unit_id AND x.{OPEN.replace(' AND ', ' AND x.')}
                    AND {RESERVING} AND x.assignment_id != ?
                    AND NOT EXISTS (SELECT 1 FROM answers a WHERE a.slot_id = s.slot_id))
                 AS remaining
               FROM units u""",
            (fresh, young, exclude_assignment),
        ).fetchall()

    def _check_caps(
        self, conn, limits: Limits, client: Optional[str], entry: Optional[str], fresh: float, young: float
    ) -> None:
        # an address holds its young unconfirmed tasks too; an entry link only confirmed ones,
        # or clients that never answer could fill it and turn every participant away
        for what, column, value, cap, counted_young in (
            ('your address', 'client', client, limits.open_per_client, young),
            ('this entry link', 'entry', entry, limits.open_per_entry, NEVER),
        ):
            if not cap or value is None:
                continue
            held = conn.execute(
                f'SELECT COUNT(*) FROM assignments x WHERE x.{column} = ? AND x.{OPEN.replace(" AND ", " AND x.")} '
                f'AND {RESERVING}',
                (value, fresh, counted_young),
            ).fetchone()[0]
            if held >= cap:
                raise TaskError(
                    f'{what} already holds {held} unfinished task(s) (at most {cap} at once); '
                    'finish or leave one, or try again in a few minutes: an idle task is released '
                    f'after {limits.lease_seconds / 60:.0f} minutes',
                    429,
                )

    def claim(
        self,
        worker_id: int,
        external_ref: str = None,
        submit_to: str = None,
        client: Optional[str] = None,
        entry: Optional[str] = None,
        limits: Optional[Limits] = None,
    ) -> Optional[int]:
        """The worker's open assignment, else a new one from the neediest units; None when none
        is left.

        With ``external_ref`` (e.g. an MTurk assignment id) the worker who already holds it gets
        that assignment back; anyone else gets a 403 :class:`TaskError`. Without it, a worker
        that already has an open assignment gets that one: the check and the insert are one
        transaction, backed by the ``one_open_assignment`` index.

        Slots of reserving assignments (see the module docstring) count as reserved, so parallel
        workers spread over the units; when they leave nothing to plan, the oldest unconfirmed
        assignments of other workers are released until the claim can be planned. For
        workers who came through an entry link (``entry``), ``limits`` caps the reservations per
        client and per entry link (429).
        """
        cfg = self.config
        now = time.time()
        fresh = now - self.lease_seconds(limits)
        young = now - self.unconfirmed_seconds(limits)
        with self.transaction() as conn:
            if external_ref:  # a provider's assignment id: resuming is for its own worker only
                row = conn.execute(
                    'SELECT assignment_id, worker_id = ? AS own FROM assignments WHERE external_ref = ?',
                    (worker_id, external_ref),
                ).fetchone()
                if row and not row['own']:
                    raise TaskError('this HIT assignment belongs to another worker', 403)
                if row:
                    return row['assignment_id']
            else:
                row = conn.execute(
                    f'SELECT assignment_id FROM assignments WHERE worker_id = ? AND {OPEN} AND external_ref IS NULL',
                    (worker_id,),
                ).fetchone()
                if row:
                    return row['assignment_id']
            if limits and entry:
                self._check_caps(conn, limits, client, entry, fresh, young)
            seen = {
                r[0]
                for r in conn.execute(
                    'SELECT u.item_id FROM slots s JOIN assignments x USING (assignment_id) '
                    'JOIN units u USING (unit_id) WHERE x.worker_id = ?',
                    (worker_id,),
                )
            }
            rng = random.Random(f'{cfg["seed"]}:{worker_id}:{len(seen)}')
            plan = self._plan(conn, rng, seen, fresh, young)
            # honest first: unconfirmed holds give way, the oldest first; a few at most per claim
            # (each frees an assignment's worth of units), so no claim empties the whole pool
            for _ in range(4) if not plan else ():
                victim = conn.execute(
                    f'SELECT x.assignment_id FROM assignments x WHERE x.{OPEN.replace(" AND ", " AND x.")} '
                    f'AND x.created > ? AND NOT {CONFIRMED} AND x.worker_id != ? '
                    'ORDER BY x.created, x.assignment_id LIMIT 1',
                    (young, worker_id),
                ).fetchone()
                if victim is None:
                    break
                conn.execute(
                    "UPDATE assignments SET released = ?, release_reason = 'preempted' WHERE assignment_id = ?",
                    (now, victim[0]),
                )
                plan = self._plan(conn, rng, seen, fresh, young)
                if plan:
                    break
            if not plan:
                return None
            cur = conn.execute(
                'INSERT INTO assignments (worker_id, created, last_active, completion_code, '
                'external_ref, submit_to, client, entry) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
                (worker_id, now, now, secrets.token_hex(4).upper(), external_ref, submit_to, client, entry),
            )
            conn.executemany(
                'INSERT INTO slots (assignment_id, position, unit_id) VALUES (?, ?, ?)',
                [(cur.lastrowid, pos, unit_id) for pos, unit_id in enumerate(plan)],
            )
            return cur.lastrowid

    def _plan(self, conn, rng, seen, fresh: float, young: float):
        cfg = self.config
        rows = self._remaining(conn, fresh, young=young)
        open_units = [sampling.OpenUnit(r['unit_id'], r['item_id'], r['remaining']) for r in rows if not r['is_check']]
        checks = [sampling.OpenUnit(r['unit_id'], r['item_id'], 1) for r in rows if r['is_check']]
        return sampling.plan_assignment(
            rng, open_units, checks, seen, cfg['items_per_assignment'], cfg['checks_per_assignment']
        )

    def _renew(self, conn, assignment_id: int, now: float, lease: float, activity: bool = True) -> Optional[dict]:
        """Mark the assignment active now (``activity``: a start or an answer; a page view only
        looks). While its reservation does not hold -- unconfirmed, or idle longer than the lease --
        unanswered slots whose units others have filled (answers, confirmed reservations) are
        dropped; with no rating item left it completes (some answers) or is released (none)."""
        x = conn.execute('SELECT * FROM assignments WHERE assignment_id = ?', (assignment_id,)).fetchone()
        if x is None or x['completed'] is not None or x['released'] is not None:
            return dict(x) if x else None
        confirmed = (
            conn.execute(
                'SELECT 1 FROM slots s JOIN answers a USING (slot_id) WHERE s.assignment_id = ? LIMIT 1',
                (assignment_id,),
            ).fetchone()
            is not None
        )
        if not confirmed or x['last_active'] <= now - lease:
            remaining = {
                r['unit_id']: r['remaining']
                for r in self._remaining(conn, now - lease, assignment_id)
                if not r['is_check']
            }
            pending = conn.execute(
                'SELECT s.slot_id, s.unit_id FROM slots s WHERE assignment_id = ? AND NOT EXISTS '
                '(SELECT 1 FROM answers a WHERE a.slot_id = s.slot_id) ORDER BY position',
                (assignment_id,),
            ).fetchall()
            gone = [p['slot_id'] for p in pending if p['unit_id'] in remaining and remaining[p['unit_id']] <= 0]
            conn.executemany('DELETE FROM slots WHERE slot_id = ?', [(g,) for g in gone])
            left_items = [p for p in pending if p['unit_id'] in remaining and p['slot_id'] not in gone]
            if gone and not left_items:
                conn.execute(
                    'DELETE FROM slots WHERE assignment_id = ? AND NOT EXISTS '
                    '(SELECT 1 FROM answers a WHERE a.slot_id = slots.slot_id)',
                    (assignment_id,),
                )
                answered = conn.execute(
                    'SELECT COUNT(*) FROM slots WHERE assignment_id = ?', (assignment_id,)
                ).fetchone()[0]
                if answered:
                    conn.execute('UPDATE assignments SET completed = ? WHERE assignment_id = ?', (now, assignment_id))
                else:
                    conn.execute(
                        "UPDATE assignments SET released = ?, release_reason = 'expired' WHERE assignment_id = ?",
                        (now, assignment_id),
                    )
        if activity:
            conn.execute(
                f'UPDATE assignments SET last_active = ? WHERE assignment_id = ? AND {OPEN}', (now, assignment_id)
            )
        return dict(conn.execute('SELECT * FROM assignments WHERE assignment_id = ?', (assignment_id,)).fetchone())

    def touch(self, assignment_id: int, limits: Optional[Limits] = None) -> Optional[dict]:
        """A page view: the assignment as it stands now (slots others filled while its reservation
        did not hold are dropped, see :meth:`_renew`). It does not renew the lease: a view is no
        work, and reloading a page must not hold units against the honest."""
        with self.transaction() as conn:
            return self._renew(conn, assignment_id, time.time(), self.lease_seconds(limits), activity=False)

    def start(self, assignment_id: int, limits: Optional[Limits] = None) -> None:
        now = time.time()
        with self.transaction() as conn:
            self._renew(conn, assignment_id, now, self.lease_seconds(limits))
            conn.execute(
                f'UPDATE assignments SET started = COALESCE(started, ?) WHERE assignment_id = ? AND {OPEN}',
                (now, assignment_id),
            )

    def leave(self, assignment_id: int) -> bool:
        """The worker returns the task: its unanswered items go back to the pool at once (its
        answers are kept). False if it was already completed or released."""
        with self.transaction() as conn:
            cur = conn.execute(
                f"UPDATE assignments SET released = ?, release_reason = 'left' WHERE assignment_id = ? AND {OPEN}",
                (time.time(), assignment_id),
            )
            return cur.rowcount == 1

    def slots(self, assignment_id: int) -> List[dict]:
        """The assignment's slots in order, each with its unit's display and whether answered."""
        rows = self._all(
            'SELECT s.slot_id, s.position, u.display, a.answer_id IS NOT NULL AS answered '
            'FROM slots s JOIN units u USING (unit_id) LEFT JOIN answers a USING (slot_id) '
            'WHERE s.assignment_id = ? ORDER BY s.position',
            (assignment_id,),
        )
        return [dict(r, display=json.loads(r['display'])) for r in rows]

    def example_display(self) -> Optional[dict]:
        """What the first unit shows (for a preview that writes nothing)."""
        row = self._one('SELECT display FROM units WHERE is_check = 0 ORDER BY unit_id LIMIT 1')
        return json.loads(row[0]) if row else None

    # -- answers ------------------------------------------------------------------------------
    def submit(
        self,
        worker_id: int,
        slot_id: int,
        answer: dict,
        assignment_id: Optional[int] = None,
        limits: Optional[Limits] = None,
    ) -> dict:
        """Store one answer for the worker's current slot; returns the assignment's state.

        Rejects slots that are not this worker's (or not in ``assignment_id``, when the worker
        came through an assignment link), already answered, or not the current one.
        ``answer`` is {'ratings': {aspect: 1..5}} (Likert) or {'choices': {aspect: 0|1|'tie'}}
        (A/B, 0/1 = the candidate shown first/second), already validated by the app.
        """
        cfg = self.config
        now = time.time()
        with self.transaction() as conn:
            # renew the worker's own assignment first (an idle spell may have cost it items);
            # the time on the item is measured from the activity before this answer
            own = conn.execute(
                'SELECT x.assignment_id, x.last_active FROM slots s JOIN assignments x '
                'USING (assignment_id) WHERE s.slot_id = ? AND x.worker_id = ?',
                (slot_id, worker_id),
            ).fetchone()
            if own is not None and assignment_id not in (None, own['assignment_id']):
                own = None
            if own is not None:
                state = self._renew(conn, own['assignment_id'], now, self.lease_seconds(limits))
                if state['released'] is not None:
                    raise TaskError(
                        'you left this task (or it was released after a long idle '
                        'spell); its items went back to other workers',
                        409,
                    )
            slot = conn.execute(
                'SELECT s.*, x.worker_id, x.last_active, u.models, u.is_check, u.expected '
                'FROM slots s JOIN assignments x USING (assignment_id) JOIN units u USING (unit_id) '
                'WHERE s.slot_id = ?',
                (slot_id,),
            ).fetchone()
            if slot is None and own is not None:
                raise TaskError(
                    'this item went to another worker while your task was idle or not '
                    'yet started; please continue with the next one',
                    409,
                )
            if (
                slot is None
                or slot['worker_id'] != worker_id
                or (assignment_id is not None and slot['assignment_id'] != assignment_id)
            ):
                raise TaskError('this item is not assigned to you', 403)
            if conn.execute('SELECT 1 FROM answers WHERE slot_id = ?', (slot_id,)).fetchone():
                raise TaskError('this item was already answered', 409)
            current = conn.execute(
                'SELECT MIN(position) FROM slots s WHERE assignment_id = ? AND NOT EXISTS '
                '(SELECT 1 FROM answers a WHERE a.slot_id = s.slot_id)',
                (slot['assignment_id'],),
            ).fetchone()[0]
            if slot['position'] != current:
                raise TaskError('please answer the items in order', 409)
            models = json.loads(slot['models'])
            record = dict(answer)
            passed = None
            if cfg['mode'] == sampling.AB:
                record['winners'] = {
                    aspect: votes.TIE if c == 'tie' else models[c] for aspect, c in answer['choices'].items()
                }
                if slot['is_check']:
                    passed = all(w == slot['expected'] for w in record['winners'].values())
            elif slot['is_check']:
                passed = answer['ratings'][sampling.CHECK_ASPECT] <= sampling.CHECK_MAX_RELEVANCE
            conn.execute(
                'INSERT INTO answers (slot_id, worker_id, unit_id, answer, check_passed, '
                'submitted, seconds) VALUES (?, ?, ?, ?, ?, ?, ?)',
                (
                    slot_id,
                    worker_id,
                    slot['unit_id'],
                    json.dumps(record),
                    None if passed is None else int(passed),
                    now,
                    now - own['last_active'],
                ),
            )
            if cfg['mode'] == sampling.AB and not slot['is_check']:
                self._maybe_call_fourth(conn, slot['unit_id'])
            left = conn.execute(
                'SELECT COUNT(*) FROM slots s WHERE assignment_id = ? AND NOT EXISTS '
                '(SELECT 1 FROM answers a WHERE a.slot_id = s.slot_id)',
                (slot['assignment_id'],),
            ).fetchone()[0]
            conn.execute(
                'UPDATE assignments SET last_active = ?, completed = CASE WHEN ? = 0 THEN ? '
                'ELSE completed END WHERE assignment_id = ?',
                (now, left, now, slot['assignment_id']),
            )
            return {'left': left, 'check_passed': passed}

    @staticmethod
    def _maybe_call_fourth(conn, unit_id):
        """MIME: when three annotators split A / B / Tie on any aspect, ask one more."""
        rows = conn.execute(
            'SELECT a.answer FROM answers a WHERE a.unit_id = ? AND a.worker_id NOT IN '
            '(SELECT worker_id FROM answers WHERE check_passed = 0) ORDER BY a.answer_id',
            (unit_id,),
        ).fetchall()
        if len(rows) != votes.BASE_ANNOTATORS:
            return
        winners = [json.loads(r[0])['winners'] for r in rows]
        split = any(votes.needs_extra_annotator([w[a] for w in winners]) for a in winners[0])
        if split:
            conn.execute(
                'UPDATE units SET needed = MAX(needed, ?) WHERE unit_id = ?', (votes.BASE_ANNOTATORS + 1, unit_id)
            )

    # -- reporting ----------------------------------------------------------------------------
    def failed_workers(self) -> List[dict]:
        rows = self._all(
            'SELECT w.worker_id, w.provider, w.external_id, SUM(a.check_passed = 0) AS failed, '
            'COUNT(a.check_passed) AS checks FROM answers a JOIN workers w USING (worker_id) '
            'GROUP BY w.worker_id HAVING failed > 0 ORDER BY w.worker_id'
        )
        return [dict(r) for r in rows]

    def progress(self) -> List[dict]:
        """Answers collected vs. wanted, per model (Likert) or model pair (A/B)."""
        rows = self._all(
            'SELECT u.models, SUM(u.needed) AS wanted, '
            '(SELECT COUNT(*) FROM answers a JOIN units v USING (unit_id) '
            ' WHERE v.models = u.models AND v.is_check = 0) AS answered '
            'FROM units u WHERE u.is_check = 0 GROUP BY u.models'
        )
        merged: Dict[str, dict] = {}
        for r in rows:
            key = ' vs '.join(sorted(json.loads(r['models'])))
            entry = merged.setdefault(key, {'models': key, 'wanted': 0, 'answered': 0})
            entry['wanted'] += r['wanted']
            entry['answered'] += r['answered']
        return list(merged.values())

    def model_sets(self) -> List[tuple]:
        """The models rated together (one for Likert, a pair for A/B), sorted, in unit order."""
        rows = self._all('SELECT models FROM units WHERE is_check = 0 ORDER BY unit_id')
        return list(dict.fromkeys(tuple(sorted(json.loads(r['models']))) for r in rows))

    def answer_rows(self) -> List[dict]:
        """Every answer with its unit, worker and assignment: the raw export."""
        rows = self._all(
            'SELECT a.answer_id, a.submitted, a.seconds, a.answer, a.check_passed, '
            'w.worker_id, w.provider, w.external_id, w.study_ref, w.session_ref, '
            'x.assignment_id, x.completion_code, '
            'x.external_ref, s.position, u.unit_id, u.item_id, u.models, u.is_check, u.extra, '
            'i.emotion FROM answers a JOIN slots s USING (slot_id) '
            'JOIN assignments x USING (assignment_id) JOIN workers w ON w.worker_id = a.worker_id '
            'JOIN units u ON u.unit_id = a.unit_id JOIN items i ON i.item_id = u.item_id '
            'ORDER BY a.answer_id'
        )
        out = []
        for r in rows:
            d = dict(r)
            d['answer'] = json.loads(d['answer'])
            d['models'] = json.loads(d['models'])
            d['extra'] = json.loads(d['extra'])
            out.append(d)
        return out

    def bindings(self) -> List[dict]:
        """Every worker's provider, participant id and platform session (no links)."""
        return [
            dict(r) for r in self._all('SELECT worker_id, provider, external_id, study_ref, session_ref FROM workers')
        ]

    def counts(self) -> dict:
        one = lambda sql: self._one(sql)[0]  # noqa: E731
        return {
            'workers': one('SELECT COUNT(*) FROM workers'),
            'assignments': one('SELECT COUNT(*) FROM assignments'),
            'completed': one('SELECT COUNT(*) FROM assignments WHERE completed IS NOT NULL'),
            'answers': one('SELECT COUNT(*) FROM answers'),
        }
