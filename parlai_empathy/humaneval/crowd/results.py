"""The answers of a Mephisto run read back into the report our own server's analysis writes.

Mephisto's ``DataBrowser`` reads the completed units of a task from the run's database. For
ACUTE-Eval, a worker who chose the wrong side of any onboarding pair is left out with all their
judgments (the rule of ParlAI's ``AcuteAnalyzer._remove_failed_onboarding``), and onboarding pairs
never count as judgments. ParlAI's own ``acute_eval/analysis.py`` cannot run here as shipped (it
imports IPython, pytest-regressions through ``util.py``, and ``scipy.stats.binom_test``, which
SciPy removed), so the figures are computed here, in the same layout: per matchup, each side's
wins, the win rate with its exact (Clopper-Pearson) 95% interval and the two-sided binomial test
against 50%, plus per-pairing agreement, onboarding failures and time per HIT.

Turn annotations: per bucket, the share of annotated replies that got it (with its interval),
per-bucket agreement, and the workers Mephisto's onboarding check turned away.
"""

import json
import os
from collections import Counter
from typing import Dict, List, Optional

import numpy as np
import pandas as pd

from parlai_empathy.humaneval import analysis
from parlai_empathy.humaneval.crowd import launch as crowd_launch


def _binomial(wins: int, n: int) -> Dict[str, float]:
    from scipy.stats import binomtest

    if n == 0:
        return {'win_rate': float('nan'), 'ci_low': float('nan'), 'ci_high': float('nan'), 'p_value': float('nan')}
    test = binomtest(wins, n, 0.5)
    ci = test.proportion_ci(confidence_level=0.95, method='exact')
    return {'win_rate': wins / n, 'ci_low': float(ci.low), 'ci_high': float(ci.high), 'p_value': float(test.pvalue)}


def _units(database: str, task_name: str):
    """Every completed unit of the task: worker name, times and parsed data."""
    from mephisto.abstractions.databases.local_database import LocalMephistoDB
    from mephisto.data_model.worker import Worker
    from mephisto.tools.data_browser import DataBrowser

    from parlai_empathy.humaneval.crowd import blueprints  # noqa: F401  (registers the blueprints)

    if not os.path.isfile(database):
        raise FileNotFoundError(f'{database}: no Mephisto database (is this a run folder?)')
    db = LocalMephistoDB(database_path=database)
    if not db.find_tasks(task_name=task_name):
        names = [t.task_name for t in db.find_tasks()]
        raise ValueError(f'{database}: no task named {task_name!r} (it holds: {", ".join(names) or "none"})')
    browser = DataBrowser(db=db)
    units = []
    for unit in browser.get_units_for_task_name(task_name):
        data = browser.get_data_from_unit(unit)
        data['worker_name'] = Worker.get(db, data['worker_id']).worker_name
        units.append(data)
    return units, db


def acute_frame(units: List[dict]) -> pd.DataFrame:
    """One row per judgment (onboarding included, flagged)."""
    rows = []
    for unit in units:
        for idx, entry in enumerate(unit['data'] or []):
            choice = entry.get('speakerChoice')
            pairing = entry.get('pairing_dict', {})
            if not choice:
                continue
            models = sorted(pairing.get('speakers_to_eval', []))
            rows.append(
                {
                    'worker': unit['worker_name'],
                    'unit_id': unit['unit_id'],
                    'pairing_id': entry.get('pair_id'),
                    'is_onboarding': bool(pairing.get('is_onboarding')),
                    'correct': (choice == pairing.get('correct_answer')) if pairing.get('is_onboarding') else None,
                    'matchup': tuple(models),
                    'winner': choice,
                    'reason': entry.get('textReason', ''),
                    'question': entry['task_specs'].get('question'),
                    'seconds': (unit['task_end'] or 0) - (unit['task_start'] or 0),
                    'index': idx,
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            'worker',
            'unit_id',
            'pairing_id',
            'is_onboarding',
            'correct',
            'matchup',
            'winner',
            'reason',
            'question',
            'seconds',
            'index',
        ],
    )


def acute_table(df: pd.DataFrame, models: List[str]) -> pd.DataFrame:
    """Per matchup: the first model's (task order) wins, losses, win rate, interval, p."""
    order = {m: i for i, m in enumerate(models)}
    out = []
    for matchup, sub in df.groupby('matchup'):
        first, second = sorted(matchup, key=lambda m: order.get(m, len(order)))
        wins, losses = int((sub['winner'] == first).sum()), int((sub['winner'] == second).sum())
        stats = _binomial(wins, wins + losses)
        out.append(
            {
                'Comparison': f'{first} vs {second}',
                'aspect': sub['question'].iloc[0],
                'Win %': 100 * stats['win_rate'],
                'Lose %': 100 * (1 - stats['win_rate']),
                'Tie %': 0.0,
                'wins': wins,
                'losses': losses,
                'judgments': wins + losses,
                'CI low %': 100 * stats['ci_low'],
                'CI high %': 100 * stats['ci_high'],
                'p (binomial)': stats['p_value'],
                'pairings': sub['pairing_id'].nunique(),
            }
        )
    return pd.DataFrame(
        out,
        columns=[
            'Comparison',
            'aspect',
            'Win %',
            'Lose %',
            'Tie %',
            'wins',
            'losses',
            'judgments',
            'CI low %',
            'CI high %',
            'p (binomial)',
            'pairings',
        ],
    )


