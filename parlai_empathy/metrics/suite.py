"""One entry point that scores a list of model outputs with the whole suite, offline.

It records every example through the very same ParlAI ``Metric`` objects the agents record during
``parlai eval_model`` (:mod:`.parlai_metrics`) and reads the values off ParlAI's ``Metrics``
aggregator, so offline and live figures are the same numbers by construction.

A leaderboard calls :func:`score_examples` (outputs in hand) or :func:`suite_values` (a saved
``eval_model`` report) and gets the same :data:`COLUMNS` either way.
"""

import json
import math
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

from parlai_empathy.metrics import bleu
from parlai_empathy.metrics.bertscore import METRIC as BERTSCORE_METRIC
from parlai_empathy.metrics.bertscore import BertScore
from parlai_empathy.metrics.emotion import TOP_KS
from parlai_empathy.metrics.emotion import metric_name as emotion_metric_name
from parlai_empathy.metrics.retrieval import METRIC as P_AT_1_100
from parlai_empathy.metrics.retrieval import NUM_CANDIDATES
from parlai_empathy.metrics.retrieval import SHUFFLED_METRIC as P_AT_1_100_SHUFFLED

# Report order: the leaderboard's columns.
COLUMNS = (
    [
        'avg_bleu',
        'corpus_bleu-1',
        'corpus_bleu-2',
        'corpus_bleu-3',
        'corpus_bleu-4',
        'multi_bleu',
        'dist-1',
        'dist-2',
        'utt_dist-1',
        'utt_dist-2',
        'dist-1_nltk',
        'dist-2_nltk',
        BERTSCORE_METRIC,
        'ppl',
        'ppl_ex',
        'ppl_gold',
        'ppl_ex_gold',
        'ppl_word',
    ]
    + [emotion_metric_name(k) for k in TOP_KS]
    + [P_AT_1_100, P_AT_1_100_SHUFFLED]
)
# Offline only (``score_examples(..., comparison=True)``, what ``parlai empathy_score`` prints):
# the figures that set the suite beside the papers' own definitions, and the emotion a classifier
# of ours detects in each reply. ``dist-n_nltk`` are in COLUMNS already (ETHREED records them live).
REPLY_EMOTION = 'reply_emotion_acc'
COMPARISON_COLUMNS = ['avg_bleu_lc', 'reply_tokens', 'distinct_replies', REPLY_EMOTION]
COLUMNS = COLUMNS + COMPARISON_COLUMNS
DISTINCT_TOKENIZER = 'lowercase + sacrebleu 13a tokenizer'


@dataclass
class ScoredExample:
    """One model output to score. Only the fields a model produces need to be set.

    ``source`` (e.g. ``file:line``) names the example in error messages.
    ``label_ppl``/``label_tokens`` carry ParlAI's per-example ppl and label length, when saved.
    """

    context: str
    gold: str
    response: Optional[str] = None
    emotion: Optional[str] = None
    emotion_scores: Optional[Mapping[str, float]] = None
    ranked_candidates: Optional[List[str]] = None
    num_candidates: Optional[int] = None
    label_ppl: Optional[float] = None
    label_tokens: Optional[float] = None
    reply_emotion: Optional[str] = None  # what an emotion classifier detects in ``response``
    bertscore_f: Optional[float] = None  # the response's BERTScore F1, when already computed
    source: str = ''


@dataclass
class SuiteReport:
    """Suite figures in :data:`COLUMNS` order, with what is needed to reproduce them."""

    values: Dict[str, float]
    counts: Dict[str, int]
    notes: Dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> Dict:
        return {'metrics': self.values, 'counts': self.counts, 'notes': self.notes}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def table(self) -> str:
        """A Markdown table of the figures, then the settings that produced them."""
        lines = ['| metric | value | examples |', '|---|---|---|']
        for key, value in self.values.items():
            lines.append(f'| {key} | {value:.4f} | {self.counts.get(key, "")} |')
        lines.append('')
        lines.extend(f'{key}: {note}' for key, note in self.notes.items())
        return '\n'.join(lines)


def settings_notes(scorer: Optional[BertScore] = None, comparison: bool = False) -> Dict[str, str]:
    notes = dict(bleu.signatures())
    notes['dist'] = f'corpus Distinct-n (dist-n) and per-utterance mean (utt_dist-n); tokens: {DISTINCT_TOKENIZER}'
    if comparison:
        notes.update(bleu.lowercased_signature())
        notes['dist-n_nltk'] = "corpus Distinct-n on nltk word tokens of the lowercased reply (ETHREED's tokens)"
        notes['reply_tokens'] = f'mean reply length in {DISTINCT_TOKENIZER} tokens'
        notes['distinct_replies'] = 'number of different reply strings'
    if scorer is not None:
        notes[BERTSCORE_METRIC] = scorer.describe()
    return notes


