"""The board's rows from the committed evidence: each project table's rows
(``projects/<paper>/table.json``) with their artifacts (``runs/<row>/``, read as :class:`Report`
and :class:`Meta`), gathered as :class:`EntryResult` rows named ``paper/entry``, and the notes
under the board."""

import os
from typing import Dict, List, Optional

from parlai_empathy.evidence import artifacts as evidence
from parlai_empathy.leaderboard.records import EntryResult, Meta, Report


def project_tables(spec: Dict) -> List[Dict]:
    """A table.json's tables: ``tables`` (each with an ``id``), or its top-level ``metrics``/``rows``."""
    if 'tables' in spec:
        return spec['tables']
    return [{'id': '', 'metrics': spec['metrics'], 'rows': spec['rows']}]


def row_key(row: Dict, key: str) -> str:
    """The report key that fills column ``key`` in ``row``: the row's ``keys`` may name another,
    where the row's model measures the column's quantity under another name (Multi-TR has no
    polarity, so the reference's PPL definition is its ``ppl_ex``, not ``ppl_ex_gold``)."""
    return (row.get('keys') or {}).get(key, key)


def has_artifacts(project_dir: str, row: Dict) -> bool:
    """Whether the row names an artifacts folder that exists (a row with a plan and no run yet has none)."""
    return bool(row.get('artifacts')) and os.path.isdir(os.path.join(project_dir, row['artifacts']))


def row_report(project_dir: str, row: Dict) -> Optional[Report]:
    """A table row's report, read from its artifacts (``None`` when it has none)."""
    if not has_artifacts(project_dir, row):
        return None
    folder = os.path.join(project_dir, row['artifacts'])
    return Report.from_json(evidence.read_report(folder), os.path.join(folder, evidence.REPORT))


def row_meta(project_dir: str, row: Dict) -> Meta:
    path = os.path.join(project_dir, row['artifacts'], evidence.META)
    return Meta.from_json(evidence.read_json(path), path)


def row_curve(project_dir: str, row: Dict) -> List[Dict]:
    """The row's validation curve (``meta.json``), with the row's ``keys`` applied: each point
    also carries a mapped column under the column's own key."""
    keys = row.get('keys') or {}
    return [
        dict(point, **{column: point[source] for column, source in keys.items() if source in point})
        for point in row_meta(project_dir, row).curve
    ]


def read_entry_rows(path: str) -> List[Dict]:
    """The per-example rows of an entry to compare: a row's folder (its ``outputs.jsonl.gz``) or
    such a file, read by :func:`parlai_empathy.evidence.artifacts.read_outputs` (the bounded reader) and
    checked field by field (:func:`parlai_empathy.metrics.bootstrap.check_rows`)."""
    from parlai_empathy.metrics.bootstrap import check_rows

    if os.path.isdir(path):
        path = os.path.join(path, evidence.OUTPUTS)
    if not os.path.lexists(path):
        raise ValueError(f'{path} does not exist (give a row folder or its {evidence.OUTPUTS})')
    rows = evidence.read_outputs(path)
    check_rows(rows, path)
    return rows


def artifact_folders(projects_dir: str) -> List[str]:
    """Every table row's artifacts folder that exists, in the board's order."""
    folders = []
    for paper in sorted(os.listdir(projects_dir)):
        project_dir = os.path.join(projects_dir, paper)
        spec_path = os.path.join(project_dir, 'table.json')
        if os.path.isfile(spec_path):
            for table in project_tables(evidence.read_json(spec_path)):
                folders += [
                    os.path.join(project_dir, row['artifacts'])
                    for row in table['rows']
                    if has_artifacts(project_dir, row)
                ]
    return folders


def gather_artifacts(projects_dir: str) -> List[EntryResult]:
    """Every project row that has artifacts, as leaderboard results (``name`` = ``paper/entry``);
    a row's ``paper`` figures are divided by their column's scale, onto its report's scale."""
    results = []
    for paper in sorted(os.listdir(projects_dir)):
        project_dir = os.path.join(projects_dir, paper)
        spec_path = os.path.join(project_dir, 'table.json')
        if not os.path.isfile(spec_path):
            continue
        spec = evidence.read_json(spec_path)
        for table in project_tables(spec):
            scales = {m['key']: m.get('scale', 1) for m in table['metrics']}
            for row in table['rows']:
                report = row_report(project_dir, row)
                if report is None:
                    continue
                published = report.kind == 'published'
                meta = row_meta(project_dir, row)
                results.append(
                    EntryResult(
                        name=f'{paper}/{row["entry"]}',
                        kind=report.kind,
                        values=report.values,
                        exs=report.exs or {},
                        commands=report.commands or [],
                        label=row.get('label') if published else None,
                        alignment=meta.alignment if published else None,
                        paper={k: v / scales.get(k, 1) for k, v in row.get('paper', {}).items()},
                        seconds=meta.seconds,
                        notes=report.notes or {},
                        ci95=report.ci95,
                    )
                )
    return results


def board_notes(results: List[EntryResult]) -> Dict[str, str]:
    """The settings behind the board's figures (the suite's, then each row's own), its task and
    how long its evaluations took."""
    from parlai_empathy.metrics.suite import settings_notes

    notes = dict(settings_notes()) if results else {}
    for result in results:
        notes.update(result.notes or {})
    notes['task'] = 'ED test (empathy_ed_clean) for response models; each classifier on its own task'
    notes['total time'] = f'{sum(r.seconds or 0.0 for r in results):.0f} s of evaluation'
    return notes
