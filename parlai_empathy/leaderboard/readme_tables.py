"""The project README tables: ``projects/<paper>/README.md`` tables between ``leaderboard-table``
markers, described by ``projects/<paper>/table.json`` and filled from each row's artifacts
(figures on the paper's scale, example counts, the evidence's folder); a classifier row's
per-label table between ``per-label-table`` markers; a project's ``learning_curve.png``."""

import json
import os
from typing import Dict, List, Optional

from parlai_empathy.evidence import artifacts as evidence
from parlai_empathy.leaderboard.formatting import count, figure, per_label
from parlai_empathy.leaderboard.records import Meta, Report
from parlai_empathy.leaderboard.rows import has_artifacts, project_tables, row_curve, row_key, row_report

TABLE_START, TABLE_END = '<!-- leaderboard-table:start{} -->', '<!-- leaderboard-table:end{} -->'
PER_LABEL_START, PER_LABEL_END = '<!-- per-label-table:start:{} -->', '<!-- per-label-table:end:{} -->'
NO_REPORT = Report(values={})  # a row with a plan and no run yet: the paper's figures only


def fill_project_tables(projects_dir: str) -> List[str]:
    """Rewrite every table in each ``projects/<paper>/README.md`` from its rows' artifacts.

    A table row names its artifacts folder (``runs/<row>``); figures are shown on the paper's
    scale (``scale`` per metric, e.g. 100 for a percentage). Rows without artifacts show the
    paper's figures only.
    """
    changed = []
    for paper in sorted(os.listdir(projects_dir)):
        project_dir = os.path.join(projects_dir, paper)
        spec_path, readme = os.path.join(project_dir, 'table.json'), os.path.join(project_dir, 'README.md')
        if not os.path.isfile(spec_path) or not os.path.isfile(readme):
            continue
        spec = evidence.read_json(spec_path)
        with open(readme) as f:
            text = f.read()
        new = text
        target = spec.get('learning_curve')
        if target:
            plot_project_curve(project_dir, spec)
        for table in project_tables(spec):
            suffix = f':{table["id"]}' if table.get('id') else ''
            start, end = TABLE_START.format(suffix), TABLE_END.format(suffix)
            if start not in new or end not in new:
                raise ValueError(f'{readme} has no {start} ... {end} markers')
            head, rest = new.split(start, 1)
            _, tail = rest.split(end, 1)
            new = f'{head}{start}\n{render_project_table(project_dir, table, target)}\n{end}{tail}'
            for row in table['rows']:
                new = _fill_per_label(new, project_dir, row)
        if new != text:
            with open(readme, 'w') as f:
                f.write(new)
            changed.append(readme)
    return changed


def render_project_table(project_dir: str, table: Dict, target: Optional[Dict] = None) -> str:
    """The README table; with ``target`` ({"metric", "value", "mode"}) a column gives the training
    minutes to the paper's figure, read off the row's learning curve (its ``meta.json``)."""
    metrics = table['metrics']  # [{"key": "p@1,100", "label": "P@1,100", "scale": 100}]
    # "paper_columns": "with_figures" keeps a paper column only where some row has a paper figure
    papers = [
        m
        for m in metrics
        if table.get('paper_columns') != 'with_figures'
        or any(m['key'] in row.get('paper', {}) for row in table['rows'])
    ]
    header = (
        ['model']
        + [f'{m["label"]} (paper)' for m in papers]
        + [f'{m["label"]} (ours)' for m in metrics]
        + ['test examples', 'evidence']
    )
    if target and table.get('id', '') == '':
        header.insert(-1, f'training minutes to valid {target["metric"]} {figure(target["value"])}')
    lines = ['| ' + ' | '.join(header) + ' |', '|---' * len(header) + '|']
    for row in table['rows']:
        report = row_report(project_dir, row) or NO_REPORT
        paper_cells = [figure(row.get('paper', {}).get(m['key'])) for m in papers]
        our_cells = []
        for m in metrics:
            scale, key = m.get('scale', 1), row_key(row, m['key'])
            cell = figure(report.values[key] * scale) if key in report else ''
            interval = report.interval(key)
            if cell and m.get('ci') and interval is not None:
                cell += f' ({figure(interval[0] * scale)}-{figure(interval[1] * scale)})'
            our_cells.append(cell)
        keys = [row_key(row, m['key']) for m in metrics]
        counts = sorted({report.count(key) for key in keys if report.count(key) is not None})
        evidence_cell = ''
        if report.values:
            evidence_cell = f'[{row["artifacts"]}]({row["artifacts"]}){_gpu_note(project_dir, row)}'
        cells = [row['label']] + paper_cells + our_cells + [' / '.join(count(n) for n in counts)]
        if target and table.get('id', '') == '':
            cells.append(_minutes_to_target(project_dir, row, target) if report.values else '')
        lines.append('| ' + ' | '.join(cells + [evidence_cell]) + ' |')
    return '\n'.join(lines)