def win_rates_against(df: pd.DataFrame, reference: str) -> Dict[str, dict]:
    """Each model's win rate against ``reference`` over the judgments that paired them (the
    leaderboard's ACUTE column)."""
    out = {}
    for matchup, sub in df.groupby('matchup'):
        if reference not in matchup:
            continue
        other = matchup[0] if matchup[1] == reference else matchup[1]
        wins, n = int((sub['winner'] == other).sum()), len(sub)
        out[other] = dict(_binomial(wins, n), wins=wins, judgments=n, reference=reference)
    return out


def _read_launch(run_dir: str) -> dict:
    path = os.path.join(run_dir, 'launch.json')
    try:
        with open(path, encoding='utf-8') as f:
            return json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f'{path}: missing; is {run_dir} a folder of parlai empathy_acute_run?') from None
    except ValueError as err:
        raise ValueError(f'{path}: not valid JSON ({err})') from None


def _models(launched: dict) -> List[str]:
    with open(os.path.join(launched['inputs'], 'manifest.json'), encoding='utf-8') as f:
        return json.load(f)['models']


def analyze(run_dir: str, outdir: str, reference: Optional[str] = None, keep_failed: bool = False) -> Dict[str, str]:
    """Write the report of a run folder of ``parlai empathy_acute_run``; returns {name: path}."""
    from parlai_empathy.integration import compat

    launched = _read_launch(run_dir)
    compat.prepare_crowd(os.path.join(run_dir, 'mephisto'))
    run = crowd_launch.CrowdRun(**{k: v for k, v in launched.items() if k != 'units'})
    units, _db = _units(run.database, run.task_name)
    os.makedirs(outdir, exist_ok=True)
    paths = {
        k: os.path.join(outdir, v)
        for k, v in {
            'markdown': 'results.md',
            'csv': 'results.csv',
            'agreement': 'agreement.csv',
            'plot': 'results.png',
            'failed': 'failed_workers.csv',
            'judgments': 'judgments.csv',
            'json': 'results.json',
        }.items()
    }
    seconds = [u['task_end'] - u['task_start'] for u in units if u['task_end'] and u['task_start']]
    timing = (
        f'{len(units)} HITs completed; time per HIT: median {np.median(seconds):.0f} s, mean {np.mean(seconds):.0f} s'
        if seconds
        else f'{len(units)} HITs completed'
    )
    if run.kind == 'acute':
        report = _acute_report(units, _models(launched), reference, keep_failed, paths)
    else:
        report = _turns_report(units, run, paths)
    md = [f'# Human evaluation ({report["title"]}, Mephisto task {run.task_name})', '', timing, '', *report['lines']]
    with open(paths['markdown'], 'w', encoding='utf-8') as f:
        f.write('\n'.join(md) + '\n')
    with open(paths['json'], 'w', encoding='utf-8') as f:
        json.dump(
            dict(
                report['json'],
                task_name=run.task_name,
                hits=len(units),
                seconds_per_hit_median=float(np.median(seconds)) if seconds else None,
            ),
            f,
            indent=1,
            sort_keys=True,
        )
    return paths


def _acute_report(units, models, reference, keep_failed, paths) -> dict:
    df = acute_frame(units)
    failed = sorted(set(df.loc[df['is_onboarding'] & (df['correct'] == False), 'worker']))  # noqa: E712
    pd.DataFrame({'worker': failed, 'reason': 'chose the wrong side of an onboarding pair'}).to_csv(
        paths['failed'], index=False
    )
    counted = df[~df['is_onboarding'] & (keep_failed | ~df['worker'].isin(failed))]
    counted.drop(columns=['index']).to_csv(paths['judgments'], index=False)
    table = acute_table(counted, models)
    table.to_csv(paths['csv'], index=False)
    analysis._plot_ab(table, paths['plot'])
    votes = counted.assign(
        aspect=counted['question'],
        answer_id=range(len(counted)),
        worker_id=counted['worker'],
        unit_id=counted['pairing_id'],
    )
    kappa = analysis.agreement(votes, 'winner', **analysis.AB_KAPPA) if len(votes) else pd.DataFrame()
    kappa.to_csv(paths['agreement'], index=False)
    shown = table.drop(columns=['aspect', 'Tie %'])
    reference = reference or (models[0] if models else None)
    against = win_rates_against(counted, reference) if reference else {}
    lines = [
        analysis._md(shown),
        '',
        'Win %: how often the first model of the comparison was chosen; CI: exact 95% '
        'interval; p: two-sided binomial test against 50%. Onboarding pairs are not counted.',
        '',
        '## Agreement (the same pairing judged by several workers)',
        '',
        analysis._md(kappa, '.3f') if len(kappa) else '(no pairing judged twice)',
        '',
        f'Workers who failed onboarding: {len(failed)}'
        + (' (included)' if keep_failed else ' (excluded with all their judgments)'),
        *(f'- {w}' for w in failed),
        '',
    ]
    return {
        'title': 'ACUTE-Eval',
        'lines': lines,
        'json': {
            'kind': 'acute',
            'models': models,
            'question': counted['question'].iloc[0] if len(counted) else None,
            'matchups': table.to_dict(orient='records'),
            'failed_onboarding': failed,
            'reference': reference,
            'win_rate_against_reference': against,
            'judgments': int(len(counted)),
            'judgments_per_worker': dict(Counter(counted['worker'])),
        },
    }


