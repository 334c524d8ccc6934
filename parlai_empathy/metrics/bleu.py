"""Corpus BLEU with sacrebleu, kept as additive n-gram statistics.

Corpus BLEU is not an average of sentence scores: it is computed once from n-gram match counts
summed over the whole corpus. :class:`BleuStats` holds exactly those sums (the same numbers
sacrebleu aggregates), so statistics gathered one response at a time -- inside ParlAI's
``eval_model``, across batches or workers -- add up to the very score sacrebleu gives on the whole
file at once.

Two fixed configurations (see ``parlai_empathy/metrics/README.md``):

* :data:`AVG_BLEU` -- sacrebleu's defaults: 13a tokenization, case-sensitive, exponential
  smoothing, one reference. ``corpus_bleu-n`` is corpus BLEU with n-grams up to n (with brevity
  penalty); ``avg_bleu`` is the mean of bleu-1..4 (Rashkin et al.'s "AVG BLEU").
* :data:`AVG_BLEU_LC` -- the same, lowercased (``avg_bleu_lc``): what AVG BLEU is against
  references a paper lowercased, as MoEL's preprocessing does; scored offline only.
* :data:`MULTI_BLEU` -- the moses ``multi-bleu.perl -lc`` convention used by MoEL and MIME:
  lowercased BLEU-4 with no smoothing (any zero n-gram precision gives 0).
"""

from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, Sequence, Tuple

MAX_ORDER = 4


@dataclass(frozen=True)
class BleuConfig:
    """One sacrebleu BLEU setting."""

    lowercase: bool
    smooth_method: str
    tokenize: str = '13a'

    def signature(self) -> str:
        """sacrebleu's own signature string for this setting (orders are named separately).

        sacrebleu learns the number of references (nrefs:1 here) from a first scoring; a one-word
        pair tells it, so the signature is available before any real scoring in the process."""
        metric = _sacrebleu(self)
        metric.corpus_score(['signature'], [['signature']])
        return metric.get_signature().format()


AVG_BLEU = BleuConfig(lowercase=False, smooth_method='exp')
MULTI_BLEU = BleuConfig(lowercase=True, smooth_method='none')
AVG_BLEU_LC = BleuConfig(lowercase=True, smooth_method='exp')


@lru_cache(maxsize=None)
def _sacrebleu(config: BleuConfig):
    from sacrebleu.metrics import BLEU

    return BLEU(
        lowercase=config.lowercase,
        tokenize=config.tokenize,
        smooth_method=config.smooth_method,
        max_ngram_order=MAX_ORDER,
        force=True,  # responses are raw text; do not warn about "tokenized" periods
    )


@dataclass(frozen=True)
class BleuStats:
    """Sufficient statistics of corpus BLEU: lengths and per-order n-gram matches / totals."""

    sys_len: int = 0
    ref_len: int = 0
    correct: Tuple[int, ...] = (0,) * MAX_ORDER
    total: Tuple[int, ...] = (0,) * MAX_ORDER

    @classmethod
    def of_pair(cls, response: str, gold: str, config: BleuConfig = AVG_BLEU) -> 'BleuStats':
        """Statistics of one response against its single gold reference."""
        score = _sacrebleu(config).corpus_score([response], [[gold]])
        return cls(score.sys_len, score.ref_len, tuple(score.counts), tuple(score.totals))

    def __add__(self, other: 'BleuStats') -> 'BleuStats':
        return BleuStats(
            self.sys_len + other.sys_len,
            self.ref_len + other.ref_len,
            tuple(a + b for a, b in zip(self.correct, other.correct)),
            tuple(a + b for a, b in zip(self.total, other.total)),
        )

    def bleu(self, order: int, config: BleuConfig = AVG_BLEU) -> float:
        """Corpus BLEU-``order`` (0..100) from these sums, exactly as sacrebleu computes it."""
        from sacrebleu.metrics import BLEU

        if not 1 <= order <= MAX_ORDER:
            raise ValueError(f'BLEU order must be 1..{MAX_ORDER}, got {order}')
        if self.sys_len == 0:
            return 0.0
        return BLEU.compute_bleu(
            correct=list(self.correct[:order]),
            total=list(self.total[:order]),
            sys_len=self.sys_len,
            ref_len=self.ref_len,
            smooth_method=config.smooth_method,
            max_ngram_order=order,
        ).score

    def avg_bleu(self, config: BleuConfig = AVG_BLEU) -> float:
        """Mean of corpus BLEU-1..4."""
        return sum(self.bleu(n, config) for n in range(1, MAX_ORDER + 1)) / MAX_ORDER


def corpus_stats(responses: Sequence[str], golds: Sequence[str], config: BleuConfig = AVG_BLEU) -> BleuStats:
    if len(responses) != len(golds):
        raise ValueError(f'{len(responses)} responses but {len(golds)} gold responses')
    stats = BleuStats()
    for response, gold in zip(responses, golds):
        stats = stats + BleuStats.of_pair(response, gold, config)
    return stats


def corpus_bleu(responses: Sequence[str], golds: Sequence[str]) -> Dict[str, float]:
    """``corpus_bleu-1..4``, ``avg_bleu`` (sacrebleu defaults), ``multi_bleu`` (moses mode).

    Named apart from ParlAI's own ``bleu-1..4`` (nltk sentence BLEU averaged over examples).
    """
    stats = corpus_stats(responses, golds, AVG_BLEU)
    scores = {f'corpus_bleu-{n}': stats.bleu(n) for n in range(1, MAX_ORDER + 1)}
    scores['avg_bleu'] = stats.avg_bleu()
    scores['multi_bleu'] = corpus_stats(responses, golds, MULTI_BLEU).bleu(MAX_ORDER, MULTI_BLEU)
    return scores


def signatures() -> Dict[str, str]:
    """What to print beside the scores so that anyone can reproduce them with sacrebleu."""
    return {
        'avg_bleu': f'sacrebleu BLEU-1..4 {AVG_BLEU.signature()}',
        'multi_bleu': f'sacrebleu BLEU-4 {MULTI_BLEU.signature()} (moses multi-bleu -lc convention)',
    }


def lowercased_signature() -> Dict[str, str]:
    return {'avg_bleu_lc': f'sacrebleu BLEU-1..4 {AVG_BLEU_LC.signature()}'}
