#!/usr/bin/env python3
"""Human evaluation on ParlAI's own crowdsourcing tasks (ACUTE-Eval, turn annotations) on Mephisto.

    parlai empathy_acute_build   --outdir IN --world-logs a=a.jsonl b=b.jsonl --num-items 50
    parlai empathy_acute_run     --inputs IN --run-dir RUN [--crowd-task acute|turns] [--provider mock]
    parlai empathy_acute_analyze --run-dir RUN --outdir RESULTS [--reference moel]

``run`` and ``analyze`` need the crowd extra (``make install-crowd``: Mephisto 1.1.1, node, npm).
"""

from parlai.core.params import ParlaiParser
from parlai.core.script import register_script

from parlai_empathy.integration.commands import EmpathyScript


@register_script('empathy_acute_build')
class AcuteBuild(EmpathyScript):
    """Write ACUTE-Eval pairings (with onboarding pairs) and turn-annotation data from two or more
    models' world logs, committed rows' outputs or other papers' released outputs."""

    @classmethod
    def setup_args(cls):
        p = ParlaiParser(False, False, description=cls.__doc__)
        p.add_argument('--outdir', required=True, help='folder for pairings.jsonl, turns.jsonl, manifest.json')
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
            help="committed rows' outputs.jsonl.gz, as name=path or path (name = the row "
            'folder); contexts from the cleaned ED test split (--ed-datapath)',
        )
        p.add_argument(
            '--released',
            nargs='+',
            default=[],
            help='released files parlai empathy_score --released knows, as NAME or NAME=PATH '
            '(e.g. kemp, empdg, moel), matched with ED test as empathy_score matches them',
        )
        p.add_argument('--released-dir', default=None, help='where released files are kept')
        p.add_argument(
            '--ed-datapath',
            default=None,
            help='folder with test.csv ("sample": the embedded sample); default $PARLAI_EMPATHY_ED_DIR',
        )
        p.add_argument('--num-items', type=int, default=0, help='uniform sample of items (0 = all shared)')
        p.add_argument('--per-emotion', type=int, default=0, help='emotion-stratified sample per emotion (MIME: 4)')
        p.add_argument(
            '--onboarding',
            type=int,
            default=1,
            help='onboarding pairs (ED gold against a reply from another conversation)',
        )
        p.add_argument(
            '--annotate', default=None, help='the model whose replies get turn annotations (default: the first)'
        )
        p.add_argument('--seed', type=int, default=0, help='seed of the item sample and the onboarding pairs')
        return p

    def run(self):
        from parlai_empathy.humaneval.crowd import bridge

        o = self.opt
        try:
            built = bridge.build(
                o['outdir'],
                o['world_logs'],
                o['outputs'],
                o['released'],
                o['ed_datapath'],
                o['num_items'],
                o['per_emotion'],
                o['onboarding'],
                o['annotate'],
                o['seed'],
                o['released_dir'],
            )
        except (ValueError, OSError) as err:
            raise SystemExit(f'parlai empathy_acute_build: {err}') from None
        print('\n'.join(built.summary()))
        return built