def _turns_report(units, run, paths) -> dict:
    from mephisto.abstractions.databases.local_database import LocalMephistoDB

    from parlai_empathy.humaneval.questions import TURN_BUCKETS

    rows = []
    for unit in units:
        outputs = (unit['data'] or {}).get('outputs') or {}
        for sub in outputs.get('final_data') or []:
            for turn in sub.get('data') or []:
                if not turn.get('do_annotate'):
                    continue
                meta = turn.get('other_metadata') or {}
                rows.append(
                    {
                        'worker': unit['worker_name'],
                        'unit_id': unit['unit_id'],
                        'item_id': meta.get('item_id'),
                        'model': meta.get('model'),
                        **{k: bool(turn.get(k)) for k in TURN_BUCKETS},
                    }
                )
    df = pd.DataFrame(rows, columns=['worker', 'unit_id', 'item_id', 'model', *TURN_BUCKETS])
    df.to_csv(paths['judgments'], index=False)
    table = []
    for key, (name, _) in TURN_BUCKETS.items():
        k, n = int(df[key].sum()), len(df)
        stats = _binomial(k, n)
        table.append(
            {
                'bucket': name,
                'marked %': 100 * stats['win_rate'],
                'marked': k,
                'replies': n,
                'CI low %': 100 * stats['ci_low'],
                'CI high %': 100 * stats['ci_high'],
            }
        )
    table = pd.DataFrame(table)
    table.to_csv(paths['csv'], index=False)
    long = df.melt(id_vars=['worker', 'item_id'], value_vars=list(TURN_BUCKETS), var_name='aspect', value_name='marked')
    long = long.assign(answer_id=range(len(long)), worker_id=long['worker'], unit_id=long['item_id'])
    kappa = analysis.agreement(long, 'marked', **analysis.AB_KAPPA) if len(long) else pd.DataFrame()
    kappa.to_csv(paths['agreement'], index=False)
    db = LocalMephistoDB(database_path=run.database)
    failed_qual = f'{run.task_name}_onboarding-failed'
    failed = []
    for qual in db.find_qualifications(qualification_name=failed_qual):
        from mephisto.data_model.worker import Worker

        failed += sorted(
            Worker.get(db, g.worker_id).worker_name
            for g in db.check_granted_qualifications(qualification_id=qual.db_id)
        )
    pd.DataFrame({'worker': failed, 'reason': 'failed the practice conversations'}).to_csv(paths['failed'], index=False)
    _plot_buckets(table, paths['plot'])
    model = df['model'].iloc[0] if len(df) else run.task_name
    lines = [
        f'Replies of {model}: {len(df)} annotations of {df["item_id"].nunique()} replies',
        '',
        analysis._md(table),
        '',
        '## Agreement (per bucket)',
        '',
        analysis._md(kappa, '.3f') if len(kappa) else '(no reply annotated twice)',
        '',
        f'Workers turned away by the practice conversations: {len(failed)}',
        *(f'- {w}' for w in failed),
        '',
    ]
    return {
        'title': 'turn annotations',
        'lines': lines,
        'json': {
            'kind': 'turns',
            'model': model,
            'buckets': table.to_dict(orient='records'),
            'failed_onboarding': failed,
            'annotations': int(len(df)),
        },
    }


def _plot_buckets(table: pd.DataFrame, path: str) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 0.8 + 0.5 * len(table)))
    err = [table['marked %'] - table['CI low %'], table['CI high %'] - table['marked %']]
    ax.barh(table['bucket'], table['marked %'].fillna(0), xerr=np.nan_to_num(err), color='#4a8', capsize=3)
    ax.set_xlim(0, 100)
    ax.set_xlabel('% of annotated replies (95% CI)')
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
