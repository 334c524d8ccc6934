"""95% bootstrap intervals over test examples, and paired tests of two entries on the same examples.

Both work on a row's per-example outputs (``outputs.jsonl.gz``): the reply and gold where the row
keeps them, or the per-example statistics a row keeps instead of the text (a released file's row:
:func:`item_statistics`): sacrebleu's n-gram counts, the replies' n-grams as ids local to the
row, the reply's identity, and the scores a model gave (NLL and token count, emotion and
P@1,100 hits, BERTScore, the detected emotion).

**Intervals.** Resampling examples with replacement (seeded, 1,000 resamples) and recomputing the
figure on each resample gives the spread a different draw of test dialogues would give. Corpus
figures are recomputed as corpora: BLEU from summed sacrebleu statistics, Distinct-n from the
union of the resampled replies' n-grams, PPL from summed NLL over summed tokens; accuracies and
per-reply scores are means. Percentile intervals, except the counts of distinct things (Distinct-n,
distinct replies): a resample drawn with replacement repeats replies, whose n-grams count again
without being new, so every resample's figure is lower than the figure (Distinct-n by ~0.7 of a
point at 5k replies). Their interval is the percentile interval moved by the bootstrap's bias
estimate (the figure minus the mean of the resamples), so it is centred as the figure is.

**Paired tests** (:func:`compare`) use only the examples both entries have, matched by ``id``.
Accuracies (a hit or a miss per example) get McNemar's exact test on the discordant pairs
(scipy's binomial test); every other figure the paired bootstrap: the same resampled examples for
both entries, the difference recomputed on each, and a two-sided p-value of twice the smaller
share of resampled differences at or beyond zero on either side (with the +1 that keeps a
p-value from being 0). Each test reports the difference of the figures as its effect size, with
the difference's percentile interval; McNemar's adds the discordant counts and their odds ratio.
:func:`holm` adjusts the p-values of all the tests one command makes (Holm's step-down).
"""

import math
import re
from dataclasses import asdict, dataclass
from functools import partial
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

RESAMPLES = 1000
SEED = 0
LEVEL = 0.95

Statistic = Callable[[np.ndarray], float]

# per-example hits: a mean of 0/1, compared with McNemar's test
ACCURACIES = ('emo_acc', 'emo_acc@2', 'emo_acc@5', 'p@1,100', 'p@1,100_shuffled', 'reply_emotion_acc')
# counts of distinct things: their resamples are biased low (see the module's docstring)
DEBIASED = ('dist-1', 'dist-2', 'dist-1_nltk', 'dist-2_nltk', 'distinct_replies')
# the words of a gold reply for the per-word perplexity (``ppl_word``)
WORD_PATTERN = re.compile(r'\w+|[^\w\s]')


def words(text: str) -> int:
    """The number of words of ``text`` under ``\\w+|[^\\w\\s]`` (ED's ``_comma_`` restored first)."""
    return len(WORD_PATTERN.findall(text.replace('_comma_', ',')))


# ----- per-example statistics kept in place of the text -------------------------------------------
def _bleu_row(reply: str, gold: str, config) -> List[int]:
    from parlai_empathy.metrics import bleu

    stats = bleu.BleuStats.of_pair(reply, gold, config)
    return [stats.sys_len, stats.ref_len, *stats.correct, *stats.total]


def _local_ids(items: Sequence[Sequence], table: Dict) -> List[List[int]]:
    return [[table.setdefault(x, len(table)) for x in item] for item in items]