def _gpu_note(project_dir: str, row: Dict) -> str:
    """`` (gpu plan, <card>)`` for a row whose evidence came from its gpu plan (``meta.json``): its
    batch and schedule differ from the label's, which describes the cpu plan."""
    path = os.path.join(project_dir, row['artifacts'], evidence.META)
    try:
        with open(path) as f:
            meta = Meta.from_json(json.load(f), path)
    except (OSError, ValueError):
        return ''
    if not meta.profile.startswith('gpu'):
        return ''
    return f' ({meta.profile} plan, {meta.gpu or "GPU"})'


def _fill_per_label(text: str, project_dir: str, row: Dict) -> str:
    """A classifier row's per-label precision/recall/F1 (both threshold schemes when it has two)
    between ``per-label-table`` markers named after the row, if the README has them."""
    start, end = PER_LABEL_START.format(row['entry']), PER_LABEL_END.format(row['entry'])
    if start not in text or end not in text:
        return text
    report = row_report(project_dir, row) or NO_REPORT
    single, tuned = report.per_label or {}, report.per_label_tuned or {}
    lines = []
    if single:
        header = ['label', 'support', 'precision', 'recall', 'F1']
        if tuned:
            header += ['F1, tuned thresholds']
        lines = ['| ' + ' | '.join(header) + ' |', '|---' * len(header) + '|']
        for label, figures in sorted(single.items(), key=lambda kv: -kv[1]['support']):
            cells = [
                label,
                count(figures['support']),
                per_label(figures['precision']),
                per_label(figures['recall']),
                per_label(figures['f1']),
            ]
            if tuned:
                cells.append(per_label(tuned.get(label, {}).get('f1', 0.0)))
            lines.append('| ' + ' | '.join(cells) + ' |')
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f'{head}{start}\n' + '\n'.join(lines) + f'\n{end}{tail}'


def _minutes_to_target(project_dir: str, row: Dict, target: Dict) -> str:
    from parlai_empathy.evidence.learning_curve import time_to_target

    points = row_curve(project_dir, row)
    if not points:
        return ''
    mode = target.get('mode', 'min')
    reached = time_to_target(points, target['metric'], target['value'], mode)
    if reached is None:
        best = [p[target['metric']] for p in points if target['metric'] in p]
        if not best:
            return ''
        return f'not reached in {points[-1]["minutes"]:.0f} (best {figure(min(best) if mode == "min" else max(best))})'
    return f'{reached["minutes"]:.0f} ({count(reached["updates"])} updates)'


def plot_project_curve(project_dir: str, spec: Dict) -> None:
    """``learning_curve.png`` of a project: every row with a curve, the paper's figure dashed."""
    from parlai_empathy.evidence.learning_curve import plot

    target = spec['learning_curve']
    curves = {}
    for table in project_tables(spec):
        for row in table['rows']:
            if has_artifacts(project_dir, row):
                points = row_curve(project_dir, row)
                if points:
                    curves[row['entry']] = points
    if curves:
        plot(
            curves,
            target['metric'],
            os.path.join(project_dir, 'learning_curve.png'),
            target['value'],
            title=target.get('title', ''),
            log_y=target.get('log_y', False),
        )
