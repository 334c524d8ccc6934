"""Human judgments on the board: each system's ACUTE-Eval win rate against a reference system.

The figures come from ``parlai empathy_acute_analyze``'s ``results.json`` (its
``win_rate_against_reference``: wins, judgments, exact 95% interval), attached to the board rows of
the same name; the reference system itself and rows people did not judge get no figure.
"""

import json
import math
from typing import Dict, List

from parlai_empathy.leaderboard.records import EntryResult

COLUMNS = ['acute_win_rate', 'acute_win_rate_ci_low', 'acute_win_rate_ci_high', 'acute_judgments']
MAX_BYTES = 16 << 20  # a report of a few thousand judgments is a few hundred kB


class HumanEvalError(ValueError):
    """A results file that is not an ACUTE-Eval report of ours; the message names file and field."""


def _number(path: str, field: str, value, low=0.0, high=1.0) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise HumanEvalError(f'{path}: {field} must be a number in [{low:g}, {high:g}], got {value!r}')
    return float(value)


def read_acute(path: str) -> Dict:
    """``{'reference', 'question', 'task_name', 'systems': {name: {win_rate, ci_low, ci_high,
    judgments}}}`` from one ``results.json`` of ``parlai empathy_acute_analyze``."""
    try:
        with open(path, 'rb') as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as err:
        raise HumanEvalError(f'{path}: {err.strerror or err}') from None
    if len(raw) > MAX_BYTES:
        raise HumanEvalError(f'{path}: larger than {MAX_BYTES} bytes: not a results.json of empathy_acute_analyze')
    try:
        report = json.loads(raw.decode('utf-8'))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise HumanEvalError(f'{path}: not a JSON report ({type(err).__name__})') from None
    if not isinstance(report, dict) or report.get('kind') != 'acute':
        raise HumanEvalError(
            f"{path}: kind must be 'acute' (a results.json of parlai empathy_acute_analyze on an ACUTE-Eval run)"
        )
    against = report.get('win_rate_against_reference')
    if not isinstance(against, dict) or not isinstance(report.get('reference'), str):
        raise HumanEvalError(f'{path}: win_rate_against_reference and reference missing')
    systems = {}
    for name, figures in against.items():
        where = f'win_rate_against_reference.{name}'
        if not isinstance(figures, dict):
            raise HumanEvalError(f'{path}: {where} must be an object')
        n = figures.get('judgments')
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise HumanEvalError(f'{path}: {where}.judgments must be a positive integer, got {n!r}')
        systems[name] = {
            'win_rate': _number(path, f'{where}.win_rate', figures.get('win_rate')),
            'ci_low': _number(path, f'{where}.ci_low', figures.get('ci_low')),
            'ci_high': _number(path, f'{where}.ci_high', figures.get('ci_high')),
            'judgments': n,
        }
    return {
        'reference': report['reference'],
        'question': report.get('question'),
        'task_name': report.get('task_name'),
        'systems': systems,
    }


def board_row(results: List[EntryResult], name: str):
    """The row named ``name``, else the one row whose ``paper/row`` name ends in ``/name`` (a
    project row judged under its folder's name, as ``empathy_acute_build --outputs`` names it)."""
    exact = [r for r in results if r.name == name]
    if exact:
        return exact[0]
    suffixed = [r for r in results if r.name.endswith('/' + name)]
    return suffixed[0] if len(suffixed) == 1 else None


def attach_acute(results: List[EntryResult], paths: List[str], notes: Dict[str, str]) -> List[EntryResult]:
    """Put each report's win rates on the rows of the same name; one note per report."""
    for path in paths:
        report = read_acute(path)
        unplaced = []
        for name, figures in report['systems'].items():
            row = board_row(results, name)
            if row is None:
                unplaced.append(name)
                continue
            row.values.update(
                {
                    'acute_win_rate': figures['win_rate'],
                    'acute_win_rate_ci_low': figures['ci_low'],
                    'acute_win_rate_ci_high': figures['ci_high'],
                    'acute_judgments': figures['judgments'],
                }
            )
            row.extra['acute_reference'] = report['reference']
        notes[f'human evaluation ({report["task_name"] or path})'] = (
            f'ACUTE-Eval win rate against {report["reference"]}, question: {report["question"]!r}, '
            'exact 95% interval (parlai empathy_acute_analyze)'
            + (f'; judged but not on this board (or matching several rows): {", ".join(unplaced)}' if unplaced else '')
        )
    return results


def markdown(results: List[EntryResult]) -> List[str]:
    rows = [r for r in results if 'acute_win_rate' in r.values]
    if not rows:
        return []
    lines = [
        '',
        '### Human evaluation: ACUTE-Eval win rate against a reference system',
        '',
        '| model | against | win % | 95% CI | judgments |',
        '|---|---|---|---|---|',
    ]
    for r in rows:
        v = r.values
        lines.append(
            f'| {r.name} | {r.extra.get("acute_reference", "")} | {100 * v["acute_win_rate"]:.1f} | '
            f'{100 * v["acute_win_rate_ci_low"]:.1f}-{100 * v["acute_win_rate_ci_high"]:.1f} | '
            f'{v["acute_judgments"]} |'
        )
    return lines
