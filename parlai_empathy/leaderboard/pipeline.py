"""``parlai empathy_leaderboard`` from parsed options to the board: the stages in their order.

Every model file is checked before any is opened, then each entry is evaluated
(:mod:`.evaluation`), its evidence written (:mod:`.artifacts`), the rows noted (:mod:`.rows`), the
human judgments attached (:mod:`.human`) and the board written (:mod:`.board`); with
``--projects-dir`` the README tables follow (:mod:`.readme_tables`). ``--from-artifacts`` runs the
last stages alone, on the committed evidence. The command's script only declares its options and
calls :func:`run`.
"""

import os
import shlex
import time
from typing import Callable, List, Optional, Sequence

from parlai_empathy.integration.safe_loading import ModelFileError, check_model_trust
from parlai_empathy.leaderboard import artifacts, board, evaluation, readme_tables, rows
from parlai_empathy.leaderboard.human import HumanEvalError, attach_acute
from parlai_empathy.leaderboard.records import EntryResult

COMMAND = 'empathy_leaderboard'


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


def entry_command_args(argv: Sequence[str], name: str) -> List[str]:
    """This run's own arguments (``argv``, the command's words after its name), narrowed to one
    entry: its evidence names the command that made it."""
    args, skip = [], False
    for arg in argv:
        if skip and not arg.startswith('-'):
            if arg.split('=', 1)[0] == name:
                args.append(arg)
            continue
        skip = arg == '--entries'
        args.append(arg)
    return args


def _human_eval(human_eval: Sequence[str]) -> Callable[[List[EntryResult], dict], List[EntryResult]]:
    def attach(results, notes):
        try:
            return attach_acute(results, human_eval, notes)
        except HumanEvalError as err:
            raise SystemExit(f'parlai {COMMAND}: --human-eval {err}') from None

    return attach


def run(opt, argv: Sequence[str] = ()) -> List[EntryResult]:
    """The board of ``opt`` (the command's options); ``argv``: the command's own words, recorded in
    each entry's evidence."""
    from tqdm import tqdm

    from parlai_empathy.data import ed_source, response_pool
    from parlai_empathy.metrics.bertscore import bertscore_from_opt

    human_eval = _human_eval(opt['human_eval'])
    if opt['from_artifacts']:
        return from_artifacts(opt['from_artifacts'], opt['outdir'], human_eval, opt['intervals'])
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
            entry,
            opt['eval_task'],
            opt['outdir'],
            common,
            pool,
            opt['progress'],
            opt['p100_shuffled'],
            workers=opt['eval_workers'],
            trust=trust,
        )
        result = evaluation.add_offline_figures(evaluation.add_bertscore(result, scorer))
        if opt['intervals']:
            result = artifacts.with_intervals(result)
        if opt['artifacts'] and result.source == 'model':
            command = f'parlai {COMMAND} ' + shlex.join(entry_command_args(argv, entry.name))
            paths = artifacts.write_entry_artifacts(result, os.path.join(opt['artifacts'], entry.name), command)
            print(f'{entry.name}: evidence in {os.path.dirname(paths["report.json"])}')
        results.append(result)
    notes = rows.board_notes(results)
    notes['total time'] = f'{time.time() - started:.0f} s'
    results = human_eval(results, notes)
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


def from_artifacts(
    projects_dir: str,
    outdir: str,
    human_eval: Optional[Callable[[List[EntryResult], dict], List[EntryResult]]] = None,
    intervals: bool = False,
) -> List[EntryResult]:
    """The board of every project row's committed evidence, evaluating nothing, and the README
    tables rewritten from it (what ``make tables`` runs)."""
    if intervals:
        for folder in rows.artifact_folders(projects_dir):
            if artifacts.refresh_intervals(folder):
                print(f'intervals recomputed into {folder}/report.json')
    results = rows.gather_artifacts(projects_dir)
    notes = rows.board_notes(results)
    if human_eval is not None:
        results = human_eval(results, notes)
    if intervals:
        print(board.interval_listing(results))
    paths = board.write_outputs(results, outdir, notes)
    for readme in readme_tables.fill_project_tables(projects_dir):
        print(f'filled {readme}')
    for name, path in paths.items():
        print(f'{name}: {path}')
    return results
