"""The suite's metrics as ParlAI ``Metric`` objects, and helpers that record them.

ParlAI aggregates a metric by ``+``-ing the per-example objects (``Metrics.add``), across batches,
tasks and workers, and reports ``value()`` at the end. Average-of-examples metrics fit ParlAI's
``AverageMetric``. Corpus-level metrics do not: their value is a ratio of sums. So they are kept
as mergeable sufficient statistics:

* :class:`CorpusBleuMetric` -- sacrebleu's n-gram match counts and lengths (:class:`BleuStats`);
* :class:`CorpusDistinctMetric` -- every response's n-grams (the distinct count needs the union).

Adding statistics is exact integer arithmetic, so a figure accumulated example by example inside
``parlai eval_model`` equals the figure computed offline on the saved outputs, and a sharded
evaluation (``multiprocessing_eval``/``distributed_eval``: each worker's report is pickled,
gathered and added up by ParlAI's ``aggregate_unnamed_reports``) equals the 1-worker figure.

Agents call :func:`record_generation_metrics` / :func:`record_emotion_metrics` /
:func:`record_retrieval_metrics` with any object that has ``add(key, metric)`` (``self.metrics``,
``self.global_metrics``), or :func:`batch_generation_metrics` & co. to get per-example lists for
``TorchAgent.record_local_metric``.
"""

from typing import Callable, Dict, List, Optional, Sequence, Tuple

from parlai.core.metrics import AverageMetric, Metric

from parlai_empathy.metrics import bleu, distinct, emotion, retrieval
from parlai_empathy.metrics.bertscore import METRIC as BERTSCORE_METRIC
from parlai_empathy.metrics.bertscore import BertScore

BLEU_ORDERS = (1, 2, 3, 4)
DISTINCT_ORDERS = (1, 2)
AVG = 'avg'


class CorpusBleuMetric(Metric):
    """Corpus BLEU-n (or the mean of BLEU-1..4) from summed sacrebleu statistics."""

    __slots__ = ('_stats', '_order', '_config')

    def __init__(self, stats: bleu.BleuStats, order=AVG, config: bleu.BleuConfig = bleu.AVG_BLEU):
        if order != AVG and order not in BLEU_ORDERS:
            raise ValueError(f'BLEU order must be one of {BLEU_ORDERS} or {AVG!r}, got {order!r}')
        self._stats = stats
        self._order = order
        self._config = config

    def __add__(self, other: Optional['CorpusBleuMetric']) -> 'CorpusBleuMetric':
        if other is None:
            return self
        if (other._order, other._config) != (self._order, self._config):
            raise ValueError('cannot add corpus BLEU statistics of different orders or settings')
        return CorpusBleuMetric(self._stats + other._stats, self._order, self._config)

    def __reduce__(self):
        # pickled between evaluation workers: the integer statistics and the setting, nothing else
        return (CorpusBleuMetric, (self._stats, self._order, self._config))

    def value(self) -> float:
        if self._order == AVG:
            return self._stats.avg_bleu(self._config)
        return self._stats.bleu(self._order, self._config)


class CorpusDistinctMetric(Metric):
    """Corpus Distinct-n: distinct n-grams over all n-grams of all responses seen.

    ParlAI adds metrics one example at a time, so ``+`` must be cheap. Each object is a prefix
    (``length``) of an append-only list of per-response n-gram tuples; adding to the object at the
    tip of its list appends in place and returns a new, longer prefix, while older objects keep
    seeing exactly their own prefix. Adding to an older prefix copies. Objects therefore behave as
    immutable values, at amortized O(1) per added response.
    """

    __slots__ = ('_log', '_length', '_n', '_cached')

    def __init__(self, response_ngrams: Sequence[Tuple[str, ...]], n: int, *, _log=None, _length=None):
        if _log is None:
            _log = [tuple(response_ngrams)]
            _length = 1
        self._log: List[Tuple] = _log
        self._length: int = _length
        self._n = n
        self._cached: Optional[float] = None

    @classmethod
    def of_response(cls, response: str, n: int, tokenize=distinct.tokens) -> 'CorpusDistinctMetric':
        return cls.of_tokens(tokenize(response), n)

    @classmethod
    def of_tokens(cls, tokens: Sequence[str], n: int) -> 'CorpusDistinctMetric':
        """One response's statistics from its tokens (tokenize once for several orders)."""
        return cls(distinct.ngrams(tokens, n), n)

    def _entries(self) -> List[Tuple]:
        return self._log[: self._length]

    def __add__(self, other: Optional['CorpusDistinctMetric']) -> 'CorpusDistinctMetric':
        if other is None:
            return self
        if other._n != self._n:
            raise ValueError(f'cannot add distinct-{self._n} and distinct-{other._n} statistics')
        incoming = other._entries()  # a copy, so that a + a is safe
        if self._length == len(self._log):
            log = self._log
        else:
            log = self._entries()
        log.extend(incoming)
        return CorpusDistinctMetric((), self._n, _log=log, _length=len(log))

    def __reduce__(self):
        # pickle (multi-worker evaluation) only this object's own prefix
        return (_distinct_from_entries, (self._entries(), self._n))

    def value(self) -> float:
        if self._cached is None:
            entries = self._entries()
            total = sum(len(grams) for grams in entries)
            unique = len(set().union(*entries)) if entries else 0
            self._cached = unique / total if total else 0.0
        return self._cached


def _distinct_from_entries(entries, n):
    return CorpusDistinctMetric((), n, _log=list(entries), _length=len(entries))


def utterance_distinct_metric(response: str, n: int) -> AverageMetric:
    """Per-utterance Distinct-n; a response without any n-gram adds nothing to the average."""
    unique, total = distinct.utterance_distinct(response, n)
    return AverageMetric(unique / total, 1) if total else AverageMetric(0, 0)


