"""Per-example rows from ParlAI world logs: the ``outputs.jsonl.gz`` rows of the evidence and the
P@1,100 hits of a ranker, read from the logs ``eval_model`` writes (``--world-logs``)."""

import math
from typing import Dict, Iterator, List, Optional, Tuple

from parlai_empathy.evidence import artifacts as evidence
from parlai_empathy.files.bounded import decode_utf8, iter_lines, loads_json
from parlai_empathy.metrics.bootstrap import words
from parlai_empathy.metrics.saved_outputs import OutputsFormatError


def _pairs(world_logs: str) -> Iterator[Tuple[Dict, Dict]]:
    for line_no, raw in iter_lines(world_logs, 'world log', line_cap='log_line_bytes'):
        line = decode_utf8(raw, world_logs, line_no)
        if line.strip():
            episode = loads_json(line, world_logs, line_no, what='a world-log line')
            dialog = episode.get('dialog') if isinstance(episode, dict) else None
            if not isinstance(dialog, list):
                raise OutputsFormatError(world_logs, line_no, 'dialog', 'missing: not a ParlAI world-log line')
            for pair in dialog:
                if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(t, dict) for t in pair)):
                    raise OutputsFormatError(
                        world_logs, line_no, 'dialog', 'each entry must be a [teacher turn, model turn] pair'
                    )
                yield pair[0], pair[1]


def _gold(teacher) -> str:
    labels = teacher.get('eval_labels') or teacher.get('labels') or ['']
    return labels[0]


def generation_rows(world_logs: str) -> List[Dict]:
    """``outputs.jsonl.gz`` rows of a generator (or a ranker's retrieval pass)."""
    rows = []
    for teacher, model in _pairs(world_logs):
        metrics = model.get('metrics') or {}
        row = {
            'id': evidence.example_id(teacher),
            'gold': _gold(teacher),
            'reply': model.get('text', ''),
            'emotion': teacher.get('emotion'),
        }
        for key in ('predicted_emotion', 'emotion_polarity', 'speaker_emotion', 'response_emotion'):
            if model.get(key) is not None:
                row[key] = model[key]
        # ParlAI's llen is the label's length before truncation; ltrunclen what truncation cut
        tokens = metrics.get('llen') and round(metrics['llen'] - (metrics.get('ltrunclen') or 0))
        if tokens and metrics.get('loss') is not None:
            row['tokens'] = int(tokens)
            row['nll'] = float(metrics['loss']) * tokens
            if metrics.get('ppl_gold') is not None:
                row['nll_gold'] = math.log(float(metrics['ppl_gold'])) * tokens
            if metrics.get('nll_end') is not None:  # the end token's NLL, inside ``nll``
                row['nll_end'] = float(metrics['nll_end'])
        # the per-word perplexity's parts: the gold reply's NLL without the end token, its words
        count = words(row['gold'])
        if metrics.get('ppl_word') is not None and count:
            row['nll_reply'] = math.log(float(metrics['ppl_word'])) * count
            row['words'] = count
        if model.get('hf_prompt') is not None:  # a language model's exact prompt (chat template applied)
            row['prompt'] = model['hf_prompt']
        for key in ('emo_acc', 'emo_acc@2', 'emo_acc@5'):
            if metrics.get(key) is not None:
                row[key] = int(round(float(metrics[key])))
        rows.append(row)
    return rows


def classifier_rows(world_logs: str) -> List[Dict]:
    """``outputs.jsonl.gz`` rows of an emotion classifier: the text, its label, the prediction."""
    rows = []
    for teacher, model in _pairs(world_logs):
        rows.append(
            {
                'id': evidence.example_id(teacher),
                'text': teacher.get('text', ''),
                'gold': _gold(teacher),
                'predicted': model.get('text', ''),
            }
        )
    return rows


def p100_hits(world_logs: str, expected: Optional[int] = None) -> Dict[str, int]:
    """Example id -> 1 if the gold was ranked first among its block's 100 candidates.

    Every example of every block must have been ranked: a missing or short ranking stops the
    evaluation naming the example. A candidate counts as the gold when its text equals the gold's
    under ParlAI's answer normalization, so a block holding the gold text twice counts either
    copy ranked first as correct (see ``metrics/retrieval.py``).
    """
    from parlai_empathy.metrics.retrieval import NUM_CANDIDATES, top1_correct

    hits = {}
    for teacher, model in _pairs(world_logs):
        where = evidence.example_id(teacher)
        candidates = teacher.get('label_candidates') or []
        if len(candidates) != NUM_CANDIDATES:
            raise evidence.ArtifactError(
                f'P@1,100: example {where} has {len(candidates)} candidates, not {NUM_CANDIDATES}'
            )
        ranked = model.get('text_candidates') or []
        if not ranked:
            raise evidence.ArtifactError(
                f'P@1,100: example {where} was not ranked (the model returned no text_candidates)'
            )
        hits[where] = int(top1_correct(ranked, _gold(teacher), len(candidates)))
    if expected is not None and len(hits) != expected:
        raise evidence.ArtifactError(
            f'P@1,100 covers {len(hits)} examples, not the {expected} of the blocks of 100 (full ED test: 5,200)'
        )
    return hits
