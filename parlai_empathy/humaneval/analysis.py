"""Results of a rating task: Rashkin-style mean +- SEM, MIME-style win/lose/tie, and agreement.

Only verified answers count (:func:`verify_answers`; the others are listed with their reason).
Workers who failed an attention check are left out by default (and listed). Outputs: Markdown,
CSV and PNG, plus the A/B votes in the table shape ParlAI's ACUTE-Eval ``AcuteAnalyzer`` builds
from Mephisto (one row per non-tie vote), so its win-rate code can run on them.
"""

import csv
import itertools
import json
import os
import warnings
from collections import Counter
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from parlai_empathy.humaneval import sampling, votes
from parlai_empathy.humaneval.db import TaskDB

ASPECT_TITLES = {'empathy': 'Empathy', 'relevance': 'Relevance', 'fluency': 'Fluency', 'overall': 'Overall'}


# -- agreement ------------------------------------------------------------------------------
def krippendorff_alpha(ratings: Sequence[Tuple[str, str, object]], level: str = 'nominal') -> float:
    """Krippendorff's alpha of ``(rater, unit, label)`` ratings, with NLTK's implementation
    (``nltk.metrics.agreement.AnnotationTask``, checked against Krippendorff's own worked example):
    any number of raters per unit, a unit rated once adds nothing. ``level``: 'nominal' (every
    disagreement counts the same: A/B choices) or 'interval' (squared differences of the labels:
    Likert ratings, as quadratic weights do for Cohen's kappa). NaN when nothing can be compared
    or every rating has one label (no disagreement is expected)."""
    from nltk.metrics.agreement import AnnotationTask
    from nltk.metrics.distance import binary_distance, interval_distance

    distances = {'nominal': binary_distance, 'interval': interval_distance}
    if level not in distances:
        raise ValueError(f'level must be one of {sorted(distances)}, not {level!r}')
    units = Counter(unit for _, unit, _ in ratings)
    pairable = [(str(rater), str(unit), label) for rater, unit, label in ratings if units[unit] >= 2]
    if not pairable or len({label for _, _, label in pairable}) < 2:
        return float('nan')
    return float(AnnotationTask(pairable, distance=distances[level]).alpha())


def cohen_kappa(a: Sequence, b: Sequence, weights: Optional[str] = None, labels: Optional[Sequence] = None) -> float:
    """Cohen's kappa for two raters' labels on the same items (scikit-learn's implementation).

    ``weights='quadratic'`` (or ``'linear'``) for ordinal labels such as Likert ratings, where
    disagreeing by one point counts less than by four; ``None`` for nominal labels (A/B/tie).
    NaN when chance agreement is already perfect (both raters used a single, same label)."""
    from sklearn.metrics import cohen_kappa_score

    if len(a) != len(b) or not len(a):
        raise ValueError('Cohen kappa needs two equally long, non-empty label lists')
    with warnings.catch_warnings():  # the NaN case warns; it is reported as NaN, not hidden
        warnings.simplefilter('ignore', RuntimeWarning)
        return float(cohen_kappa_score(a, b, labels=labels, weights=weights))


# How each task's labels are compared: Likert ratings are ordinal (squared differences), A/B
# winners nominal; ``level`` for Krippendorff's alpha, the rest for Cohen's kappa.
LIKERT_KAPPA = {'weights': 'quadratic', 'labels': sorted(sampling.LIKERT_RATINGS)}
AB_KAPPA = {'weights': None, 'labels': None}
LEVELS = {None: 'nominal', 'linear': 'interval', 'quadratic': 'interval'}  # Cohen's weights -> alpha's level


def agreement(
    df: pd.DataFrame, label: str, min_common: int = 5, weights: Optional[str] = None, labels: Optional[Sequence] = None
) -> pd.DataFrame:
    """Per aspect: Krippendorff's alpha over every unit rated at least twice, whatever the number
    of raters (interval for quadratic ``weights``, else nominal), and the mean Cohen's kappa
    (``weights``: see :func:`cohen_kappa`) over worker pairs sharing >= ``min_common`` units."""
    out = []
    for aspect, sub in df.groupby('aspect'):
        per_unit = sub.groupby('unit_id')[label].count()
        rated = sub[sub['unit_id'].isin(per_unit[per_unit >= 2].index)]
        alpha = krippendorff_alpha(list(zip(rated['worker_id'], rated['unit_id'], rated[label])), LEVELS[weights])
        wide = sub.pivot_table(index='unit_id', columns='worker_id', values=label, aggfunc='first')
        pair_kappas = []
        for w1, w2 in itertools.combinations(wide.columns, 2):
            both = wide[[w1, w2]].dropna()
            if len(both) >= min_common:
                pair_kappas.append(cohen_kappa(list(both[w1]), list(both[w2]), weights, labels))
        out.append(
            {
                'aspect': aspect,
                'units': int((per_unit >= 2).sum()),
                'ratings': len(rated),
                'krippendorff_alpha': alpha,
                'alpha_level': LEVELS[weights],
                'worker_pairs': len(pair_kappas),
                'mean_cohen_kappa': _finite_mean(pair_kappas),
                'cohen_weights': weights or 'none',
            }
        )
    return pd.DataFrame(out)


