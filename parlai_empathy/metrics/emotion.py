"""Emotion accuracy at k (MIME reports top-1/2/5) from a model's score vector.

A model scores every emotion label; the prediction is correct at k when the gold label is among
the k highest scores. Ties are broken by label order (the earlier label ranks first, as a stable
sort would), so the result is deterministic.
"""

from typing import Dict, Mapping, Sequence, Union

TOP_KS = (1, 2, 5)
Scores = Union[Sequence[float], Mapping[str, float]]


def metric_name(k: int) -> str:
    return 'emo_acc' if k == 1 else f'emo_acc@{k}'


def gold_rank(scores: Scores, gold: Union[int, str], labels: Sequence[str] = None) -> int:
    """0-based rank of the gold label among the scores (0 = best).

    ``scores`` is a sequence aligned with ``labels`` (or with label indices when ``gold`` is an
    int), or a mapping label -> score. ``scores`` may be a torch tensor or numpy array.
    """
    if isinstance(scores, Mapping):
        labels = list(scores.keys())
        values = [float(scores[label]) for label in labels]
    else:
        values = [float(v) for v in (scores.tolist() if hasattr(scores, 'tolist') else scores)]
    if isinstance(gold, str):
        if labels is None:
            raise ValueError(f'gold emotion {gold!r} is a label name but no label list was given')
        if gold not in labels:
            raise ValueError(f'gold emotion {gold!r} is not one of the {len(labels)} scored labels')
        gold = list(labels).index(gold)
    if labels is not None and len(labels) != len(values):
        raise ValueError(f'{len(values)} emotion scores for {len(labels)} labels')
    if not 0 <= gold < len(values):
        raise ValueError(f'gold emotion index {gold} outside the {len(values)} scores')
    target = values[gold]
    better = sum(1 for v in values if v > target)
    tied_before = sum(1 for v in values[:gold] if v == target)
    return better + tied_before


def topk_hits(
    scores: Scores, gold: Union[int, str], labels: Sequence[str] = None, ks: Sequence[int] = TOP_KS
) -> Dict[str, bool]:
    """{'emo_acc': hit@1, 'emo_acc@2': hit@2, 'emo_acc@5': hit@5} for one example."""
    rank = gold_rank(scores, gold, labels)
    return {metric_name(k): rank < k for k in ks}