def item_statistics(replies: Sequence[str], golds: Sequence[str]) -> List[Dict]:
    """What the bootstrap and the paired tests need of each reply, without its text: sacrebleu's
    statistics (``bleu``: cased; ``bleu_lc``: lowercased; each [reply length, gold length, matches
    of orders 1-4, n-grams of orders 1-4]), the reply's 1- and 2-grams on the suite's tokens
    (``ng``) and on nltk's (``ng_nltk``) as ids that mean something only within these replies, and
    the reply's id among them (``reply_id``)."""
    from parlai_empathy.metrics import bleu, distinct

    tables = {key: {} for key in ('ng1', 'ng2', 'nltk1', 'nltk2', 'reply')}
    out = []
    for reply, gold in zip(replies, golds):
        suite, nltk = distinct.tokens(reply), distinct.nltk_tokens(reply)
        out.append(
            {
                'bleu': _bleu_row(reply, gold, bleu.AVG_BLEU),
                'bleu_lc': _bleu_row(reply, gold, bleu.AVG_BLEU_LC),
                'ng': [_local_ids([distinct.ngrams(suite, n)], tables[f'ng{n}'])[0] for n in (1, 2)],
                'ng_nltk': [_local_ids([distinct.ngrams(nltk, n)], tables[f'nltk{n}'])[0] for n in (1, 2)],
                'reply_id': tables['reply'].setdefault(reply, len(tables['reply'])),
                'reply_tokens': len(suite),
            }
        )
    return out


def prepared(rows: Sequence[Mapping]) -> List[Mapping]:
    """``rows`` with the :func:`item_statistics` of those that have their text, computed once for
    every figure (the rows that have them already, or no text, as they are)."""
    todo = [i for i, r in enumerate(rows) if _has_text(r) and r.get('bleu') is None]
    if not todo:
        return list(rows)
    out = list(rows)
    stats = item_statistics([rows[i]['reply'] for i in todo], [rows[i]['gold'] for i in todo])
    for i, extra in zip(todo, stats):
        out[i] = {**rows[i], **extra}
    return out


# ----- one statistic per figure ---------------------------------------------------------------------
def _has_text(row: Mapping) -> bool:
    return row.get('reply') is not None and row.get('gold') is not None


def _bleu_matrix(rows: Sequence[Mapping], lowercase: bool) -> np.ndarray:
    from parlai_empathy.metrics import bleu

    key, config = ('bleu_lc', bleu.AVG_BLEU_LC) if lowercase else ('bleu', bleu.AVG_BLEU)
    return np.array(
        [r[key] if r.get(key) is not None else _bleu_row(r['reply'], r['gold'], config) for r in rows], dtype=np.int64
    ).reshape(len(rows), 10)


def _bleu_statistic(matrix: np.ndarray, kind: str) -> Statistic:
    from parlai_empathy.metrics import bleu

    n = len(matrix)

    def statistic(indices):
        sums = np.bincount(indices, minlength=n) @ matrix
        stats = bleu.BleuStats(
            int(sums[0]), int(sums[1]), tuple(int(x) for x in sums[2:6]), tuple(int(x) for x in sums[6:10])
        )
        if kind == 'avg_bleu':
            return stats.avg_bleu()
        if kind == 'avg_bleu_lc':
            return stats.avg_bleu(bleu.AVG_BLEU_LC)
        if kind == 'multi_bleu':
            return stats.bleu(bleu.MAX_ORDER, bleu.MULTI_BLEU)
        return stats.bleu(int(kind[-1]))

    return statistic


def _ngram_ids(rows: Sequence[Mapping], n: int, nltk: bool) -> List[List]:
    from parlai_empathy.metrics import distinct

    key = 'ng_nltk' if nltk else 'ng'
    tokenize = distinct.nltk_tokens if nltk else distinct.tokens
    table: Dict = {}
    return [
        r[key][n - 1] if r.get(key) is not None else _local_ids([distinct.ngrams(tokenize(r['reply']), n)], table)[0]
        for r in rows
    ]


def _distinct_statistic(grams: List[List]) -> Statistic:
    """Corpus Distinct-n: each resampled reply's n-grams count as often as it is drawn, and a
    distinct n-gram once however many replies hold it."""
    n = len(grams)
    owner = np.repeat(np.arange(n), [len(g) for g in grams])
    ids = np.array([x for g in grams for x in g], dtype=np.int64)
    size = int(ids.max()) + 1 if len(ids) else 1

    def statistic(indices):
        drawn = np.bincount(indices, minlength=n)
        weight = drawn[owner]
        total = weight.sum()
        if not total:
            return 0.0
        return float(np.count_nonzero(np.bincount(ids, weights=weight, minlength=size))) / float(total)

    return statistic


