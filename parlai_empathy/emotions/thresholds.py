"""Per-label decision thresholds of a multi-label tagger, tuned on the development split.

The GoEmotions paper predicts every label whose probability passes one threshold, 0.3. A label
that is rare or hard (grief, nervousness, pride, relief) may then never be predicted; choosing
each label's threshold to maximise that label's F1 on dev is the usual remedy. The single 0.3
stays available (``--threshold-scheme single``), and both macro-F1 figures are reported.
"""

from typing import Dict, Sequence

import numpy as np

from parlai_empathy.models.emotion_classifier import DEFAULT_THRESHOLD

GRID = np.round(np.arange(0.02, 0.981, 0.01), 2)


def f1_at(probs: np.ndarray, gold: np.ndarray, thresholds) -> np.ndarray:
    """Per-label F1 ``[num_classes]`` of ``probs >= thresholds`` against the boolean ``gold``."""
    predicted = probs >= thresholds
    tp = (predicted & gold).sum(0)
    fp = (predicted & ~gold).sum(0)
    fn = (~predicted & gold).sum(0)
    denominator = 2 * tp + fp + fn
    return np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0)


def tune(
    probs: np.ndarray, gold: np.ndarray, grid: Sequence[float] = GRID, default: float = DEFAULT_THRESHOLD
) -> np.ndarray:
    """Each label's threshold from ``grid`` maximising its F1 on (``probs``, ``gold``).

    Ties go to the grid value closest to ``default``; a label with no positive example keeps
    ``default`` (no threshold can be chosen for it).
    """
    grid = np.asarray(grid, dtype=np.float64)
    scores = np.stack([f1_at(probs, gold, t) for t in grid])  # [len(grid), num_classes]
    thresholds = np.full(probs.shape[1], default)
    for label in range(probs.shape[1]):
        if not gold[:, label].any():
            continue
        best = scores[:, label].max()
        candidates = grid[np.isclose(scores[:, label], best)]
        thresholds[label] = candidates[np.argmin(np.abs(candidates - default))]
    return thresholds


def summary(
    classes: Sequence[str],
    probs: np.ndarray,
    gold: np.ndarray,
    thresholds: np.ndarray,
    default: float = DEFAULT_THRESHOLD,
) -> Dict:
    """What the tuning changed on the tuning split, per label and in macro-F1."""
    single, tuned = f1_at(probs, gold, default), f1_at(probs, gold, thresholds)
    return {
        'macro_f1_single': float(single.mean()),
        'macro_f1_tuned': float(tuned.mean()),
        'labels': {
            name: {'threshold': float(t), 'f1_single': float(s), 'f1_tuned': float(u), 'support': int(gold[:, i].sum())}
            for i, (name, t, s, u) in enumerate(zip(classes, thresholds, single, tuned))
        },
    }
