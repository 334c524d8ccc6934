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
        row = {'minutes': round(float(report.get('train_time', 0.0)) / 60, 2),
               'updates': int(report.get('total_train_updates', 0)),
               'epochs': round(float(report.get('total_epochs', 0.0)), 3)}
        row.update({k: float(report[k]) for k in KEPT if k in report})
        rows.append(row)
    return rows


def model_updates(trainstats: Mapping) -> Optional[int]:
    """Updates of the model that ``train_model`` left in the model file: it saves that file only at
    validations that improve (else once, at the end) and reloads it for its final reports, so
    ``final_valid_report`` counts the updates of the evaluated model, which can be fewer than the
    run's ``train_steps`` when training ends between validations."""
    report = trainstats.get('final_valid_report') or {}
    return int(report['total_train_updates']) if 'total_train_updates' in report else None


def read_curve(trainstats_path: str) -> List[Dict[str, float]]:
    with open(trainstats_path) as f:
        return curve(json.load(f))


def time_to_target(rows: Sequence[Mapping], metric: str, target: float, mode: str = 'min') -> Optional[Dict]:
    """The first validation whose ``metric`` reaches ``target`` (<= for 'min', >= for 'max')."""
    for row in rows:
        if metric in row and (row[metric] <= target if mode == 'min' else row[metric] >= target):
            return dict(row)
    return None


def plot(curves: Mapping[str, Sequence[Mapping]], metric: str, path: str, target: Optional[float] = None,
         title: str = '', log_y: bool = False) -> None:
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
