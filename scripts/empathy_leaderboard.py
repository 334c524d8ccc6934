#!/usr/bin/env python3
"""``parlai empathy_leaderboard``: evaluate models on ED test and tabulate the metric suite.

    parlai empathy_leaderboard --entries gen=/runs/generator/model rank=/runs/ranker/model \\
        --outdir leaderboard/ --bertscore-model minilm --projects-dir projects

Entries are ``name=PATH``: a model file (evaluated here), a saved ``eval_model`` report (.json)
or saved world logs (.jsonl). Writes results.json, leaderboard.md/.csv/.png to --outdir.

``--artifacts DIR`` also leaves each evaluated model's evidence in ``DIR/<name>/`` (report,
compressed outputs, portable .opt, meta: ``parlai_empathy/evidence/artifacts.py``); this is how a project
table row gets its figures:

    parlai empathy_leaderboard --entries mime=runs/mime/model --artifacts projects/majumder2020_mime/runs

``--from-artifacts PROJECTS`` evaluates nothing: it gathers every project row's artifacts into the
board in --outdir and rewrites the README tables (what ``make tables`` runs):

    parlai empathy_leaderboard --from-artifacts projects --outdir projects/leaderboard
"""
import os
import shlex
import time

from parlai.core.params import ParlaiParser
from parlai.core.script import register_script

from parlai_empathy.integration.commands import EmpathyScript
from parlai_empathy.integration.safe_loading import ModelFileError, add_trust_flag, check_model_trust


def setup_args():
    from parlai.scripts.empathy_score import setup_args as score_args

    parser = ParlaiParser(True, False, 'Evaluate models on ED test with the parlai-empathy metric suite')
    group = parser.add_argument_group('empathy_leaderboard')
    group.add_argument('--entries', nargs='+', default=[],
                       help='name=PATH (model file, report .json, world logs .jsonl)')
    group.add_argument('--artifacts', default=None,
                       help="write each evaluated model's evidence into ARTIFACTS/<name>/ (a project's runs/)")
    group.add_argument('--from-artifacts', default=None,
                       help='evaluate nothing: gather the artifacts of every row of PROJECTS/*/table.json into '
                       'the board and rewrite the README tables')
    group.add_argument('--eval-task', default='empathy_ed_clean', choices=['empathy_ed_clean', 'empathy_ed'],
                       help='the ED teacher whose test split every model is evaluated on')
    group.add_argument('--ed-datapath', default=None, help='as for the ED teachers')
    group.add_argument('--outdir', default='leaderboard',
                       help='where leaderboard.md/.csv/.png and results.json are written')
    group.add_argument('--pool', default=None, help='retrieval pool for rankers; default: built from ED train')
    group.add_argument('--pool-max-tokens', type=int, default=20, help="Rashkin's filter; <= 0 keeps all")
    group.add_argument('--eval-args', default='-bs 32', help='extra eval_model arguments for every model')
    group.add_argument('--entry-args', nargs='*', default=[],
                       help='NAME=ARGS: extra eval_model arguments for one entry')
    group.add_argument('--projects-dir', default=None,
                       help='after writing --artifacts, rewrite the projects/<paper>/README.md tables')
    group.add_argument('--p100-shuffled', type='bool', default=True,
                       help='rankers: also P@1,100 on blocks of shuffled test examples (the ED paper\'s '
                       '"randomly selected" wording; plain P@1,100 uses consecutive blocks)')
    group.add_argument('--intervals', type='bool', default=False,
                       help="print every figure's bootstrap 95 %% interval over the test examples; with "
                            "--from-artifacts, first recompute each row's intervals from its committed "
                            'outputs.jsonl.gz into its report.json')
    group.add_argument('--progress', type='bool', default=True, help='show a progress bar per evaluation')
    group.add_argument('--human-eval', nargs='+', default=[],
                       help="results.json files of parlai empathy_acute_analyze (ACUTE-Eval runs): each row "
                            "of the same name gets its win rate against the run's reference system, with "
                            'its interval and number of judgments')
    group.add_argument('--eval-workers', type=int, default=1,
                       help='shard each evaluation over this many processes, as parlai multiprocessing_eval '
                            '(the same figures; beam search is bound by one CPU thread per process)')
    add_trust_flag(group)  # a model file of another agent (a stock ParlAI baseline) is opened only with it
    # BERTScore options shared with `parlai empathy_score`; it has its own required --outputs
    score_parser = score_args()
    for action in score_parser._actions:
        if action.dest.startswith('bertscore'):
            group.add_argument(*action.option_strings, default=action.default, type=action.type, help=action.help)
    return parser


def eval_common_args(opt) -> list:
    """The eval_model arguments every entry's evaluation gets: a ``--datapath`` the user gave (its
    evaluations keep their data and caches there, not in ParlAI's default folder) unless
    ``--eval-args`` names one, then ``--eval-args``, then ``--ed-datapath``."""
    given = shlex.split(opt['eval_args'])
    common = []
    if 'datapath' in (opt.get('override') or {}) and not {'--datapath', '-dp', '--dp'} & set(given):
        common += ['--datapath', opt['datapath']]
    common += given
    if opt.get('ed_datapath'):
        common += ['--ed-datapath', opt['ed_datapath']]
    return common


