"""Reading saved model outputs for offline scoring: ParlAI world logs or a plain TSV.

* ``eval_model --world-logs FILE.jsonl`` writes one JSON object per episode,
  ``{"dialog": [[teacher_turn, model_turn], ...], "context": [...], ...}``
  (``parlai.utils.conversations.Conversations``). The gold is the teacher turn's ``eval_labels``
  (or ``labels``), the response is the model turn's ``text``. Optional fields used when present:
  teacher ``emotion``, ``context_utterances`` (the dialogue so far, for the context; else the
  teacher's ``text``) and ``label_candidates`` (their count), model ``emotion_scores``
  (label -> score), ``text_candidates`` (ranked) and ``metrics`` (``ppl``, ``llen``).
* TSV: ``context<TAB>gold<TAB>response`` per line; an optional header line with exactly those
  names is skipped; ``\\n`` inside the context stands for a newline.

A sharded evaluation (``multiprocessing_eval``/``distributed_eval --world-logs out.jsonl``) writes
one log per rank, ``out_0.jsonl``, ``out_1.jsonl``, ...; given ``out.jsonl`` when only those
exist, they are read together (rank 0 first).

Every problem is reported with the file, line and field. Both are read through the bounded
reader (:mod:`parlai_empathy.files.bounded`): a regular file within ``data_bytes``, lines within
``line_bytes`` (TSV) or ``log_line_bytes`` (world logs), cells within ``cell_chars``, JSON within
its nesting and digit caps; NaN, Infinity, NUL bytes and text that is not UTF-8 are refused.
"""

import os
from typing import List

from parlai_empathy.files.bounded import FileRefused, decode_utf8, iter_lines, loads_json
from parlai_empathy.files.caps import caps, describe
from parlai_empathy.metrics.suite import ScoredExample

TSV_HEADER = ['context', 'gold', 'response']


class OutputsFormatError(FileRefused):
    def __init__(self, path: str, line_no: int, field_name: str, problem: str):
        super().__init__(path, line_no, field_name, problem)


def rank_files(path: str) -> List[str]:
    """The per-rank logs ParlAI writes for ``--world-logs path`` in a sharded evaluation."""
    base, extension = os.path.splitext(path)
    found = []
    while os.path.isfile(f'{base}_{len(found)}{extension}'):
        found.append(f'{base}_{len(found)}{extension}')
    return found


def read_outputs(path: str, fmt: str = 'auto') -> List[ScoredExample]:
    """Read a world-log JSONL (``fmt='world_logs'``) or TSV (``'tsv'``); ``auto`` goes by suffix."""
    if not os.path.isfile(path):
        shards = rank_files(path)
        if not shards:
            base, extension = os.path.splitext(path)
            raise FileNotFoundError(
                f'outputs file not found: {path} (nor the per-rank logs of a sharded '
                f'evaluation, {base}_0{extension}, ...)'
            )
        return [example for shard in shards for example in read_outputs(shard, fmt)]
    if fmt == 'auto':
        fmt = 'world_logs' if path.endswith(('.jsonl', '.json')) else 'tsv'
    if fmt == 'world_logs':
        return read_world_logs(path)
    if fmt == 'tsv':
        return read_tsv(path)
    raise ValueError(f'unknown outputs format {fmt!r}: use world_logs, tsv or auto')


def read_tsv(path: str) -> List[ScoredExample]:
    examples = []
    cell_cap = caps().cell_chars
    for line_no, raw in iter_lines(path, 'TSV of outputs'):
        line = decode_utf8(raw, path, line_no).rstrip('\n').rstrip('\r')
        if not line:
            continue
        fields = line.split('\t')
        if line_no == 1 and fields == TSV_HEADER:
            continue
        if len(fields) != 3:
            raise OutputsFormatError(
                path, line_no, 'line', f'has {len(fields)} tab-separated fields, expected 3 (context, gold, response)'
            )
        for name, cell in zip(TSV_HEADER, fields):
            if len(cell) > cell_cap:
                raise OutputsFormatError(
                    path, line_no, name, f'{len(cell):,} characters, over the cap of {describe("cell_chars", cell_cap)}'
                )
        context, gold, response = fields
        examples.append(ScoredExample(context.replace('\\n', '\n'), gold, response, source=f'{path}:{line_no}'))
    return examples