def _finite_mean(values) -> float:
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float('nan')


# -- frames from the DB ----------------------------------------------------------------------
def _usable(rows: List[dict], keep_failed: bool) -> List[dict]:
    failed = {r['worker_id'] for r in rows if r['check_passed'] == 0}
    return [r for r in rows if not r['is_check'] and (keep_failed or r['worker_id'] not in failed)]


def likert_frame(rows: List[dict], keep_failed: bool = False) -> pd.DataFrame:
    records = [
        {
            'answer_id': r['answer_id'],
            'worker_id': r['worker_id'],
            'unit_id': r['unit_id'],
            'item_id': r['item_id'],
            'model': r['models'][0],
            'aspect': aspect,
            'score': score,
        }
        for r in _usable(rows, keep_failed)
        for aspect, score in r['answer']['ratings'].items()
    ]
    return pd.DataFrame(records, columns=['answer_id', 'worker_id', 'unit_id', 'item_id', 'model', 'aspect', 'score'])


def likert_table(df: pd.DataFrame, aspects: Sequence[str], models: Sequence[str]) -> pd.DataFrame:
    """Rashkin et al. Table 2 layout: one row per model, one 'mean +- SEM' column per aspect,
    plus ``<aspect>_n``, the ratings behind each figure (aspects can differ, e.g. when a task's
    aspects changed), and ``ratings``, the smallest of them."""
    stats = df.groupby(['model', 'aspect'])['score'].agg(['mean', 'sem', 'count'])
    rows = []
    for model in models:
        row = {'Model': model}
        for aspect in aspects:
            if (model, aspect) in stats.index:
                s = stats.loc[(model, aspect)]
                row[ASPECT_TITLES.get(aspect, aspect)] = f'{s["mean"]:.2f} ± {s["sem"]:.2f}'
                row[f'{aspect}_mean'], row[f'{aspect}_sem'] = s['mean'], s['sem']
            row[f'{aspect}_n'] = int(stats.loc[(model, aspect), 'count']) if (model, aspect) in stats.index else 0
        row['ratings'] = min(row[f'{a}_n'] for a in aspects) if aspects else 0
        rows.append(row)
    return pd.DataFrame(rows)


def ab_frame(rows: List[dict], keep_failed: bool = False) -> pd.DataFrame:
    records = [
        {
            'answer_id': r['answer_id'],
            'worker_id': r['worker_id'],
            'unit_id': r['unit_id'],
            'item_id': r['item_id'],
            'pair': tuple(sorted(r['models'])),
            'aspect': aspect,
            'winner': winner,
            'pairing_index': r['extra'].get('pairing_index'),
            'submitted': r['submitted'],
            'seconds': r['seconds'],
        }
        for r in _usable(rows, keep_failed)
        for aspect, winner in r['answer']['winners'].items()
    ]
    return pd.DataFrame(
        records,
        columns=[
            'answer_id',
            'worker_id',
            'unit_id',
            'item_id',
            'pair',
            'aspect',
            'winner',
            'pairing_index',
            'submitted',
            'seconds',
        ],
    )


def ab_table(
    df: pd.DataFrame, models: Sequence[str], pairs: Sequence[Sequence[str]] = (), aspects: Sequence[str] = ()
) -> pd.DataFrame:
    """MIME layout: per pair and aspect, win/lose/tie % of the first model (task order), decided
    per item by majority vote with the 4th-annotator rule; undecided items are counted apart.
    Every pair of ``pairs`` (the task's) gets a row for every aspect, votes or not (0 items)."""
    order = {m: i for i, m in enumerate(models)}
    groups = {key: sub for key, sub in df.groupby(['pair', 'aspect'])}
    for pair in pairs:
        for aspect in aspects:
            groups.setdefault((tuple(sorted(pair)), aspect), df.iloc[:0])
    out = []
    for (pair, aspect), sub in groups.items():
        first, second = sorted(pair, key=lambda m: order.get(m, len(order)))
        decided = (
            sub.sort_values('answer_id').groupby('unit_id')['winner'].apply(lambda v: votes.majority_vote(list(v)))
        )
        done = decided.dropna()
        n = len(done)

        def pct(x, n=n):
            return 100.0 * x / n if n else float('nan')

        out.append(
            {
                'Comparison': f'{first} vs {second}',
                'aspect': aspect,
                'Win %': pct((done == first).sum()),
                'Lose %': pct((done == second).sum()),
                'Tie %': pct((done == votes.TIE).sum()),
                'items': n,
                'undecided': int(decided.isna().sum()),
                'votes': len(sub),
            }
        )
    return pd.DataFrame(
        out, columns=['Comparison', 'aspect', 'Win %', 'Lose %', 'Tie %', 'items', 'undecided', 'votes']
    )