def _utterance_distinct_statistic(grams: List[List]) -> Statistic:
    ratios = np.array([len(set(g)) / len(g) if g else 0.0 for g in grams])
    has = np.array([1.0 if g else 0.0 for g in grams])
    n = len(grams)

    def statistic(indices):
        drawn = np.bincount(indices, minlength=n)
        counted = drawn @ has
        return float(drawn @ ratios / counted) if counted else 0.0

    return statistic


def _count_distinct_statistic(ids: Sequence[int]) -> Statistic:
    ids = np.asarray(ids, dtype=np.int64)
    return lambda indices: float(len(np.unique(ids[indices])))


def _mean_statistic(values: Sequence[float]) -> Statistic:
    values = np.asarray(values, dtype=np.float64)
    return lambda indices: float(values[indices].mean())


def _ppl_statistic(nll: Sequence[float], count: Sequence[float], per_example: bool) -> Statistic:
    nll, count = np.asarray(nll, dtype=np.float64), np.asarray(count, dtype=np.float64)
    if per_example:
        per = nll / np.maximum(count, 1)
        return lambda indices: math.exp(per[indices].mean())
    return lambda indices: math.exp(nll[indices].sum() / max(count[indices].sum(), 1))


def _text_or(field: str) -> Callable[[Mapping], bool]:
    return lambda r: r.get(field) is not None or _has_text(r)


def _fields(*names: str) -> Callable[[Mapping], bool]:
    return lambda r: all(r.get(name) is not None for name in names)


def _reply_tokens(rows):
    from parlai_empathy.metrics import distinct

    return [r['reply_tokens'] if r.get('reply_tokens') is not None else len(distinct.tokens(r['reply'])) for r in rows]


def _reply_ids(rows):
    if all(r.get('reply_id') is not None for r in rows):
        return [r['reply_id'] for r in rows]
    table: Dict[str, int] = {}
    return [table.setdefault(r['reply'], len(table)) for r in rows]


def _bleu_figure(rows, kind, lowercase):
    return _bleu_statistic(_bleu_matrix(rows, lowercase), kind)


def _distinct_figure(rows, n, nltk):
    return _distinct_statistic(_ngram_ids(rows, n, nltk))


def _utterance_figure(rows, n):
    return _utterance_distinct_statistic(_ngram_ids(rows, n, False))


def _ppl_figure(rows, nll, count, per_example):
    return _ppl_statistic([r[nll] for r in rows], [r[count] for r in rows], per_example)


def _mean_figure(rows, key):
    return _mean_statistic([float(r[key]) for r in rows])


# figure -> (which examples carry it, the statistic built on those examples' rows)
FIGURES: Dict[str, Tuple[Callable[[Mapping], bool], Callable[[Sequence[Mapping]], Statistic]]] = {
    **{
        key: (_text_or('bleu'), partial(_bleu_figure, kind=key, lowercase=False))
        for key in ('avg_bleu', 'corpus_bleu-1', 'corpus_bleu-2', 'corpus_bleu-3', 'corpus_bleu-4')
    },
    **{
        key: (_text_or('bleu_lc'), partial(_bleu_figure, kind=key, lowercase=True))
        for key in ('multi_bleu', 'avg_bleu_lc')
    },
    **{f'dist-{n}': (_text_or('ng'), partial(_distinct_figure, n=n, nltk=False)) for n in (1, 2)},
    **{f'dist-{n}_nltk': (_text_or('ng_nltk'), partial(_distinct_figure, n=n, nltk=True)) for n in (1, 2)},
    **{f'utt_dist-{n}': (_text_or('ng'), partial(_utterance_figure, n=n)) for n in (1, 2)},
    'distinct_replies': (_text_or('reply_id'), lambda rows: _count_distinct_statistic(_reply_ids(rows))),
    'reply_tokens': (_text_or('reply_tokens'), lambda rows: _mean_statistic(_reply_tokens(rows))),
    'bertscore_f': (_fields('bertscore_f'), partial(_mean_figure, key='bertscore_f')),
    'ppl': (_fields('nll', 'tokens'), partial(_ppl_figure, nll='nll', count='tokens', per_example=False)),
    'ppl_ex': (_fields('nll', 'tokens'), partial(_ppl_figure, nll='nll', count='tokens', per_example=True)),
    'ppl_gold': (
        _fields('nll_gold', 'tokens'),
        partial(_ppl_figure, nll='nll_gold', count='tokens', per_example=False),
    ),
    'ppl_ex_gold': (
        _fields('nll_gold', 'tokens'),
        partial(_ppl_figure, nll='nll_gold', count='tokens', per_example=True),
    ),
    'ppl_word': (
        _fields('nll_reply', 'words'),
        partial(_ppl_figure, nll='nll_reply', count='words', per_example=False),
    ),
    **{key: (_fields(key), partial(_mean_figure, key=key)) for key in ACCURACIES},
}


