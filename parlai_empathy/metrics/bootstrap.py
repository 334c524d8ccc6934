"""95% bootstrap intervals over test examples, from a row's per-example outputs.

Resampling examples with replacement (seeded, 1,000 resamples) and recomputing the figure on each
resample gives the spread a different draw of test dialogues would give. Corpus-level figures are
recomputed as corpora: AVG BLEU from summed sacrebleu statistics, Distinct-n from the union of
the resampled replies' n-grams; accuracies are means of per-example hits. Percentile intervals,
except Distinct-n: a resample drawn with replacement repeats replies, whose n-grams count again
without being new, so every resample's Distinct-n is lower than the figure (biased by ~0.7 of a
point at 5k replies). Its interval is the percentile interval moved by the bootstrap's bias
estimate (the figure minus the mean of the resamples), so it is centred as the figure is.
"""
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

RESAMPLES = 1000
SEED = 0


def percentile_interval(statistic: Callable[[np.ndarray], float], n: int, resamples: int = RESAMPLES,
                        seed: int = SEED, level: float = 0.95, debias: bool = False) -> Tuple[float, float]:
    """(low, high) of ``statistic(indices)`` over ``resamples`` draws of ``n`` indices; with
    ``debias`` moved by the bootstrap's bias estimate (figure minus the resamples' mean)."""
    rng = np.random.default_rng(seed)
    values = np.array([statistic(rng.integers(0, n, n)) for _ in range(resamples)])
    tail = (1.0 - level) / 2 * 100
    shift = statistic(np.arange(n)) - values.mean() if debias else 0.0
    return float(np.percentile(values, tail) + shift), float(np.percentile(values, 100 - tail) + shift)


def _bleu_statistic(replies: Sequence[str], golds: Sequence[str]) -> Callable[[np.ndarray], float]:
    from parlai_empathy.metrics import bleu

    stats = [bleu.BleuStats.of_pair(r, g) for r, g in zip(replies, golds)]
    lengths = np.array([[s.sys_len, s.ref_len] for s in stats], dtype=np.int64)
    correct = np.array([s.correct for s in stats], dtype=np.int64)
    total = np.array([s.total for s in stats], dtype=np.int64)

    def avg_bleu(indices):
        sys_len, ref_len = lengths[indices].sum(0)
        summed = bleu.BleuStats(int(sys_len), int(ref_len), tuple(int(x) for x in correct[indices].sum(0)),
                                tuple(int(x) for x in total[indices].sum(0)))
        return summed.avg_bleu()

    return avg_bleu


def _distinct_statistic(replies: Sequence[str], n: int) -> Callable[[np.ndarray], float]:
    from parlai_empathy.metrics import distinct

    grams = [distinct.ngrams(distinct.tokens(r), n) for r in replies]
    counts = np.array([len(g) for g in grams])
    sets = [frozenset(g) for g in grams]

    def dist(indices):
        total = counts[indices].sum()
        if not total:
            return 0.0
        seen = set()
        for i in np.unique(indices):
            seen |= sets[i]
        return len(seen) / total

    return dist


def intervals(rows: List[Mapping], keys: Optional[Sequence[str]] = None,
              resamples: int = RESAMPLES) -> Dict[str, List[float]]:
    """95% intervals of the figures ``rows`` support (``keys`` limits which): ``{metric: [low, high]}``."""
    out = {}
    replied = [r for r in rows if r.get('reply') is not None and r.get('gold') is not None]

    def wanted(key):
        return keys is None or key in keys

    if replied and wanted('avg_bleu'):
        out['avg_bleu'] = _bleu_statistic([r['reply'] for r in replied], [r['gold'] for r in replied])
    for n in (1, 2):
        if replied and wanted(f'dist-{n}'):
            out[f'dist-{n}'] = _distinct_statistic([r['reply'] for r in replied], n)
    for key in ('emo_acc', 'p@1,100', 'p@1,100_shuffled'):
        hits = np.array([r[key] for r in rows if r.get(key) is not None], dtype=np.float64)
        if len(hits) and wanted(key):
            out[key] = (lambda h: (lambda idx: float(h[idx].mean())))(hits)
    sizes = {'emo_acc': None, 'p@1,100': None, 'p@1,100_shuffled': None}
    result = {}
    for key, statistic in out.items():
        n = len(replied) if key not in sizes else sum(r.get(key) is not None for r in rows)
        low, high = percentile_interval(statistic, n, resamples, debias=key.startswith('dist-'))
        result[key] = [low, high]
    return result
