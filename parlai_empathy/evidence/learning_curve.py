"""Learning curves and time to target, from ParlAI's ``<model>.trainstats``.

``train_model`` keeps every validation report in ``trainstats['valid_reports']``, each with the
wall seconds spent training so far (``train_time``, restored across resumed runs) and the update
count. :func:`curve` turns them into rows a row's ``meta.json`` keeps; :func:`time_to_target`
reads off the first validation that reaches a paper's figure; :func:`plot` draws one or more
curves against wall minutes.
"""

import json
from typing import Dict, List, Mapping, Optional, Sequence

KEPT = ('ppl', 'ppl_ex', 'ppl_gold', 'ppl_ex_gold', 'emo_acc', 'macro_f1', 'accuracy', 'hits@1', 'loss')


def curve(trainstats: Mapping) -> List[Dict[str, float]]:
    """One row per validation: minutes, updates, epochs and the kept metrics."""
    rows = []
    for report in trainstats.get('valid_reports', []):
        row = {
            'minutes': round(float(report.get('train_time', 0.0)) / 60, 2),
            'updates': int(report.get('total_train_updates', 0)),
            'epochs': round(float(report.get('total_epochs', 0.0)), 3),
        }
        row.update({k: float(report[k]) for k in KEPT if k in report})
        rows.append(row)
    return rows


def model_updates(trainstats: Mapping, metric: str) -> Optional[int]:
    """Updates of the model ``train_model`` left in the model file: it writes that file only at a
    validation whose ``metric`` is the best so far (``trainstats['best_valid']``), or once at the
    end when no validation ran, so the model can be younger than the run. (Its own final reports
    are no guide: after a resumed run they load ``model.checkpoint`` over the model file.)"""
    reports = trainstats.get('valid_reports') or []
    if not reports:
        return int(trainstats['train_steps']) if 'train_steps' in trainstats else None
    best = trainstats.get('best_valid')
    matching = [r for r in reports if metric in r and best is not None and float(r[metric]) == float(best)]
    return int(matching[-1]['total_train_updates']) if matching and 'total_train_updates' in matching[-1] else None


def saved_updates(model_file: str) -> Optional[int]:
    """The update count a ParlAI agent stored in its model file (``number_training_updates``),
    read weights-only (:func:`parlai_empathy.integration.safe_loading.load_checkpoint`); None when the file
    cannot be read or holds none. The model file's own count is the reliable one: the best
    validation figure in ``.trainstats`` need not belong to the model in the file (a run resumed
    under another ``--validation-metric`` recomputes it from the earlier validations, and one of
    those may beat the saved model without ever having been saved)."""
    from parlai_empathy.integration.safe_loading import ModelFileError, load_checkpoint

    try:
        updates = load_checkpoint(model_file, mmap=True).get('number_training_updates')
    except ModelFileError:
        return None
    return int(updates) if isinstance(updates, (int, float)) else None


def read_curve(trainstats_path: str) -> List[Dict[str, float]]:
    with open(trainstats_path) as f:
        return curve(json.load(f))


def time_to_target(rows: Sequence[Mapping], metric: str, target: float, mode: str = 'min') -> Optional[Dict]:
    """The first validation whose ``metric`` reaches ``target`` (<= for 'min', >= for 'max')."""
    for row in rows:
        if metric in row and (row[metric] <= target if mode == 'min' else row[metric] >= target):
            return dict(row)
    return None


def plot(
    curves: Mapping[str, Sequence[Mapping]],
    metric: str,
    path: str,
    target: Optional[float] = None,
    title: str = '',
    log_y: bool = False,
) -> None:
    """``metric`` against wall minutes, one line per named curve, the paper's figure dashed."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, rows in curves.items():
        points = [(r['minutes'], r[metric]) for r in rows if metric in r]
        if points:
            ax.plot(*zip(*points), marker='o', markersize=3, label=name)
    if target is not None:
        ax.axhline(target, color='black', linestyle='--', linewidth=1, label=f"paper's {metric} {target:g}")
    if log_y:
        ax.set_yscale('log')
    ax.set_xlabel("training wall minutes (machine, threads and load: each run's meta.json)")
    ax.set_ylabel(f'validation {metric}')
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={'Software': None})
    plt.close(fig)