def acute_rows(df: pd.DataFrame, run_id: str, question: str) -> pd.DataFrame:
    """The A/B votes as ACUTE-Eval analysis rows (``AcuteAnalyzer.dataframe`` columns).

    ACUTE has no ties, so tie votes are dropped; ``pairing_id`` is the line of the pairings file
    (written by the build step, or the input pairings file)."""
    rows = []
    for r in df[df['winner'] != votes.TIE].itertuples():
        m0, m1 = sorted(r.pair)
        rows.append(
            {
                'run_id': run_id,
                'worker': str(r.worker_id),
                'worker_name': str(r.worker_id),
                'time_taken': r.seconds,
                'question': question,
                'unit_id': str(r.unit_id),
                'task_start': r.submitted,
                'correct': -1,
                'winner': r.winner,
                'loser': m1 if r.winner == m0 else m0,
                'eval_choice_0': m0,
                'eval_choice_1': m1,
                'reason': '',
                'is_onboarding': False,
                'matchup': f'{m0}__vs__{m1}',
                'pairing_id': r.pairing_index,
            }
        )
    return pd.DataFrame(rows)


# -- which answers count ---------------------------------------------------------------------
MTURK_COUNTED = {'Submitted', 'Approved'}  # a Rejected assignment was refused by the requester
PROLIFIC_DROPPED = {'RETURNED', 'REJECTED', 'TIMED-OUT'}
UNVERIFIED_COLUMNS = ['provider', 'worker_id', 'external_id', 'binding', 'answers', 'reason']


def _read_mturk_export(path: str) -> Dict[str, dict]:
    """AssignmentId -> record, from MTurk's batch results CSV or JSON lines of Assignment
    records (GetAssignment / ListAssignmentsForHIT)."""
    records = {}
    with open(path, encoding='utf-8-sig', newline='') as f:
        text = f.read()
    if text.lstrip().startswith('{'):
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as err:
                raise ValueError(f'{path}:{n}: not a JSON object ({err})') from None
            rec = rec.get('Assignment', rec) if isinstance(rec, dict) else None
            if not isinstance(rec, dict) or 'AssignmentId' not in rec:
                raise ValueError(f'{path}:{n}: no AssignmentId in this record')
            records[rec['AssignmentId']] = rec
        return records
    reader = csv.DictReader(text.splitlines())
    need = {'AssignmentId', 'WorkerId', 'AssignmentStatus'}
    if not need <= set(reader.fieldnames or ()):
        raise ValueError(
            f'{path}:1: the header lacks {sorted(need - set(reader.fieldnames or ()))} '
            '(expected MTurk batch results columns)'
        )
    for row in reader:
        records[row['AssignmentId']] = row
    return records


def mturk_verifier(client=None, export_path: Optional[str] = None) -> Optional[Callable[[str], dict]]:
    """A lookup AssignmentId -> MTurk's Assignment record (raising LookupError with the reason
    when MTurk does not confirm it), from an MTurk client (``get_assignment``) or an export file;
    None when neither is given."""
    if client is not None and export_path:
        raise ValueError('give an MTurk client or an export file, not both')
    if export_path:
        records = _read_mturk_export(export_path)

        def from_file(assignment_id):
            if assignment_id not in records:
                raise LookupError(f'not in {os.path.basename(export_path)}')
            return records[assignment_id]

        return from_file
    if client is not None:

        def from_api(assignment_id):
            try:
                return client.get_assignment(AssignmentId=assignment_id)['Assignment']
            except Exception as err:  # MTurk's own answer is the reason
                code = (getattr(err, 'response', None) or {}).get('Error', {}).get('Code')
                raise LookupError(f'MTurk GetAssignment: {code or type(err).__name__}: {str(err)[:160]}') from None

        return from_api
    return None


