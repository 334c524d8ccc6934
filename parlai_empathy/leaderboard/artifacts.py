"""An evaluated model entry's evidence: the four files of :mod:`parlai_empathy.evidence.artifacts` in
``<artifacts>/<entry>/``, from which the project tables and the board regenerate without the model."""

import dataclasses
import datetime
import json
import os
from typing import Dict

from parlai_empathy.evidence import artifacts as evidence
from parlai_empathy.integration.model_opt import read_model_opt
from parlai_empathy.leaderboard.records import EntryResult, Meta, Report


def entry_report(result: EntryResult, classes=None) -> Report:
    """The ``report.json`` of an evaluated entry: its figures, counts, commands, the suite's
    settings with the entry's own notes, a classifier's per-label figures, and each figure's
    bootstrap 95 % interval over the per-example outputs (a classifier's over its ``classes``)."""
    from parlai_empathy.metrics.suite import settings_notes

    ci95 = result.ci95
    if ci95 is None and result.outputs:
        from parlai_empathy.metrics.bootstrap import classifier_intervals, intervals

        ci95 = (
            classifier_intervals(result.outputs, classes or [], keys=list(result.values))
            if result.kind == 'classifier'
            else intervals(result.outputs, keys=list(result.values))
        ) or None
    return Report(
        entry=result.name,
        kind=result.kind,
        values=result.values,
        exs=result.exs or {},
        commands=result.commands,
        notes=dict(settings_notes(), **(result.notes or {})),
        per_label=result.per_label or None,
        per_label_tuned=result.per_label_tuned or None,
        ci95=ci95,
        extra={} if result.kind is not None else {'kind': None},
    )  # a report always names its kind


def with_intervals(result: EntryResult) -> EntryResult:
    """``result`` with the bootstrap 95 % interval of every figure its per-example outputs support."""
    if not result.outputs:
        return result
    from parlai_empathy.metrics.bootstrap import classifier_intervals, intervals

    if result.kind == 'classifier':
        classes = read_model_opt(result.path).get('classes') or [] if result.path else []
        return dataclasses.replace(
            result, ci95=classifier_intervals(result.outputs, classes, keys=list(result.values)) or None
        )
    return dataclasses.replace(result, ci95=intervals(result.outputs, keys=list(result.values)) or None)


def refresh_intervals(row_dir: str) -> bool:
    """Recompute a committed row's intervals from its ``outputs.jsonl.gz`` into its ``report.json``
    (every figure the outputs support); whether the report changed."""
    from parlai_empathy.metrics.bootstrap import intervals

    path = os.path.join(row_dir, evidence.REPORT)
    report = evidence.read_report(row_dir)
    outputs = evidence.read_outputs(os.path.join(row_dir, evidence.OUTPUTS))
    if report.get('kind') == 'classifier':
        from parlai_empathy.metrics.bootstrap import classifier_intervals

        classes = evidence.read_json(os.path.join(row_dir, evidence.OPT)).get('classes') or []
        ci95 = classifier_intervals(outputs, classes, keys=list(report['values']))
    else:
        ci95 = intervals(outputs, keys=list(report['values']))
    if not ci95 or report.get('ci95') == ci95:
        return False
    evidence.write_json(path, dict(report, ci95=ci95))
    return True


def entry_meta(result: EntryResult, eval_command: str, opt: Dict) -> Meta:
    """The ``meta.json`` of an evaluated entry; with the model's ``.trainstats``, its training and
    validation curve, and the updates of the evaluated (best validated) model."""
    training = None
    stats_path = result.path + '.trainstats'
    if os.path.isfile(stats_path):
        from parlai_empathy.evidence.learning_curve import curve, model_updates, saved_updates

        with open(stats_path) as f:
            stats = json.load(f)
        training = {k: stats[k] for k in ('train_steps', 'total_epochs', 'train_time', 'parleys') if k in stats}
        training['curve'] = curve(stats)
        updates = saved_updates(result.path)
        if updates is None:
            updates = model_updates(stats, opt.get('validation_metric') or 'loss')
        if updates is not None:
            training['model_updates'] = updates
    return Meta(
        entry=result.name,
        code=evidence.code_version(),
        machine=evidence.machine(),
        evaluated=datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
        evaluation_seconds=round(result.seconds or 0.0, 1),
        evaluation_command=eval_command,
        examples=len(result.outputs or []),
        training=training,
    )


def write_entry_artifacts(result: EntryResult, row_dir: str, eval_command: str) -> Dict[str, str]:
    """The four files of ``parlai_empathy.evidence.artifacts`` for one evaluated model entry."""
    opt = read_model_opt(result.path)
    report, meta = entry_report(result, opt.get('classes')), entry_meta(result, eval_command, opt)
    return evidence.write_row(row_dir, report.to_json(), result.outputs or [], opt, meta.to_json())
