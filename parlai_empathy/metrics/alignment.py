"""Each released reply matched with its ED test example, by normalised context.

Released files hold ED test contexts as each paper preprocessed them (MoEL's lower-cased nltk
tokens with contractions expanded, ``_comma_`` turned back into commas or not, ...), and no
example id. :func:`context_key` maps a turn to a key that all those preprocessings share: lower
case, ``_comma_`` as a comma, tokenised clitics rejoined (``do n't`` -> ``don't``), MoEL's
contractions expanded, then only letters and digits kept. A context's key is its turns' keys.

:func:`align` then matches every output, and says how:

* ``matched``: one ED test example has the output's context (with several, the one whose gold
  reply has the key of the output's own reference, or else that key with its punctuation, when
  that singles one out); failing that, one
  example has the output's last context turn and its reference as its last turn and gold (a
  conversation the paper's reading of the raw CSV split or merged differently from the cleaned
  ED's): counted apart as ``matched_by_last_turn``;
* ``ambiguous``: several examples remain (the same context and reference in two conversations);
* ``unmatched``: no example has that context;
* ``duplicate``: matched, but to an example an earlier output of the file was matched to.

Nothing is dropped silently: every output is in exactly one of the four lists, with its source
line, and the counts go into the row's evidence.
"""

import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from parlai_empathy.data.ed_episodes import EDExample
from parlai_empathy.data.moel_text import CONTRACTIONS
from parlai_empathy.metrics.released import ReleasedOutput

_CLITIC = re.compile(r"\s+(n't|'m|'s|'re|'ve|'d|'ll)\b")
_NOT_ALNUM = re.compile(r'[^0-9a-z]+')
STATUSES = ('matched', 'ambiguous', 'unmatched', 'duplicate')


def _normalised(text: str) -> str:
    text = text.lower().replace('_comma_', ',').replace('\u2019', "'")
    text = _CLITIC.sub(r'\1', text)
    for short, long in CONTRACTIONS:
        text = text.replace(short, long)
    return text


def turn_key(text: str) -> str:
    return _NOT_ALNUM.sub('', _normalised(text))


def punctuated_key(text: str) -> str:
    """The key with punctuation kept: tells ``fine how about`` from ``fine. how about``."""
    return re.sub(r'\s+', '', _normalised(text))


def context_key(turns: Sequence[str]) -> Tuple[str, ...]:
    return tuple(turn_key(t) for t in turns)


def example_id(example: EDExample) -> str:
    """``conv_id/turn``, the id our rows' ``outputs.jsonl.gz`` use."""
    return f'{example.conv_id}/{example.turn}'


@dataclass
class Alignment:
    """Outputs matched with ED test examples, and what could not be."""

    pairs: List[Tuple[ReleasedOutput, EDExample]] = field(default_factory=list)
    by_last_turn: int = 0  # of the pairs, those matched by last turn and reference
    ambiguous: List[Tuple[ReleasedOutput, List[EDExample]]] = field(default_factory=list)
    unmatched: List[ReleasedOutput] = field(default_factory=list)
    duplicate: List[Tuple[ReleasedOutput, EDExample]] = field(default_factory=list)
    test_examples: int = 0

    @property
    def outputs(self) -> int:
        return len(self.pairs) + len(self.ambiguous) + len(self.unmatched) + len(self.duplicate)

    def counts(self) -> Dict[str, int]:
        return {
            'outputs': self.outputs,
            'matched': len(self.pairs),
            'matched_by_last_turn': self.by_last_turn,
            'ambiguous': len(self.ambiguous),
            'unmatched': len(self.unmatched),
            'duplicate': len(self.duplicate),
            'ed_test_examples': self.test_examples,
            'ed_test_examples_without_output': self.test_examples - len(self.pairs),
        }

    def to_json(self) -> Dict:
        """The counts, then every output that was not matched, with its source line."""

        def where(output):  # the file's name and line, not this machine's folders
            return os.path.basename(output.source)

        return {
            'counts': self.counts(),
            'ambiguous': [{'source': where(o), 'candidates': [example_id(e) for e in c]} for o, c in self.ambiguous],
            'unmatched': [{'source': where(o)} for o in self.unmatched],
            'duplicate': [{'source': where(o), 'example': example_id(e)} for o, e in self.duplicate],
        }

    def summary(self) -> str:
        c = self.counts()
        return (
            f'{c["outputs"]} outputs: {c["matched"]} matched with ED test examples '
            f'({c["matched_by_last_turn"]} by last turn and reference), {c["ambiguous"]} ambiguous, '
            f'{c["unmatched"]} unmatched, {c["duplicate"]} duplicates; {c["ed_test_examples_without_output"]} '
            f'of the {c["ed_test_examples"]} ED test examples have no output'
        )


def _narrow(candidates: List[EDExample], output: ReleasedOutput) -> List[EDExample]:
    """Of several examples, those whose gold has the key of the output's reference (if any do),
    then, if several still do, its key with punctuation."""
    for key in (turn_key, punctuated_key):
        if len(candidates) > 1 and output.reference is not None:
            reference = key(output.reference)
            candidates = [e for e in candidates if key(e.label) == reference] or candidates
    return candidates


def align(outputs: Sequence[ReleasedOutput], examples: Sequence[EDExample]) -> Alignment:
    by_context: Dict[Tuple[str, ...], List[EDExample]] = defaultdict(list)
    by_last_turn: Dict[Tuple[str, str], List[EDExample]] = defaultdict(list)
    for example in examples:
        by_context[context_key(example.context_utterances)].append(example)
        by_last_turn[turn_key(example.context_utterances[-1]), turn_key(example.label)].append(example)
    result = Alignment(test_examples=len(examples))
    taken = set()
    for output in outputs:
        candidates = _narrow(by_context.get(context_key(output.context), []), output)
        last_turn = False
        if not candidates and output.reference is not None:
            candidates = by_last_turn.get((turn_key(output.context[-1]), turn_key(output.reference)), [])
            last_turn = bool(candidates)
        if not candidates:
            result.unmatched.append(output)
        elif len(candidates) > 1:
            result.ambiguous.append((output, candidates))
        elif id(candidates[0]) in taken:
            result.duplicate.append((output, candidates[0]))
        else:
            taken.add(id(candidates[0]))
            result.pairs.append((output, candidates[0]))
            result.by_last_turn += last_turn
    return result


def ed_test_examples(ed_dir: Optional[str] = None) -> List[EDExample]:
    """The ED test examples our generator rows are scored on (``empathy_ed_clean``, Listener
    replies, in the teacher's order)."""
    import os

    from parlai_empathy.data import ed_raw
    from parlai_empathy.data.ed_episodes import build_episodes
    from parlai_empathy.data.ed_source import resolve_ed_dir

    folder = resolve_ed_dir(ed_dir)
    conversations, _ = ed_raw.read_clean(os.path.join(folder, 'test.csv'))
    return [example for episode in build_episodes(conversations, both_sides=False) for example in episode]