def generation_metrics(gold: str, response: str) -> Dict[str, Metric]:
    """Every text-only metric of the suite for one response (BERTScore is batched separately)."""
    stats = bleu.BleuStats.of_pair(response, gold, bleu.AVG_BLEU)
    metrics: Dict[str, Metric] = {f'corpus_bleu-{n}': CorpusBleuMetric(stats, n) for n in BLEU_ORDERS}
    metrics['avg_bleu'] = CorpusBleuMetric(stats, AVG)
    metrics['multi_bleu'] = CorpusBleuMetric(
        bleu.BleuStats.of_pair(response, gold, bleu.MULTI_BLEU), bleu.MAX_ORDER, bleu.MULTI_BLEU
    )
    for n in DISTINCT_ORDERS:
        metrics[f'dist-{n}'] = CorpusDistinctMetric.of_response(response, n)
        metrics[f'utt_dist-{n}'] = utterance_distinct_metric(response, n)
    return metrics


def comparison_metrics(gold: str, response: str) -> Dict[str, Metric]:
    """The figures that set one suite beside the papers' own definitions, scored offline
    (``parlai empathy_score``): AVG BLEU lowercased, Distinct-n on nltk word tokens, reply length
    in the suite's tokens."""
    metrics: Dict[str, Metric] = {
        'avg_bleu_lc': CorpusBleuMetric(
            bleu.BleuStats.of_pair(response, gold, bleu.AVG_BLEU_LC), AVG, bleu.AVG_BLEU_LC
        ),
        'reply_tokens': AverageMetric(len(distinct.tokens(response)), 1),
    }
    words = distinct.nltk_tokens(response)
    for n in DISTINCT_ORDERS:
        metrics[f'dist-{n}_nltk'] = CorpusDistinctMetric.of_tokens(words, n)
    return metrics


def bertscore_metrics(golds: Sequence[str], responses: Sequence[str], scorer: BertScore) -> List[AverageMetric]:
    """One BERTScore-F1 ``AverageMetric`` per response (one encoder pass for the whole batch)."""
    return [AverageMetric(f, 1) for f in scorer.f1(responses, golds)]


def emotion_metrics(scores, gold, labels: Sequence[str] = None) -> Dict[str, Metric]:
    """emo_acc, emo_acc@2, emo_acc@5 for one example (see :mod:`.emotion`)."""
    return {name: AverageMetric(int(hit), 1) for name, hit in emotion.topk_hits(scores, gold, labels).items()}


def retrieval_metrics(
    ranked: Sequence[str], gold: str, num_candidates: Optional[int], name: str = retrieval.METRIC
) -> Dict[str, Metric]:
    """p@1,100 for one example ranked among exactly 100 candidates (``name``: the protocol's
    column, ``p@1,100`` or ``p@1,100_shuffled``)."""
    return {name: AverageMetric(int(retrieval.top1_correct(ranked, gold, num_candidates)), 1)}


def _record(tracker, metrics: Dict[str, Metric]) -> None:
    for key, metric in metrics.items():
        tracker.add(key, metric)


def record_generation_metrics(tracker, gold: str, response: str, bertscore_f: Optional[float] = None) -> None:
    """Add one response's suite metrics to ``tracker`` (anything with ``add(key, Metric)``)."""
    metrics = generation_metrics(gold, response)
    if bertscore_f is not None:
        metrics[BERTSCORE_METRIC] = AverageMetric(bertscore_f, 1)
    _record(tracker, metrics)


def record_emotion_metrics(tracker, scores, gold, labels: Sequence[str] = None) -> None:
    _record(tracker, emotion_metrics(scores, gold, labels))


def record_retrieval_metrics(
    tracker, ranked: Sequence[str], gold: str, num_candidates: Optional[int], name: str = retrieval.METRIC
) -> None:
    _record(tracker, retrieval_metrics(ranked, gold, num_candidates, name))


def _transpose(per_example: List[Dict[str, Metric]]) -> Dict[str, List[Metric]]:
    if not per_example:
        return {}
    return {key: [metrics[key] for metrics in per_example] for key in per_example[0]}


def batch_generation_metrics(
    golds: Sequence[str], responses: Sequence[str], scorer: Optional[BertScore] = None
) -> Dict[str, List[Metric]]:
    """key -> one Metric per example, the shape ``TorchAgent.record_local_metric`` takes."""
    if len(golds) != len(responses):
        raise ValueError(f'{len(responses)} responses but {len(golds)} gold responses')
    by_key = _transpose([generation_metrics(g, r) for g, r in zip(golds, responses)])
    if scorer is not None and responses:
        by_key[BERTSCORE_METRIC] = bertscore_metrics(golds, responses, scorer)
    return by_key


def record_batch_generation_metrics(
    record_local_metric: Callable[[str, List[Metric]], None],
    golds: Sequence[str],
    responses: Sequence[str],
    scorer: Optional[BertScore] = None,
) -> None:
    """For a TorchAgent's batch: ``record_batch_generation_metrics(self.record_local_metric, ...)``."""
    for key, values in batch_generation_metrics(golds, responses, scorer).items():
        record_local_metric(key, values)


def batch_emotion_metrics(scores_batch, golds, labels: Sequence[str] = None) -> Dict[str, List[Metric]]:
    """Per-example emotion accuracies for a (batch x labels) score matrix."""
    rows = scores_batch.tolist() if hasattr(scores_batch, 'tolist') else list(scores_batch)
    if len(rows) != len(golds):
        raise ValueError(f'{len(rows)} score vectors but {len(golds)} gold emotions')
    return _transpose([emotion_metrics(s, g, labels) for s, g in zip(rows, golds)])