def _gold(turn: dict, path: str, line_no: int) -> str:
    for key in ('eval_labels', 'labels'):
        labels = turn.get(key)
        if labels:
            if not isinstance(labels, list) or not isinstance(labels[0], str):
                raise OutputsFormatError(path, line_no, key, f'expected a list of strings, got {labels!r:.80}')
            return labels[0]
    raise OutputsFormatError(path, line_no, 'eval_labels', 'the teacher turn has no eval_labels or labels')


def _example_from_pair(pair, path: str, line_no: int) -> ScoredExample:
    if not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(t, dict) for t in pair):
        raise OutputsFormatError(path, line_no, 'dialog', 'each entry must be a [teacher turn, model turn] pair')
    teacher, model = pair
    response = model.get('text')
    if response is not None and not isinstance(response, str):
        raise OutputsFormatError(path, line_no, 'text', f'model response is not a string: {response!r:.80}')
    metrics = model.get('metrics') or {}
    if not isinstance(metrics, dict):
        raise OutputsFormatError(path, line_no, 'metrics', f'expected an object of figures, got {metrics!r:.80}')
    for key in ('ppl', 'llen'):
        if metrics.get(key) is not None and (
            isinstance(metrics[key], bool) or not isinstance(metrics[key], (int, float))
        ):
            raise OutputsFormatError(path, line_no, f'metrics.{key}', f'not a number: {metrics[key]!r:.80}')
    candidates = teacher.get('label_candidates')
    context = teacher.get('context_utterances')  # the ED teachers' whole dialogue so far
    if context is not None and not (isinstance(context, list) and all(isinstance(turn, str) for turn in context)):
        raise OutputsFormatError(
            path,
            line_no,
            'context_utterances',
            f'expected a list of strings, got {type(context).__name__} {context!r:.60}',
        )
    if not context:
        context = teacher.get('text', '')
        if not isinstance(context, str):
            raise OutputsFormatError(path, line_no, 'text', f'teacher text is not a string: {context!r:.80}')
        context = [context]
    scores = model.get('emotion_scores')
    if scores is not None and not (
        isinstance(scores, dict)
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in scores.values())
    ):
        raise OutputsFormatError(path, line_no, 'emotion_scores', f'expected label -> number, got {scores!r:.80}')
    ranked = model.get('text_candidates')
    if ranked is not None and not (isinstance(ranked, list) and all(isinstance(c, str) for c in ranked)):
        raise OutputsFormatError(path, line_no, 'text_candidates', f'expected a list of strings, got {ranked!r:.80}')
    return ScoredExample(
        context='\n'.join(context),
        gold=_gold(teacher, path, line_no),
        response=response,
        emotion=teacher.get('emotion') or None,
        emotion_scores=model.get('emotion_scores') or None,
        ranked_candidates=model.get('text_candidates') or None,
        num_candidates=len(candidates) if isinstance(candidates, list) else None,
        label_ppl=metrics.get('ppl'),
        label_tokens=metrics.get('llen'),
        source=f'{path}:{line_no}',
    )


def read_world_logs(path: str) -> List[ScoredExample]:
    examples = []
    for line_no, raw in iter_lines(path, 'world log', line_cap='log_line_bytes'):
        line = decode_utf8(raw, path, line_no)
        if not line.strip():
            continue
        episode = loads_json(line, path, line_no, what='a world-log line')
        if not isinstance(episode, dict) or not isinstance(episode.get('dialog'), list):
            raise OutputsFormatError(path, line_no, 'dialog', 'missing: not a ParlAI world-log line')
        examples.extend(_example_from_pair(pair, path, line_no) for pair in episode['dialog'])
    if not examples:
        raise ValueError(f'{path}: no dialogue turns found')
    return examples