def _read_prolific_export(path: str) -> Dict[Tuple[str, str], str]:
    with open(path, encoding='utf-8-sig', newline='') as f:
        reader = csv.DictReader(f)
        cols = {c.strip().lower(): c for c in reader.fieldnames or ()}
        if 'participant id' not in cols or 'submission id' not in cols:
            raise ValueError(
                f"{path}:1: the header lacks 'Participant id' and 'Submission id' (Prolific's submissions export)"
            )
        return {
            (r[cols['participant id']], r[cols['submission id']]): (r.get(cols.get('status', ''), '') or '').upper()
            for r in reader
        }


def verify_answers(
    rows: List[dict], bindings: List[dict], mturk: Optional[Callable] = None, prolific_submissions: Optional[str] = None
) -> Tuple[List[dict], List[dict], List[str]]:
    """(counted rows, unverified groups, notes).

    * local workers (private links the researcher handed out): counted;
    * MTurk: counted only when MTurk confirms the assignment (``mturk``, see
      :func:`mturk_verifier`) for the same WorkerId with status Submitted or Approved; without
      a verification source every MTurk answer is left out, and the notes say so;
    * participant platforms (``/start``): a binding is a participant id with its session id.
      With ``prolific_submissions`` only the (participant, session) pairs it lists, and not
      returned, rejected or timed out, count. Without it, an id with a single binding counts;
      an id with several (someone registered under another's id, or a retaken study) has all of
      them held back until the export settles which one is genuine.
    """
    notes = []
    per_id = Counter(b['external_id'] for b in bindings if b['provider'] == 'generic')
    prolific = _read_prolific_export(prolific_submissions) if prolific_submissions else None
    verdicts: Dict[tuple, Optional[str]] = {}

    def verdict(r) -> Tuple[tuple, Optional[str]]:
        if r['provider'] == 'mturk':
            ref = (r['external_ref'] or '').split(':', 1)[-1]
            key = ('mturk', r['worker_id'], ref)
            if key not in verdicts:
                if mturk is None:
                    verdicts[key] = 'not verified: no MTurk verification source'
                else:
                    try:
                        rec = mturk(ref)
                        if rec.get('WorkerId') != r['external_id']:
                            verdicts[key] = f'MTurk gives this assignment to {rec.get("WorkerId")!r}'
                        elif rec.get('AssignmentStatus') not in MTURK_COUNTED:
                            verdicts[key] = f'MTurk status {rec.get("AssignmentStatus")!r}'
                        else:
                            verdicts[key] = None
                    except LookupError as err:
                        verdicts[key] = f'not confirmed by MTurk ({err})'
            return key, verdicts[key]
        if r['provider'] == 'generic':
            key = ('generic', r['worker_id'], f'{r["study_ref"] or ""}/{r["session_ref"] or ""}')
            if not r['session_ref']:
                return key, 'no platform session id bound to this participant id'
            if prolific is not None:
                status = prolific.get((r['external_id'], r['session_ref']))
                if status is None:
                    return key, 'not in the Prolific submissions export'
                if status in PROLIFIC_DROPPED:
                    return key, f'Prolific status {status}'
                return key, None
            if per_id[r['external_id']] > 1:
                return key, (
                    f'participant id has {per_id[r["external_id"]]} bindings (sessions); '
                    'pass the submissions export to settle which is genuine'
                )
            return key, None
        return ('local', r['worker_id'], ''), None

    kept, groups = [], {}
    for r in rows:
        key, reason = verdict(r)
        if reason is None:
            kept.append(r)
            continue
        g = groups.setdefault(
            key,
            {
                'provider': key[0],
                'worker_id': r['worker_id'],
                'external_id': r['external_id'],
                'binding': key[2],
                'answers': 0,
                'reason': reason,
            },
        )
        g['answers'] += 1
    unverified = list(groups.values())
    if mturk is None and any(g['provider'] == 'mturk' for g in unverified):
        n = sum(g['answers'] for g in unverified if g['provider'] == 'mturk')
        notes.append(
            f'{n} MTurk answers left out: nothing to verify them against (pass '
            '--mturk-verify sandbox|live, or --mturk-assignments with an export from MTurk)'
        )
    return kept, unverified, notes


