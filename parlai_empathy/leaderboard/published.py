"""Other systems' released ED test outputs, scored beside our rows with the same suite.

:func:`score_outputs` aligns a file's replies with the ED test examples
(:mod:`parlai_empathy.metrics.alignment`), scores the matched ones against the same gold replies
our rows are scored on, with :func:`parlai_empathy.metrics.suite.score_examples` and its
comparison figures, and, given an emotion classifier of ours, the emotion it detects in each reply
against the example's gold emotion (``reply_emotion_acc``: a property of the reply text, not the
system's own emotion accuracy, which needs the system).

:func:`write_row` writes the evidence of a ``published`` board row into ``<artifacts>/<entry>/``:
the report, the alignment (counts, and every output not matched, by source line), the
per-example figures that need a model (BERTScore, the detected emotion, the reply length) keyed
by ED example id, and the meta file naming the released file (repository, commit, path,
sha256). The replies themselves stay in their repository: the row's plan fetches them again.
"""

import datetime
import os
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from parlai_empathy.evidence import artifacts as evidence
from parlai_empathy.leaderboard.records import Meta, Report
from parlai_empathy.metrics.alignment import Alignment, align, example_id
from parlai_empathy.metrics.bootstrap import intervals, item_statistics
from parlai_empathy.metrics.released import FORMATS, ReleasedFile, ReleasedOutput, read_released
from parlai_empathy.metrics.suite import ScoredExample, SuiteReport, score_examples

KIND = 'published'
ALIGNMENT = 'alignment.json'
PUBLISHED_ROW_FILES = (evidence.REPORT, evidence.OUTPUTS, evidence.META, ALIGNMENT)


@dataclass
class PublishedScore:
    report: SuiteReport
    alignment: Alignment
    rows: List[Dict]  # per matched example, for outputs.jsonl.gz
    seconds: float


def read_any(path: str, fmt: str) -> List[ReleasedOutput]:
    """A released format (:data:`FORMATS`), or our own world logs / TSV as released outputs
    (the context split into turns at newlines, the gold as the file's reference)."""
    if fmt in FORMATS:
        return read_released(path, fmt)
    from parlai_empathy.metrics.saved_outputs import read_outputs

    return [
        ReleasedOutput(tuple(e.context.split('\n')), e.response or '', e.gold, e.emotion, e.source)
        for e in read_outputs(path, fmt)
    ]


def detect_emotions(classifier_file: str, texts: Sequence[str]) -> List[str]:
    """The top emotion an emotion classifier of ours gives each text."""
    from parlai_empathy.emotions.classifier_files import default_device, load_classifier
    from parlai_empathy.emotions.inference import predict_all

    classifier = load_classifier(classifier_file, default_device())
    if classifier.multilabel:
        raise ValueError(
            f'{classifier_file}: a multi-label classifier; the reply emotion is compared with one gold '
            'ED emotion, so it needs a single-label ED classifier (e.g. the ed32_utterance row)'
        )
    probs, _ = predict_all(classifier, list(texts))
    return [classifier.classes[i] for i in probs.argmax(1)]


def score_outputs(
    outputs: Sequence[ReleasedOutput], examples, scorer=None, classifier_file: Optional[str] = None
) -> PublishedScore:
    start = time.time()
    alignment = align(outputs, examples)
    pairs = alignment.pairs
    if not pairs:
        raise ValueError(
            f'no output matched an ED test example ({alignment.summary()}): not ED test outputs, or another split'
        )
    if all(o.predicted_emotion is not None for o, _ in pairs):
        return _score_emotions(alignment, start)
    responses = [o.response for o, _ in pairs]
    golds = [e.label for _, e in pairs]
    bertscores = scorer.f1(responses, golds) if scorer is not None else [None] * len(pairs)
    detected = detect_emotions(classifier_file, responses) if classifier_file else [None] * len(pairs)
    scored = [
        ScoredExample(
            context='\n'.join(e.context_utterances),
            gold=e.label,
            response=o.response,
            emotion=e.emotion,
            reply_emotion=d,
            bertscore_f=b,
            source=o.source,
        )
        for (o, e), d, b in zip(pairs, detected, bertscores)
    ]
    report = score_examples(scored, comparison=True)
    if scorer is not None:
        report.notes['bertscore_f'] = scorer.describe()
    if classifier_file:
        report.notes['reply_emotion_acc'] = (
            'share of replies in which the emotion classifier detects the '
            "example's gold ED emotion (top-1 of 32): a property of the reply "
            "text, not the system's emotion accuracy"
        )
    from parlai_empathy.metrics.distinct import tokens

    rows = []
    statistics = item_statistics(responses, golds)
    for (o, e), d, b, stats in zip(pairs, detected, bertscores, statistics):
        row = {
            'id': example_id(e),
            'source': os.path.basename(o.source),
            'emotion': e.emotion,
            'reply_tokens': len(tokens(o.response)),
            **stats,
        }
        if b is not None:
            row['bertscore_f'] = b
        if d is not None:
            row['reply_emotion'], row['reply_emotion_acc'] = d, int(d == e.emotion)
        rows.append(row)
    return PublishedScore(report, alignment, rows, time.time() - start)


