#!/usr/bin/env python3
"""Human evaluation from the ``parlai`` command (one script per step).

parlai empathy_humaneval_build   --db task.db --mode likert --world-logs a=a.jsonl b=b.jsonl
parlai empathy_humaneval_links   --db task.db --base-url http://127.0.0.1:8000 -n 5
parlai empathy_humaneval_serve   --db task.db [--host 127.0.0.1 --port 8000]
parlai empathy_humaneval_mturk   --db task.db --task-url https://... --reward 1.00 --dry-run
parlai empathy_humaneval_analyze --db task.db --outdir results/
"""

from parlai.core.params import ParlaiParser
from parlai.core.script import register_script

from parlai_empathy.humaneval import providers
from parlai_empathy.humaneval.db import TaskDB
from parlai_empathy.integration.commands import EmpathyScript


def _parser(description: str) -> ParlaiParser:
    parser = ParlaiParser(False, False, description=description)
    parser.add_argument('--db', required=True, help='task database (SQLite file)')
    return parser


@register_script('empathy_humaneval_build')
class HumanEvalBuild(EmpathyScript):
    """Build a Likert or A/B rating task from eval_model world logs, committed rows' outputs or
    ACUTE pairings."""

    @classmethod
    def setup_args(cls):
        p = _parser(cls.__doc__)
        p.add_argument(
            '--mode',
            choices=['likert', 'ab'],
            default='likert',
            help='likert: rate each response; ab: pick the better of two',
        )
        p.add_argument(
            '--world-logs',
            nargs='+',
            default=[],
            help='eval_model --world-logs files, as name=path or path (name = stem)',
        )
        p.add_argument(
            '--outputs',
            nargs='+',
            default=[],
            help="committed rows' outputs.jsonl.gz (parlai empathy_leaderboard's "
            'evidence), as name=path or path (name = the row folder); their contexts '
            'come from the cleaned ED test split (--ed-datapath)',
        )
        p.add_argument(
            '--ed-datapath',
            default=None,
            help='folder with test.csv for --outputs ("sample": the embedded sample); default $PARLAI_EMPATHY_ED_DIR',
        )
        p.add_argument('--pairings', default=None, help='ACUTE-Eval pairings JSONL (A/B only)')
        p.add_argument(
            '--per-emotion', type=int, default=0, help='emotion-stratified sample size per emotion (MIME: 4)'
        )
        p.add_argument(
            '--num-items', type=int, default=0, help='uniform sample size (0 = every item shared by all models)'
        )
        p.add_argument('--annotators', type=int, default=3, help='ratings wanted per unit')
        p.add_argument('--items-per-assignment', type=int, default=10, help='items one worker rates per assignment')
        p.add_argument('--checks-per-assignment', type=int, default=1, help='attention-check items per assignment')
        p.add_argument(
            '--aspects',
            default=None,
            help='comma-separated, default empathy,relevance,fluency (Likert) or overall (A/B)',
        )
        p.add_argument('--seed', type=int, default=0, help='seed of the item sample and its order')
        p.add_argument(
            '--lease-seconds',
            type=int,
            default=300,
            help='an unfinished assignment stops reserving its items after this many '
            'seconds without activity (page view, start, answer); the server can '
            'override it',
        )
        p.add_argument(
            '--completion-url', default='', help='generic provider: URL shown at the end, {code} = completion code'
        )
        p.add_argument(
            '--acute-pairings-out', default=None, help='A/B: also write the units as ACUTE-Eval pairings JSONL'
        )
        p.add_argument('--overwrite', type='bool', default=False, help='replace an existing task database')
        return p

    def run(self):
        from parlai_empathy.humaneval.build import build_task

        o = self.opt
        try:
            db = build_task(
                o['db'],
                o['mode'],
                o['world_logs'],
                o['pairings'],
                o['per_emotion'],
                o['num_items'],
                o['annotators'],
                o['items_per_assignment'],
                o['checks_per_assignment'],
                o['seed'],
                o['lease_seconds'],
                o['completion_url'],
                o['acute_pairings_out'],
                o['overwrite'],
                o['aspects'].split(',') if o['aspects'] else None,
                outputs=o['outputs'],
                ed_datapath=o['ed_datapath'],
            )
        except (ValueError, OSError) as err:
            # bad inputs (their messages name file, line and field), not bugs: no traceback
            raise SystemExit(f'parlai empathy_humaneval_build: {err}') from None
        progress = db.progress()
        print(f'Built {o["mode"]} task in {o["db"]}: models {db.config["models"]}')
        for p in progress:
            print(f'  {p["models"]}: {p["wanted"]} ratings wanted')
        print(f'Admin token: {db.config["admin_token"]}')
        return progress