@register_script('empathy_acute_run')
class AcuteRun(EmpathyScript):
    """Run ParlAI's ACUTE-Eval (or turn-annotation) task on Mephisto with our pages; mock provider
    and a local server on 127.0.0.1 by default."""

    @classmethod
    def setup_args(cls):
        p = ParlaiParser(False, False, description=cls.__doc__)
        p.add_argument('--inputs', required=True, help='the folder parlai empathy_acute_build wrote')
        p.add_argument(
            '--run-dir', required=True, help="the run's folder: Mephisto's database and data, the router copy"
        )
        p.add_argument(
            '--crowd-task',
            default='acute',
            choices=['acute', 'turns'],
            help='acute: pairwise ACUTE-Eval; turns: per-turn annotation of one model',
        )
        p.add_argument(
            '--provider',
            default='mock',
            choices=['mock', 'mturk_sandbox', 'mturk'],
            help='mock: workers open the printed URL; mturk_*: Mephisto posts HITs',
        )
        p.add_argument(
            '--requester', default=None, help='MTurk: the AWS credentials profile (Mephisto requester of that name)'
        )
        p.add_argument(
            '--public-url',
            default=None,
            help='MTurk: the https address workers reach (your proxy in front of the local server)',
        )
        p.add_argument('--port', type=int, default=3000, help='port of the local server (127.0.0.1)')
        p.add_argument(
            '--question',
            default='empathy',
            help='ACUTE question: empathy, relevance, fluency or overall (wording in '
            'parlai_empathy/humaneval/questions.py)',
        )
        p.add_argument('--subtasks-per-unit', type=int, default=5, help='comparisons or conversations per HIT')
        p.add_argument(
            '--annotations-per-pair',
            type=int,
            default=1,
            help='ACUTE: judgments per pairing; turns: workers per conversation group',
        )
        p.add_argument(
            '--maximum-units-per-worker', type=int, default=1, help='HITs one worker may do (ACUTE-Eval recommends 1)'
        )
        p.add_argument('--reward', type=float, default=0.5, help='USD per HIT (MTurk)')
        p.add_argument('--minutes-per-unit', type=int, default=30, help='time a worker has for one HIT')
        p.add_argument(
            '--no-submission-patience',
            type=int,
            default=3600,
            help='seconds without a submission after which the run ends',
        )
        p.add_argument(
            '--task-name',
            default=None,
            help='Mephisto task name (default empathy_acute_<question> or empathy_turn_annotations)',
        )
        p.add_argument(
            '--crowd-cache',
            default=None,
            help='where the built pages and router are cached (default '
            '$PARLAI_EMPATHY_CROWD_CACHE or ~/.cache/parlai-empathy/crowd)',
        )
        p.add_argument(
            '--dry-run',
            type='bool',
            default=False,
            help='build and validate everything, print what MTurk would be sent and its cost, post and serve nothing',
        )
        return p

    def run(self):
        from parlai_empathy.humaneval.crowd import launch, pages

        o = self.opt
        try:
            run = launch.CrowdRun(
                kind=o['crowd_task'],
                inputs=o['inputs'],
                run_dir=o['run_dir'],
                provider=o['provider'],
                requester=o['requester'],
                port=o['port'],
                public_url=o['public_url'],
                question=o['question'],
                subtasks_per_unit=o['subtasks_per_unit'],
                annotations_per_pair=o['annotations_per_pair'],
                maximum_units_per_worker=o['maximum_units_per_worker'],
                reward=o['reward'],
                minutes_per_unit=o['minutes_per_unit'],
                no_submission_patience=o['no_submission_patience'],
                task_name=o['task_name'],
            )
            return launch.launch(run, dry_run=o['dry_run'], cache=o['crowd_cache'])
        except (ValueError, OSError, pages.PagesError, ImportError) as err:
            raise SystemExit(f'parlai empathy_acute_run: {err}') from None


@register_script('empathy_acute_analyze')
class AcuteAnalyze(EmpathyScript):
    """Report a Mephisto run's answers: ACUTE win rates with exact intervals and binomial tests
    (onboarding failures excluded), or turn-annotation shares; agreement; time per HIT."""

    @classmethod
    def setup_args(cls):
        p = ParlaiParser(False, False, description=cls.__doc__)
        p.add_argument('--run-dir', required=True, help='the folder of parlai empathy_acute_run')
        p.add_argument('--outdir', required=True, help='where the report goes')
        p.add_argument(
            '--reference',
            default=None,
            help='ACUTE: the system every other is compared with in results.json '
            "(the leaderboard's column; default: the first model)",
        )
        p.add_argument(
            '--keep-failed', type='bool', default=False, help='keep the judgments of workers who failed onboarding'
        )
        return p

    def run(self):
        from parlai_empathy.humaneval.crowd import results

        o = self.opt
        try:
            paths = results.analyze(o['run_dir'], o['outdir'], o['reference'], o['keep_failed'])
        except (ValueError, OSError, ImportError) as err:
            raise SystemExit(f'parlai empathy_acute_analyze: {err}') from None
        with open(paths['markdown'], encoding='utf-8') as f:
            print(f.read())
        return paths