@register_script('empathy_leaderboard')
class EmpathyLeaderboard(EmpathyScript):
    @classmethod
    def setup_args(cls):
        return setup_args()

    def run(self):
        from parlai.scripts.empathy_score import bertscore_from_opt
        from tqdm import tqdm

        from parlai_empathy.data import ed_source, response_pool
        from parlai_empathy.leaderboard import artifacts, board, evaluation, readme_tables, rows

        opt = self.opt
        if opt['from_artifacts']:
            return self._from_artifacts(opt['from_artifacts'], opt['outdir'], self._human_eval, opt['intervals'])
        if not opt['entries']:
            raise ValueError('give --entries NAME=PATH ... (or --from-artifacts PROJECTS)')
        started = time.time()
        entries = evaluation.attach_entry_args(evaluation.parse_entries(opt['entries']), opt['entry_args'])
        trust = bool(opt['trust_model_file'])
        for entry in entries:  # every model file, before any is opened: the message alone
            if entry.source == 'model':
                try:
                    check_model_trust(entry.path, trust)
                except ModelFileError as err:
                    raise SystemExit(f'leaderboard entry {entry.name!r}: {err}') from None
        common = eval_common_args(opt)
        pool = opt['pool']
        needs_pool = any(e.source == 'model' and evaluation.model_kind(e.path, trust) == 'ranker' for e in entries)
        if needs_pool and not pool:
            folder = ed_source.resolve_ed_dir(opt.get('ed_datapath'), opt['datapath'])
            pool = response_pool.ensure_pool(folder, opt['pool_max_tokens'], opt['outdir'])
        scorer = bertscore_from_opt(opt)
        results = []
        for entry in tqdm(entries, desc='models', unit='model', disable=not opt['progress']):
            result = evaluation.evaluate_entry(
                entry, opt['eval_task'], opt['outdir'], common, pool, opt['progress'], opt['p100_shuffled'],
                workers=opt['eval_workers'], trust=trust)
            result = evaluation.add_offline_figures(evaluation.add_bertscore(result, scorer))
            if opt['intervals']:
                result = artifacts.with_intervals(result)
            if opt['artifacts'] and result.source == 'model':
                command = 'parlai empathy_leaderboard ' + shlex.join(self._command_args(entry.name))
                paths = artifacts.write_entry_artifacts(result, os.path.join(opt['artifacts'], entry.name), command)
                print(f'{entry.name}: evidence in {os.path.dirname(paths["report.json"])}')
            results.append(result)
        notes = rows.board_notes(results)
        notes['total time'] = f'{time.time() - started:.0f} s'
        results = self._human_eval(results, notes)
        paths = board.write_outputs(results, opt['outdir'], notes)
        with open(paths['leaderboard.md']) as f:
            print(f.read())
        if opt['intervals']:
            print(board.interval_listing(results))
        for name, path in paths.items():
            print(f'{name}: {path}')
        if opt['projects_dir']:
            for readme in readme_tables.fill_project_tables(opt['projects_dir']):
                print(f'filled {readme}')
        return results

    @staticmethod
    def _command_args(name):
        """This run's own arguments, narrowed to one entry (its evidence names the command that made it)."""
        import sys

        args, skip = [], False
        for arg in sys.argv[2:] if len(sys.argv) > 1 and sys.argv[1] == 'empathy_leaderboard' else sys.argv[1:]:
            if skip and not arg.startswith('-'):
                if arg.split('=', 1)[0] == name:
                    args.append(arg)
                continue
            skip = arg == '--entries'
            args.append(arg)
        return args

    def _human_eval(self, results, notes):
        from parlai_empathy.leaderboard.human import HumanEvalError, attach_acute

        try:
            return attach_acute(results, self.opt['human_eval'], notes)
        except HumanEvalError as err:
            raise SystemExit(f'parlai empathy_leaderboard: --human-eval {err}') from None

    @staticmethod
    def _from_artifacts(projects_dir, outdir, human_eval=lambda results, notes: results, intervals=False):
        from parlai_empathy.leaderboard import artifacts, board, readme_tables, rows

        if intervals:
            for folder in rows.artifact_folders(projects_dir):
                if artifacts.refresh_intervals(folder):
                    print(f'intervals recomputed into {folder}/report.json')
        results = rows.gather_artifacts(projects_dir)
        notes = rows.board_notes(results)
        results = human_eval(results, notes)
        if intervals:
            print(board.interval_listing(results))
        paths = board.write_outputs(results, outdir, notes)
        for readme in readme_tables.fill_project_tables(projects_dir):
            print(f'filled {readme}')
        for name, path in paths.items():
            print(f'{name}: {path}')
        return results


if __name__ == '__main__':
    EmpathyLeaderboard.main()
