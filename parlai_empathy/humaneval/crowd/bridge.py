"""From our items to ParlAI's crowdsourcing inputs.

``parlai empathy_acute_build`` writes into one folder:

* ``pairings.jsonl``: ACUTE-Eval's pairings file (``acute_eval/README.md``'s format), one line
  per (item, model pair) on the items every model answered, then the onboarding pairs: an ED
  gold reply against a reply taken from a conversation of another emotion, with
  ``correct_answer`` the gold side;
* ``turns.jsonl`` and ``turns_onboarding.json``: the turn-annotation task's conversations for one
  model (ParlAI's ``{"dialog": [[speaker turn, listener turn], ...]}``, the model's reply last)
  and the practice conversations with their expected answers;
* ``manifest.json``: the models, their sources, the items shared and dropped, the seed.

The same readers as our own server's build step take the inputs, and the same sampling picks the
items, so both paths judge the same replies.
"""

import itertools
import json
import os
import random
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from parlai_empathy.humaneval import inputs, sampling
from parlai_empathy.humaneval.inputs import LISTENER, SPEAKER, InputError, Item

PAIRINGS = 'pairings.jsonl'
TURNS = 'turns.jsonl'
TURNS_ONBOARDING = 'turns_onboarding.json'
MANIFEST = 'manifest.json'
GOLD, MISMATCH = sampling.GOLD, sampling.MISMATCH


@dataclass
class Built:
    """What :func:`build` wrote and why items were left out."""

    outdir: str
    models: List[str]
    items: int  # items shared by every model that made it into the task
    shared: int  # items every model answered
    dropped: Dict[str, int]  # per model: its items that another model lacks
    pairings: int
    onboarding: int
    annotated_model: Optional[str] = None
    conversations: int = 0
    not_alternating: int = 0  # items left out of turn annotation: roles do not alternate
    paths: Dict[str, str] = field(default_factory=dict)

    def summary(self) -> List[str]:
        dropped = ', '.join(f'{m} {n}' for m, n in self.dropped.items())
        lines = [
            f'{len(self.models)} models ({", ".join(self.models)}): {self.shared} items shared by '
            f'all, dropped as not shared: {dropped}',
            f'ACUTE-Eval: {self.pairings} pairings on {self.items} items + {self.onboarding} '
            f'onboarding pairs -> {self.paths[PAIRINGS]}',
        ]
        if self.annotated_model:
            lines.append(
                f'turn annotation: {self.conversations} conversations of '
                f'{self.annotated_model} -> {self.paths[TURNS]}'
                + (
                    f' ({self.not_alternating} left out: turns do not alternate Speaker, Listener)'
                    if self.not_alternating
                    else ''
                )
            )
        return lines


def released_outputs(
    spec: str, items: Dict[str, Item], ed_dir: str, folder: Optional[str] = None
) -> inputs.ModelOutputs:
    """``NAME`` or ``NAME=PATH`` of a released file ``parlai empathy_score --released`` knows,
    matched with ED test by :mod:`parlai_empathy.metrics.alignment`; ambiguous, unmatched and
    duplicate outputs are left out (the alignment's counts are what ``empathy_score`` reports)."""
    from parlai_empathy.metrics import alignment, released

    name, _, path = spec.partition('=')
    known = released.KNOWN.get(name)
    if known is None:
        raise InputError(
            f'--released {name}: not a released file this package knows (known: {", ".join(sorted(released.KNOWN))})'
        )
    path = path or released.fetch_released(known, folder)
    outputs = released.read_released(path, known.format)
    matched = alignment.align(outputs, alignment.ed_test_examples(ed_dir))
    out = inputs.ModelOutputs(model=name)
    by_row = {inputs.row_id(i): item for i, item in items.items()}
    for output, example in matched.pairs:
        item = by_row[alignment.example_id(example)]
        out.items[item.item_id] = item
        out.responses[item.item_id] = output.response
    if not out.items:
        raise InputError(f'{path}: none of its outputs matched an ED test example ({matched.summary()})')
    return out


def _acute_pair(item: Item, models: Tuple[str, str], replies: Tuple[str, str]) -> dict:
    return {
        'is_onboarding': False,
        'speakers_to_eval': list(models),
        'dialogue_ids': [f'{item.item_id}:{m}' for m in models],
        'dialogue_dicts': [inputs.acute_dialogue(item, m, r) for m, r in zip(models, replies)],
    }


def _onboarding_pairs(items: Dict[str, Item], pool: Sequence[str], n: int, seed: int) -> List[dict]:
    """ACUTE onboarding pairs from our A/B attention checks: the gold reply must be chosen."""
    rows = []
    for unit in sampling.check_units(sampling.AB, items, pool, n, seed):
        item = items[unit.item_id]
        replies = {m: cand[0][1] for m, cand in zip(unit.models, unit.display['candidates'])}
        row = _acute_pair(item, (GOLD, MISMATCH), (replies[GOLD], replies[MISMATCH]))
        row.update(
            is_onboarding=True,
            correct_answer=GOLD,
            dialogue_ids=[f'onboarding:{item.item_id}:{m}' for m in (GOLD, MISMATCH)],
        )
        rows.append(row)
    return rows