@register_script('empathy_humaneval_links')
class HumanEvalLinks(EmpathyScript):
    """Create local workers and print one private, signed link each (for pilots)."""

    @classmethod
    def setup_args(cls):
        p = _parser(cls.__doc__)
        p.add_argument('--base-url', default='http://127.0.0.1:8000', help='address the links point at (the server)')
        p.add_argument('-n', '--num-workers', type=int, default=1, help='workers (links) to create')
        p.add_argument(
            '--admin-token', type='bool', default=False, help='also print the admin token (the password of /admin)'
        )
        return p

    def run(self):
        db = TaskDB(self.opt['db'])
        links = providers.local_links(db, self.opt['base_url'], self.opt['num_workers'])
        print('\n'.join(links))
        if self.opt['admin_token']:
            print(f'Admin token: {db.config["admin_token"]}')
        return links


@register_script('empathy_humaneval_serve')
class HumanEvalServe(EmpathyScript):
    """Serve the worker and admin pages (binds 127.0.0.1 unless --host says otherwise)."""

    @classmethod
    def setup_args(cls):
        p = _parser(cls.__doc__)
        p.add_argument('--host', default='127.0.0.1', help='interface to listen on (127.0.0.1: this machine only)')
        p.add_argument('--port', type=int, default=8000, help='port to listen on')
        p.add_argument(
            '--lease-seconds',
            type=int,
            default=0,
            help='idle seconds after which an unfinished assignment stops reserving '
            "its items (0 = the task's own, set at build)",
        )
        p.add_argument(
            '--unconfirmed-seconds',
            type=int,
            default=120,
            help='seconds a claimed assignment with no answer yet reserves its items (its '
            'first answer turns this into the --lease-seconds lease; page views never renew '
            'either)',
        )
        p.add_argument(
            '--max-open-per-client',
            type=int,
            default=2,
            help='unfinished assignments one client address may hold at once through the entry links (0 = no cap)',
        )
        p.add_argument(
            '--max-open-per-entry',
            type=int,
            default=-1,
            help='unfinished assignments with answers one entry link (Prolific-style or '
            'MTurk) may hold at once (-1 or 0 = no cap: every participant comes through '
            'the one link)',
        )
        p.add_argument(
            '--max-new-workers-per-client',
            type=int,
            default=6,
            help='participant bindings one client address may create per --window-seconds (0 = no cap)',
        )
        p.add_argument('--window-seconds', type=int, default=600, help='the window of --max-new-workers-per-client')
        p.add_argument(
            '--forwarded-allow-ips',
            default=None,
            help='comma-separated proxy addresses whose X-Forwarded-For names the '
            "client (default: uvicorn's, 127.0.0.1 and ::1: a proxy or tunnel on "
            "this machine); '' trusts none",
        )
        p.add_argument(
            '--mturk-verify',
            choices=['none', 'sandbox', 'live'],
            default='none',
            help='check each accepted HIT with the MTurk API at /mturk (boto3 credentials needed)',
        )
        p.add_argument('--aws-profile', default=None, help='AWS credentials profile for --mturk-verify')
        return p

    def run(self):
        from parlai_empathy.humaneval.app import default_limits, serve

        o = self.opt
        db = TaskDB(self.opt['db'])
        limits = default_limits(db)
        if o['lease_seconds']:
            limits.lease_seconds = float(o['lease_seconds'])
        limits.unconfirmed_seconds = float(o['unconfirmed_seconds'])
        limits.open_per_client = o['max_open_per_client'] or None
        if o['max_open_per_entry'] >= 0:
            limits.open_per_entry = o['max_open_per_entry'] or None
        limits.new_workers_per_client = o['max_new_workers_per_client'] or None
        limits.window_seconds = float(o['window_seconds'])
        mturk = providers.mturk_client(o['mturk_verify'], o['aws_profile']) if o['mturk_verify'] != 'none' else None
        base = f'http://{self.opt["host"]}:{self.opt["port"]}'
        print(
            f'Admin: {base}/admin (user name: anything; password: the admin token that '
            'empathy_humaneval_build printed, or `parlai empathy_humaneval_links --db DB '
            '--admin-token true`; scripts send "Authorization: Bearer <token>")'
        )
        print(f'Prolific-style entry: {providers.generic_entry_url(db, base)}')
        print(
            f'Leases: {limits.unconfirmed_seconds:.0f} s before a first answer, then '
            f'{limits.lease_seconds:.0f} s idle; open tasks at most '
            f'{limits.open_per_client or "any"} per client address, '
            f'{limits.open_per_entry or "any"} per entry link; at most '
            f'{limits.new_workers_per_client or "any"} new participants per client per '
            f'{limits.window_seconds:.0f} s'
        )
        db.close()
        serve(
            self.opt['db'],
            self.opt['host'],
            self.opt['port'],
            limits=limits,
            mturk=mturk,
            forwarded_allow_ips=o['forwarded_allow_ips'],
        )