def _score_emotions(alignment: Alignment, start: float) -> PublishedScore:
    """A file of emotion predictions (no replies): the share of matched test examples whose gold
    ED emotion the system named (``emo_acc``, as our generators' top-1 emotion accuracy; an answer
    naming none of the 32 labels is a miss)."""
    rows = [
        {
            'id': example_id(e),
            'source': os.path.basename(o.source),
            'emotion': e.emotion,
            'predicted_emotion': o.predicted_emotion,
            'emo_acc': int(o.predicted_emotion == e.emotion),
        }
        for o, e in alignment.pairs
    ]
    unnamed = sum(not r['predicted_emotion'] for r in rows)
    report = SuiteReport(
        {'emo_acc': sum(r['emo_acc'] for r in rows) / len(rows)},
        {'emo_acc': len(rows)},
        {
            'emo_acc': "share of matched test examples whose gold ED emotion the system's answer names (its first "
            'quoted ED label, else its first ED label written as a word); '
            f'{unnamed} of {len(rows)} answers name none of the 32 and count as misses'
        },
    )
    return PublishedScore(report, alignment, rows, time.time() - start)


def add_item_statistics(row_dir: str, outputs: Sequence[ReleasedOutput], examples) -> int:
    """Add the per-example statistics of :func:`~parlai_empathy.metrics.bootstrap.item_statistics`
    to a committed row's ``outputs.jsonl.gz`` from its released file, keeping every figure the row
    has (BERTScore and the detected emotion need models; these statistics need only the text).
    The file must match the same examples the row has, in the same order; returns how many."""
    path = os.path.join(row_dir, evidence.OUTPUTS)
    rows = evidence.read_outputs(path)
    pairs = align(outputs, examples).pairs
    ids = [example_id(e) for _, e in pairs]
    if ids != [r.get('id') for r in rows]:
        raise ValueError(
            f'{path}: its {len(rows)} examples are not the {len(ids)} this file matches: '
            'not the file the row was scored from'
        )
    statistics = item_statistics([o.response for o, _ in pairs], [e.label for _, e in pairs])
    return evidence.write_outputs(path, [dict(row, **stats) for row, stats in zip(rows, statistics)])


def write_row(
    row_dir: str, entry: str, score: PublishedScore, command: str, released: Optional[ReleasedFile] = None
) -> Dict[str, str]:
    """The four files of a ``published`` row (:data:`PUBLISHED_ROW_FILES`)."""
    os.makedirs(row_dir, exist_ok=True)
    places = evidence.path_placeholders()
    report = Report(
        entry=entry,
        kind=KIND,
        values=score.report.values,
        exs=score.report.counts,
        commands=[command],
        notes=score.report.notes,
        ci95=intervals(score.rows, keys=list(score.report.values)) or None,
    )
    meta = Meta(
        entry=entry,
        code=evidence.code_version(),
        machine=evidence.machine(),
        evaluated=datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
        evaluation_seconds=round(score.seconds, 1),
        evaluation_command=command,
        examples=len(score.rows),
        alignment=score.alignment.counts(),
        released=released.to_json() if released else None,
        label=released.label if released else None,
    )
    paths = {name: os.path.join(row_dir, name) for name in PUBLISHED_ROW_FILES}
    evidence.write_json(paths[evidence.REPORT], evidence.portable(report.to_json(), places))
    evidence.write_outputs(paths[evidence.OUTPUTS], score.rows)
    evidence.write_json(paths[evidence.META], evidence.portable(meta.to_json(), places))
    evidence.write_json(paths[ALIGNMENT], score.alignment.to_json())
    return paths