def _record_example(tracker, example: ScoredExample, comparison: bool = False) -> None:
    from parlai.core.metrics import AverageMetric

    from parlai_empathy.metrics import parlai_metrics as pm

    where = f' ({example.source})' if example.source else ''
    try:
        if example.response is not None:
            pm.record_generation_metrics(tracker, example.gold, example.response)
            if comparison:
                for key, metric in pm.comparison_metrics(example.gold, example.response).items():
                    tracker.add(key, metric)
        if example.reply_emotion is not None:
            if example.emotion is None:
                raise ValueError('a detected reply emotion but no gold emotion')
            tracker.add(REPLY_EMOTION, AverageMetric(example.reply_emotion == example.emotion, 1))
        if example.emotion_scores is not None:
            if example.emotion is None:
                raise ValueError('emotion scores given but no gold emotion')
            pm.record_emotion_metrics(tracker, example.emotion_scores, example.emotion)
        if example.ranked_candidates is not None and example.num_candidates == NUM_CANDIDATES:
            pm.record_retrieval_metrics(tracker, example.ranked_candidates, example.gold, example.num_candidates)
    except ValueError as err:
        raise ValueError(f'{err}{where}') from None


def token_weighted_ppl(examples: Sequence[ScoredExample]) -> Optional[float]:
    """ParlAI's ppl rebuilt from per-example ppl and label length (exact without label truncation)."""
    pairs = [(e.label_ppl, e.label_tokens) for e in examples]
    if not pairs or any(p is None or t is None for p, t in pairs):
        return None
    tokens = sum(t for _, t in pairs)
    if tokens == 0:
        return None
    return math.exp(sum(math.log(p) * t for p, t in pairs) / tokens)


def score_examples(
    examples: Iterable[ScoredExample],
    scorer: Optional[BertScore] = None,
    progress: bool = False,
    comparison: bool = False,
) -> SuiteReport:
    """Score model outputs with every metric that applies to them; with ``comparison``, also
    the :data:`COMPARISON_COLUMNS` and ``dist-n_nltk``."""
    from parlai.core.metrics import AverageMetric, Metrics

    examples = list(examples)
    tracker = Metrics()
    iterator = examples
    if progress:
        from tqdm import tqdm

        iterator = tqdm(examples, desc='scoring', unit='ex')
    for example in iterator:
        _record_example(tracker, example, comparison)
    generated = [e for e in examples if e.response is not None]
    f1s = []
    if generated and all(e.bertscore_f is not None for e in generated):
        f1s = [e.bertscore_f for e in generated]
    elif scorer is not None and generated:
        f1s = scorer.f1([e.response for e in generated], [e.gold for e in generated])
    if f1s:
        for f1 in f1s:
            tracker.add(BERTSCORE_METRIC, AverageMetric(f1, 1))
    report = tracker.report()
    values = {key: float(report[key].value()) for key in COLUMNS if key in report}
    if comparison and generated:
        values['distinct_replies'] = float(len({e.response for e in generated}))
    ppl = token_weighted_ppl(examples)
    if ppl is not None:
        values['ppl'] = ppl
    values = {key: values[key] for key in COLUMNS if key in values}
    counts = _counts(examples, values)
    return SuiteReport(values, counts, settings_notes(scorer, comparison))


def _counts(examples: Sequence[ScoredExample], values: Mapping[str, float]) -> Dict[str, int]:
    """How many examples each figure is computed over."""
    n_generated = sum(e.response is not None for e in examples)
    n_emotion = sum(e.emotion_scores is not None for e in examples)
    n_ranked = sum(e.ranked_candidates is not None and e.num_candidates == NUM_CANDIDATES for e in examples)
    n_detected = sum(e.reply_emotion is not None for e in examples)
    by_kind = {BERTSCORE_METRIC: n_generated, 'ppl': len(examples), P_AT_1_100: n_ranked, REPLY_EMOTION: n_detected}
    by_kind.update({emotion_metric_name(k): n_emotion for k in TOP_KS})
    return {key: by_kind.get(key, n_generated) for key in values}


def suite_values(report: Mapping[str, object]) -> Dict[str, float]:
    """The suite's columns from a ParlAI report (``eval_model``'s return or ``--report-filename``).

    Values may be ``Metric`` objects or plain floats (a saved JSON report).
    """
    values = {}
    for key in COLUMNS:
        if key in report:
            value = report[key]
            values[key] = float(value.value() if hasattr(value, 'value') else value)
    return values