@register_script('empathy_humaneval_mturk')
class HumanEvalMTurk(EmpathyScript):
    """Post ExternalQuestion HITs for a served task on MTurk (sandbox by default)."""

    @classmethod
    def setup_args(cls):
        p = _parser(cls.__doc__)
        p.add_argument('--task-url', required=True, help='public https:// URL of the server')
        p.add_argument(
            '--environment',
            choices=['sandbox', 'live'],
            default='sandbox',
            help='MTurk sandbox (free, for tests) or live (paid)',
        )
        p.add_argument(
            '--dry-run', type='bool', default=False, help='print the CreateHIT requests without sending them'
        )
        p.add_argument('--num-hits', type=int, default=0, help='0 = enough to cover the task')
        p.add_argument('--reward', default='1.00', help='USD per HIT, e.g. 1.00')
        p.add_argument('--title', default='Rate responses in short conversations', help='HIT title shown to workers')
        p.add_argument(
            '--description',
            default='Read short conversations about personal experiences and rate the responses.',
            help='HIT description shown to workers',
        )
        p.add_argument('--keywords', default='dialogue, rating, conversation', help='HIT search keywords')
        p.add_argument('--minutes-per-assignment', type=int, default=30, help='time a worker has for one assignment')
        p.add_argument('--lifetime-hours', type=int, default=72, help='how long the HITs stay available')
        p.add_argument('--min-approval', type=int, default=95, help='lowest approval rate (%%) a worker must have')
        p.add_argument('--locales', default='US', help="comma-separated countries, '' = any")
        p.add_argument('--aws-profile', default=None, help="AWS credentials profile (default: boto3's own lookup)")
        return p

    def run(self):
        o = self.opt
        db = TaskDB(o['db'])
        n = o['num_hits'] or providers.hits_needed(db)
        requests = providers.mturk_requests(
            providers.mturk_entry_url(db, o['task_url']),
            n,
            o['reward'],
            o['title'],
            o['description'],
            o['keywords'],
            o['minutes_per_assignment'],
            o['lifetime_hours'],
            1,
            o['min_approval'],
            [c for c in o['locales'].split(',') if c],
        )
        return providers.create_hits(requests, o['environment'], o['dry_run'], profile=o['aws_profile'])


@register_script('empathy_humaneval_analyze')
class HumanEvalAnalyze(EmpathyScript):
    """Tables (mean ± SEM or win/lose/tie %), agreement (Krippendorff's alpha, Cohen's kappa) and plots."""

    @classmethod
    def setup_args(cls):
        p = _parser(cls.__doc__)
        p.add_argument('--outdir', required=True, help='folder the tables and plots are written to')
        p.add_argument('--keep-failed', type='bool', default=False, help='keep workers who failed an attention check')
        p.add_argument(
            '--mturk-verify',
            choices=['none', 'sandbox', 'live'],
            default='none',
            help='verify every MTurk assignment with the MTurk API (GetAssignment); '
            'MTurk answers are counted only once verified',
        )
        p.add_argument(
            '--mturk-assignments',
            default=None,
            help='instead of the API: assignments exported from MTurk (the batch '
            'results CSV, or JSON lines of GetAssignment/ListAssignmentsForHIT '
            'Assignment records) with AssignmentId, WorkerId, AssignmentStatus',
        )
        p.add_argument(
            '--prolific-submissions',
            default=None,
            help="Prolific's submissions export (CSV with 'Participant id' and "
            "'Submission id'): only the bindings it lists are counted",
        )
        p.add_argument('--aws-profile', default=None, help='AWS credentials profile for --mturk-verify')
        return p

    def run(self):
        from parlai_empathy.humaneval.analysis import analyze, mturk_verifier

        o = self.opt
        try:
            verifier = mturk_verifier(
                providers.mturk_client(o['mturk_verify'], o['aws_profile']) if o['mturk_verify'] != 'none' else None,
                o['mturk_assignments'],
            )
            paths = analyze(
                o['db'], o['outdir'], o['keep_failed'], mturk=verifier, prolific_submissions=o['prolific_submissions']
            )
        except (ValueError, OSError) as err:
            raise SystemExit(f'parlai empathy_humaneval_analyze: {err}') from None
        with open(paths['markdown'], encoding='utf-8') as f:
            print(f.read())
        for name, path in paths.items():
            print(f'{name}: {path}')
        return paths


if __name__ == '__main__':
    HumanEvalBuild.main()