def figure_rows(rows: Sequence[Mapping], key: str) -> List[Mapping]:
    """The rows that carry figure ``key`` (none for a figure with no per-example statistic)."""
    if key not in FIGURES:
        return []
    carries, _ = FIGURES[key]
    return [r for r in rows if carries(r)]


def percentile_interval(
    statistic: Statistic,
    n: int,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
    debias: bool = False,
) -> Tuple[float, float]:
    """(low, high) of ``statistic(indices)`` over ``resamples`` draws of ``n`` indices; with
    ``debias`` moved by the bootstrap's bias estimate (figure minus the resamples' mean)."""
    rng = np.random.default_rng(seed)
    values = np.array([statistic(rng.integers(0, n, n)) for _ in range(resamples)])
    tail = (1.0 - level) / 2 * 100
    shift = statistic(np.arange(n)) - values.mean() if debias else 0.0
    return float(np.percentile(values, tail) + shift), float(np.percentile(values, 100 - tail) + shift)


def intervals(
    rows: List[Mapping], keys: Optional[Sequence[str]] = None, resamples: int = RESAMPLES, seed: int = SEED
) -> Dict[str, List[float]]:
    """95% intervals of every figure ``rows`` support (``keys`` limits which): ``{figure: [low, high]}``."""
    result = {}
    rows = prepared(rows)
    for key, (_, build) in FIGURES.items():
        if keys is not None and key not in keys:
            continue
        carried = figure_rows(rows, key)
        if not carried:
            continue
        low, high = percentile_interval(build(carried), len(carried), resamples, seed, debias=key in DEBIASED)
        result[key] = [low, high]
    return result


# ----- classifiers ------------------------------------------------------------------------------------------
def _f1_statistic(rows: Sequence[Mapping], predicted_key: str, classes: Sequence[str], macro: bool) -> Statistic:
    """Macro- or micro-F1 of a classifier's outputs (multi-label golds and predictions are
    comma-separated), as ``evidence.label_f1`` computes it: every class of ``classes`` and every
    label the outputs hold counts in the macro mean, a class with nothing scores 0."""
    from parlai_empathy.data.goemotions import split_labels

    golds = [set(split_labels(r['gold'])) for r in rows]
    predicted = [set(split_labels(r[predicted_key])) if r.get(predicted_key) else set() for r in rows]
    labels = {
        label: i
        for i, label in enumerate(
            dict.fromkeys([*classes, *(x for g in golds for x in g), *(x for p in predicted for x in p)])
        )
    }
    counts = np.zeros((3, len(rows), len(labels)))  # true positives, false positives, false negatives
    for i, (gold, guess) in enumerate(zip(golds, predicted)):
        for label in gold | guess:
            j = labels[label]
            counts[0, i, j] += label in gold and label in guess
            counts[1, i, j] += label in guess and label not in gold
            counts[2, i, j] += label in gold and label not in guess
    n = len(rows)

    def statistic(indices):
        tp, fp, fn = np.bincount(indices, minlength=n) @ counts
        if not macro:
            denominator = 2 * tp.sum() + fp.sum() + fn.sum()
            return float(2 * tp.sum() / denominator) if denominator else 0.0
        denominator = 2 * tp + fp + fn
        return float(np.mean(np.divide(2 * tp, denominator, out=np.zeros_like(tp), where=denominator > 0)))

    return statistic