def _dialog_pairs(context: List[Tuple[str, str]], reply: str) -> Optional[List[list]]:
    """The conversation as ParlAI's ``dialog`` pairs [Speaker turn, Listener turn], the reply
    last; None when the turns do not alternate starting with the Speaker."""
    turns = list(context) + [(LISTENER, reply)]
    if len(turns) % 2 or any(role != (SPEAKER if i % 2 == 0 else LISTENER) for i, (role, _) in enumerate(turns)):
        return None
    return [
        [{'id': 'Speaker', 'text': turns[i][1]}, {'id': 'Listener', 'text': turns[i + 1][1]}]
        for i in range(0, len(turns), 2)
    ]


def _turn_onboarding(items: Dict[str, Item], pool: Sequence[str], seed: int) -> dict:
    """Two practice conversations: the gold reply (must be marked relevant) and a reply from a
    conversation of another emotion (must not be)."""
    rng = random.Random(seed)
    usable = [i for i in sorted(pool) if _dialog_pairs(items[i].context, items[i].gold)]
    if len(usable) < 3:
        raise InputError('turn-annotation onboarding needs at least 3 items whose turns alternate')
    gold_id, mismatch_id = rng.sample(usable, 2)
    donors = [i for i in usable if items[i].emotion != items[mismatch_id].emotion and i != mismatch_id]
    donor = items[rng.choice(donors or [i for i in usable if i != mismatch_id])]
    practice = [(items[gold_id], items[gold_id].gold, True), (items[mismatch_id], donor.gold, False)]
    rng.shuffle(practice)
    conversations, answers = [], []
    for item, reply, relevant in practice:
        dialog = _dialog_pairs(item.context, reply)
        conversations.append(
            [
                {
                    'text': turn['text'],
                    'agent_idx': k,
                    'do_annotate': i == len(dialog) - 1 and k == 1,
                    'other_metadata': None,
                }
                for i, pair in enumerate(dialog)
                for k, turn in enumerate(pair)
            ]
        )
        answers.append({'relevance': relevant})
    return {'conversations': conversations, 'answers': answers}


def build(
    outdir: str,
    world_logs: Sequence[str] = (),
    outputs: Sequence[str] = (),
    released: Sequence[str] = (),
    ed_datapath: Optional[str] = None,
    num_items: int = 0,
    per_emotion: int = 0,
    onboarding: int = 4,
    annotate: Optional[str] = None,
    seed: int = 0,
    released_dir: Optional[str] = None,
) -> Built:
    """Write the crowd inputs for two or more models (see the module's docstring)."""
    from parlai_empathy.humaneval.build import parse_model_args

    parsed = parse_model_args(world_logs, outputs, ed_datapath)
    if released:
        from parlai_empathy.data import ed_source

        ed_dir = ed_source.resolve_ed_dir(ed_datapath)
        ed_test = inputs.ed_items(ed_dir, 'test')
        parsed += [released_outputs(spec, ed_test, ed_dir, released_dir) for spec in released]
    if len(parsed) < 2:
        raise InputError('ACUTE-Eval compares 2 or more models: give them with --world-logs, --outputs or --released')
    items, models = inputs.align(parsed)
    dropped = {o.model: len(set(o.items) - set(items)) for o in parsed}
    selected = sampling.select_items(items, per_emotion, num_items, seed)
    replies = {o.model: o.responses for o in parsed}
    rows = [
        _acute_pair(items[i], pair, tuple(replies[m][i] for m in pair))
        for i in selected
        for pair in itertools.combinations(models, 2)
    ]
    pool = [i for i in items if i not in set(selected)] or list(items)
    checks = _onboarding_pairs(items, pool, onboarding, seed + 1) if onboarding else []
    os.makedirs(outdir, exist_ok=True)
    paths = {name: os.path.join(outdir, name) for name in (PAIRINGS, TURNS, TURNS_ONBOARDING, MANIFEST)}
    inputs.write_pairings(paths[PAIRINGS], rows + checks)

    annotated = annotate or models[0]
    if annotated not in replies:
        raise InputError(f'--annotate {annotated}: not one of the models ({", ".join(models)})')
    conversations, skipped = [], 0
    with open(paths[TURNS], 'w', encoding='utf-8') as f:
        for i in selected:
            dialog = _dialog_pairs(items[i].context, replies[annotated][i])
            if dialog is None:
                skipped += 1
                continue
            conversations.append(i)
            # the blueprint passes each turn's other_metadata to the page, which returns it with
            # the answer: how an annotation finds its item and model again
            dialog[-1][1]['other_metadata'] = {'item_id': i, 'model': annotated}
            f.write(json.dumps({'dialog': dialog}, ensure_ascii=False) + '\n')
    with open(paths[TURNS_ONBOARDING], 'w', encoding='utf-8') as f:
        json.dump(_turn_onboarding(items, pool, seed + 2), f, ensure_ascii=False, indent=1)
    built = Built(
        outdir=outdir,
        models=models,
        items=len(selected),
        shared=len(items),
        dropped=dropped,
        pairings=len(rows),
        onboarding=len(checks),
        annotated_model=annotated,
        conversations=len(conversations),
        not_alternating=skipped,
        paths=paths,
    )
    manifest = {
        'models': models,
        'sources': {'world_logs': list(world_logs), 'outputs': list(outputs), 'released': list(released)},
        'items': len(selected),
        'items_shared': len(items),
        'dropped_not_shared': dropped,
        'seed': seed,
        'pairings': len(rows),
        'onboarding_pairs': len(checks),
        'turn_annotation': {'model': annotated, 'conversations': conversations, 'left_out_not_alternating': skipped},
    }
    with open(paths[MANIFEST], 'w', encoding='utf-8') as f:
        json.dump(manifest, f, indent=1)
    return built