# -- reports ---------------------------------------------------------------------------------
def _plot_likert(table, aspects, path):
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.6 + 1.6 * len(aspects), 3.2))
    width = 0.8 / max(len(table), 1)
    x = np.arange(len(aspects))
    for i, row in enumerate(table.itertuples()):
        means = [getattr(row, f'{a}_mean', np.nan) for a in aspects]
        sems = [getattr(row, f'{a}_sem', np.nan) for a in aspects]
        ax.bar(x + i * width, means, width, yerr=sems, capsize=3, label=row.Model)
    ax.set_xticks(x + width * (len(table) - 1) / 2, [ASPECT_TITLES.get(a, a) for a in aspects])
    ax.set_ylim(1, 5)
    ax.set_ylabel('mean rating (± SEM)')
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_ab(table, path):
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    labels = [f'{r.Comparison} ({r.aspect})' for r in table.itertuples()]
    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.5 * len(labels)))
    left = np.zeros(len(labels))
    for col, color in (('Win %', '#4a8'), ('Tie %', '#bbb'), ('Lose %', '#c55')):
        vals = table[col].fillna(0).to_numpy()
        ax.barh(labels, vals, left=left, color=color, label=col.replace(' %', ''))
        left += vals
    ax.set_xlim(0, 100)
    ax.set_xlabel('% of items')
    ax.legend(ncol=3, fontsize=8, loc='lower right')
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _md(df: pd.DataFrame, floatfmt='.2f') -> str:
    if df.empty:
        return '(no answers yet)'
    cols = list(df.columns)
    lines = ['| ' + ' | '.join(cols) + ' |', '|' + '---|' * len(cols)]
    for row in df.itertuples(index=False):
        cells = [('–' if np.isnan(v) else format(v, floatfmt)) if isinstance(v, float) else str(v) for v in row]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def analyze(
    db_path: str,
    outdir: str,
    keep_failed: bool = False,
    run_id: Optional[str] = None,
    mturk: Optional[Callable[[str], dict]] = None,
    prolific_submissions: Optional[str] = None,
) -> Dict[str, str]:
    """Write the report files for a task; returns {name: path}.

    ``mturk`` and ``prolific_submissions``: what answers are verified against
    (:func:`verify_answers`)."""
    db = TaskDB(db_path)
    cfg, rows = db.config, db.answer_rows()
    bindings, pairs = db.bindings(), db.model_sets()
    failed = pd.DataFrame(db.failed_workers())
    db.close()
    rows, unverified, notes = verify_answers(rows, bindings, mturk, prolific_submissions)
    os.makedirs(outdir, exist_ok=True)
    paths = {
        k: os.path.join(outdir, v)
        for k, v in {
            'markdown': 'results.md',
            'csv': 'results.csv',
            'agreement': 'agreement.csv',
            'plot': 'results.png',
            'failed': 'failed_workers.csv',
            'unverified': 'unverified_answers.csv',
        }.items()
    }
    pd.DataFrame(unverified, columns=UNVERIFIED_COLUMNS).to_csv(paths['unverified'], index=False)
    md = [
        f'# Human evaluation ({cfg["mode"]})',
        '',
        f'Answers left out as unverified: {sum(g["answers"] for g in unverified)} '
        f'(from {len(unverified)} assignments or bindings; each with its reason in '
        f'{os.path.basename(paths["unverified"])})',
        *notes,
        '',
    ]
    if cfg['mode'] == sampling.LIKERT:
        df = likert_frame(rows, keep_failed)
        table = likert_table(df, cfg['aspects'], cfg['models'])
        shown = table[
            ['Model']
            + [ASPECT_TITLES.get(a, a) for a in cfg['aspects'] if ASPECT_TITLES.get(a, a) in table]
            + (['ratings'] if 'ratings' in table else [])
        ]
        _plot_likert(table, cfg['aspects'], paths['plot'])
        kappa = agreement(df, 'score', **LIKERT_KAPPA)
    else:
        df = ab_frame(rows, keep_failed)
        table = shown = ab_table(df, cfg['models'], pairs, cfg['aspects'])
        _plot_ab(table, paths['plot'])
        kappa = agreement(df, 'winner', **AB_KAPPA)
        run = run_id or os.path.splitext(os.path.basename(db_path))[0]
        for aspect in cfg['aspects']:
            key = f'acute_{aspect}'
            paths[key] = os.path.join(outdir, f'{key}.csv')
            acute_rows(df[df['aspect'] == aspect], run, aspect).to_csv(paths[key], index=False)
    table.to_csv(paths['csv'], index=False)
    kappa.to_csv(paths['agreement'], index=False)
    failed.to_csv(paths['failed'], index=False)
    md += [
        _md(shown),
        '',
        '## Agreement',
        '',
        _md(kappa, '.3f'),
        '',
        f'Workers who failed an attention check: {len(failed)}' + (' (included)' if keep_failed else ' (excluded)'),
        '',
    ]
    with open(paths['markdown'], 'w', encoding='utf-8') as f:
        f.write('\n'.join(md))
    return paths