def classifier_intervals(
    rows: List[Mapping],
    classes: Sequence[str],
    keys: Optional[Sequence[str]] = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Dict[str, List[float]]:
    """95% intervals of a classifier row's figures over its test examples: accuracy (single-label
    rows), macro- and micro-F1 (and their ``_tuned`` twins from ``predicted_tuned``)."""
    statistics: Dict[str, Statistic] = {}
    if rows and all(',' not in r['gold'] for r in rows) and not any(r.get('predicted_tuned') for r in rows):
        statistics['accuracy'] = _mean_statistic([float(r['gold'] == r['predicted']) for r in rows])
    for suffix, predicted_key in (('', 'predicted'), ('_tuned', 'predicted_tuned')):
        if any(predicted_key in r for r in rows):
            statistics['macro_f1' + suffix] = _f1_statistic(rows, predicted_key, classes, True)
            statistics['micro_f1' + suffix] = _f1_statistic(rows, predicted_key, classes, False)
    return {
        key: list(percentile_interval(statistic, len(rows), resamples, seed))
        for key, statistic in statistics.items()
        if keys is None or key in keys
    }


# ----- rows read from a file ------------------------------------------------------------------------
def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _counts(value, length: Optional[int] = None) -> bool:
    return (
        isinstance(value, list)
        and (length is None or len(value) == length)
        and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value)
    )


# what each per-example field must hold for the statistics above
_FIELD_CHECKS: Dict[str, Tuple[Callable[[object], bool], str]] = {
    'id': (lambda v: isinstance(v, str) and 0 < len(v) <= 200, 'a string of 1-200 characters'),
    'reply': (lambda v: isinstance(v, str), 'a string'),
    'gold': (lambda v: isinstance(v, str), 'a string'),
    'bleu': (lambda v: _counts(v, 10), 'a list of 10 counts'),
    'bleu_lc': (lambda v: _counts(v, 10), 'a list of 10 counts'),
    'ng': (lambda v: isinstance(v, list) and len(v) == 2 and all(_counts(x) for x in v), 'two lists of ids'),
    'ng_nltk': (lambda v: isinstance(v, list) and len(v) == 2 and all(_counts(x) for x in v), 'two lists of ids'),
    'reply_id': (lambda v: _counts([v]), 'a count'),
    'reply_tokens': (lambda v: _counts([v]), 'a count'),
    'tokens': (lambda v: _number(v) and v > 0, 'a positive number'),
    'words': (lambda v: _number(v) and v > 0, 'a positive number'),
    'nll': (lambda v: _number(v) and v >= 0, 'a finite number >= 0'),
    'nll_gold': (lambda v: _number(v) and v >= 0, 'a finite number >= 0'),
    'nll_reply': (lambda v: _number(v) and v >= 0, 'a finite number >= 0'),
    'nll_end': (lambda v: _number(v) and v >= 0, 'a finite number >= 0'),
    'bertscore_f': (_number, 'a finite number'),
    **{key: (lambda v: isinstance(v, bool) or (isinstance(v, int) and v in (0, 1)), '0 or 1') for key in ACCURACIES},
}


def check_rows(rows: Sequence, where: str) -> None:
    """Refuse per-example rows the statistics cannot use, naming ``where``, the line and the field
    (a row is a file's line); fields none of them reads are left alone."""
    for line_no, row in enumerate(rows, start=1):
        if not isinstance(row, Mapping):
            raise ValueError(f'{where}, line {line_no}: not a JSON object')
        for field, (ok, expected) in _FIELD_CHECKS.items():
            value = row.get(field)
            if value is not None and not ok(value):
                raise ValueError(f'{where}, line {line_no}, field {field!r}: {str(value)[:40]!r} is not {expected}')
        if row.get('id') is None:
            raise ValueError(f"{where}, line {line_no}, field 'id': missing (examples are paired by id)")


# ----- paired tests ------------------------------------------------------------------------------------
@dataclass
class PairedTest:
    """One figure of two entries compared on the examples both have."""

    metric: str
    a: str
    b: str
    examples: int
    value_a: float
    value_b: float
    difference: float  # value_a - value_b: the effect size
    low: float  # the difference's percentile interval
    high: float
    test: str  # 'paired bootstrap' or 'McNemar exact'
    p: float
    resamples: int
    seed: int
    p_holm: Optional[float] = None
    a_only: Optional[int] = None  # McNemar: examples A gets right and B wrong
    b_only: Optional[int] = None
    odds_ratio: Optional[float] = None  # a_only / b_only

    def to_json(self) -> Dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def _common(rows_a: Sequence[Mapping], rows_b: Sequence[Mapping], key: str) -> Tuple[List[Mapping], List[Mapping]]:
    by_id = {r['id']: r for r in figure_rows(rows_b, key) if r.get('id') is not None}
    pairs = [(r, by_id[r['id']]) for r in figure_rows(rows_a, key) if r.get('id') in by_id]
    return [a for a, _ in pairs], [b for _, b in pairs]


def mcnemar(hits_a: Sequence[float], hits_b: Sequence[float]) -> Tuple[int, int, float]:
    """(A right and B wrong, A wrong and B right, McNemar's exact two-sided p-value)."""
    from scipy.stats import binomtest

    a = np.asarray(hits_a, dtype=bool)
    b = np.asarray(hits_b, dtype=bool)
    a_only, b_only = int(np.sum(a & ~b)), int(np.sum(~a & b))
    p = binomtest(a_only, a_only + b_only, 0.5).pvalue if a_only + b_only else 1.0
    return a_only, b_only, float(p)


def paired_test(
    rows_a: Sequence[Mapping],
    rows_b: Sequence[Mapping],
    key: str,
    names: Tuple[str, str] = ('A', 'B'),
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
) -> Optional[PairedTest]:
    """Figure ``key`` of two entries on the examples both carry it for (``None`` when there are none)."""
    common_a, common_b = _common(rows_a, rows_b, key)
    n = len(common_a)
    if not n:
        return None
    build = FIGURES[key][1]
    stat_a, stat_b = build(common_a), build(common_b)
    everything = np.arange(n)
    value_a, value_b = stat_a(everything), stat_b(everything)
    rng = np.random.default_rng(seed)
    differences = np.empty(resamples)
    for i in range(resamples):
        indices = rng.integers(0, n, n)
        differences[i] = stat_a(indices) - stat_b(indices)
    if key in DEBIASED:  # each side's resamples are biased low: centre the differences as the figures are
        differences += (value_a - value_b) - differences.mean()
    tail = (1.0 - level) / 2 * 100
    low, high = float(np.percentile(differences, tail)), float(np.percentile(differences, 100 - tail))
    result = PairedTest(
        key,
        names[0],
        names[1],
        n,
        value_a,
        value_b,
        value_a - value_b,
        low,
        high,
        'paired bootstrap',
        0.0,
        resamples,
        seed,
    )
    if key in ACCURACIES:
        a_only, b_only, p = mcnemar([r[key] for r in common_a], [r[key] for r in common_b])
        result.test, result.p, result.a_only, result.b_only = 'McNemar exact', p, a_only, b_only
        result.odds_ratio = a_only / b_only if b_only else (math.inf if a_only else None)
    else:
        at_or_below = int(np.sum(differences <= 0))
        at_or_above = int(np.sum(differences >= 0))
        result.p = min(1.0, 2 * (min(at_or_below, at_or_above) + 1) / (resamples + 1))
    return result


def holm(p_values: Sequence[float]) -> List[float]:
    """Holm's step-down adjustment: the k-th smallest of m p-values times (m - k + 1), made
    non-decreasing in that order and capped at 1."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def compare(
    entries: Sequence[Tuple[str, Sequence[Mapping]]],
    keys: Optional[Sequence[str]] = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> List[PairedTest]:
    """Every pair of ``entries`` (name, per-example rows) on every figure both support (``keys``
    limits which), with Holm's adjustment over all the tests made here."""
    tests = []
    entries = [(name, prepared(rows)) for name, rows in entries]
    for i, (name_a, rows_a) in enumerate(entries):
        for name_b, rows_b in entries[i + 1 :]:
            for key in FIGURES:
                if keys is not None and key not in keys:
                    continue
                test = paired_test(rows_a, rows_b, key, (name_a, name_b), resamples, seed)
                if test is not None:
                    tests.append(test)
    for test, adjusted in zip(tests, holm([t.p for t in tests])):
        test.p_holm = adjusted
    return tests
