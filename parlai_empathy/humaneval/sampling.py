"""Which items get rated, by how many people, in which order, and with which attention checks.

Everything random takes an explicit seed so a task can be rebuilt identically. Model identity
never reaches the worker: a unit's display holds only text; the model names stay in the DB.
"""

import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

from parlai_empathy.humaneval.inputs import HUMAN_LISTENER, LISTENER, SPEAKER, Item, Pairing

LIKERT = 'likert'
LIKERT_RATINGS = (1, 2, 3, 4, 5)  # Rashkin et al.: 1 (not at all) .. 5 (very much)
AB = 'ab'
GOLD = '__gold__'
MISMATCH = '__mismatch__'
# A mismatched reply must get at most this Relevance score to pass a Likert attention check.
CHECK_ASPECT = 'relevance'
CHECK_MAX_RELEVANCE = 2


@dataclass
class UnitSpec:
    """Something one worker judges once: an item with one reply (Likert) or two (A/B)."""

    item_id: str
    models: Tuple[str, ...]  # in display order: (model,) or (model shown as A, model shown as B)
    display: dict  # {'context': [[role, text], ...], 'candidates': [[[role, text], ...], ...]}
    needed: int
    is_check: bool = False
    expected: Optional[str] = None  # for checks: the model name that must win, or None (Likert)
    extra: dict = field(default_factory=dict)


def stratified_sample(items: Dict[str, Item], per_emotion: int, seed: int) -> List[str]:
    """MIME's protocol: ``per_emotion`` items from each emotion (4 x 32 = 128)."""
    by_emotion = defaultdict(list)
    for item_id, item in items.items():
        by_emotion[item.emotion].append(item_id)
    rng = random.Random(seed)
    chosen = []
    for emotion in sorted(by_emotion):
        pool = sorted(by_emotion[emotion])
        if len(pool) < per_emotion:
            raise ValueError(f'emotion {emotion!r} has only {len(pool)} items, {per_emotion} requested')
        chosen.extend(rng.sample(pool, per_emotion))
    return chosen


def uniform_sample(items: Dict[str, Item], n: int, seed: int) -> List[str]:
    """Rashkin et al.'s protocol: randomly subsampled test examples."""
    pool = sorted(items)
    if n > len(pool):
        raise ValueError(f'{n} items requested but only {len(pool)} available')
    return random.Random(seed).sample(pool, n)


def select_items(items: Dict[str, Item], per_emotion: int, num_items: int, seed: int) -> List[str]:
    """MIME's emotion-stratified sample (``per_emotion``), else Rashkin's uniform one
    (``num_items``), else every item."""
    if per_emotion:
        return stratified_sample(items, per_emotion, seed)
    if num_items:
        return uniform_sample(items, num_items, seed)
    return list(items)


def _context(item: Item) -> List[List[str]]:
    return [[role, text] for role, text in item.context]


def likert_units(
    items: Dict[str, Item],
    responses: Dict[str, Dict[str, str]],
    selected: Sequence[str],
    annotators: int,
) -> List[UnitSpec]:
    """One unit per (item, model); each is rated by ``annotators`` different workers."""
    units = []
    for item_id in selected:
        for model in sorted(responses):
            units.append(
                UnitSpec(
                    item_id=item_id,
                    models=(model,),
                    display={
                        'context': _context(items[item_id]),
                        'candidates': [[[LISTENER, responses[model][item_id]]]],
                    },
                    needed=annotators,
                )
            )
    return units


def ab_units(
    items: Dict[str, Item],
    responses: Dict[str, Dict[str, str]],
    selected: Sequence[str],
    matchups: Sequence[Tuple[str, str]],
    annotators: int,
    seed: int,
) -> List[UnitSpec]:
    """One unit per (item, model pair), with the A/B side drawn at random per unit."""
    rng = random.Random(seed)
    units = []
    for item_id in selected:
        for pair in matchups:
            shown = tuple(pair) if rng.random() < 0.5 else (pair[1], pair[0])
            units.append(
                UnitSpec(
                    item_id=item_id,
                    models=shown,
                    display={
                        'context': _context(items[item_id]),
                        'candidates': [[[LISTENER, responses[m][item_id]]] for m in shown],
                    },
                    needed=annotators,
                )
            )
    return units


def _split_shared_prefix(a: List[dict], b: List[dict]) -> Tuple[list, list, list]:
    n = 0
    while n < min(len(a), len(b)) - 1 and (a[n]['id'], a[n]['text']) == (b[n]['id'], b[n]['text']):
        n += 1
    return a[:n], a[n:], b[n:]


def ab_units_from_pairings(pairings: Sequence[Pairing], annotators: int, seed: int) -> List[UnitSpec]:
    """A/B units from ACUTE-Eval pairings: a turn whose id is the evaluated model is its reply."""
    rng = random.Random(seed)
    units = []
    for idx, pairing in enumerate(pairings):
        if pairing.is_onboarding:
            continue
        order = [0, 1] if rng.random() < 0.5 else [1, 0]
        shared, rest_a, rest_b = _split_shared_prefix(*pairing.dialogues)
        rests = (rest_a, rest_b)

        def turns(ts, models):
            # the evaluated models and the human Listener (acute_dialogue's id) speak for the
            # Listener; everyone else for the Speaker
            return [[LISTENER if t['id'] in models or t['id'] == HUMAN_LISTENER else SPEAKER, t['text']] for t in ts]

        units.append(
            UnitSpec(
                item_id=f'pairing:{idx}',
                models=tuple(pairing.models[i] for i in order),
                display={
                    'context': turns(shared, pairing.models),
                    'candidates': [turns(rests[i], (pairing.models[i],)) for i in order],
                },
                needed=annotators,
                extra={'pairing_index': idx},
            )
        )
    return units


def check_units(mode: str, items: Dict[str, Item], pool: Sequence[str], n: int, seed: int) -> List[UnitSpec]:
    """Attention checks built from real items.

    Likert: the item's context with a reply taken from a conversation of another emotion; it
    must be rated low on Relevance. A/B: the gold reply against such a mismatched reply; the
    gold one must win.
    """
    rng = random.Random(seed)
    pool = sorted(pool)
    if len(pool) < 2:
        raise ValueError('attention checks need at least 2 items to mismatch')
    chosen = rng.sample(pool, min(n, len(pool)))
    units = []
    for item_id in chosen:
        item = items[item_id]
        others = [i for i in pool if items[i].emotion != item.emotion and i != item_id]
        donor = items[rng.choice(others or [i for i in pool if i != item_id])]
        if mode == LIKERT:
            models, candidates, expected = (MISMATCH,), [[[LISTENER, donor.gold]]], None
        else:
            sides = [(GOLD, item.gold), (MISMATCH, donor.gold)]
            rng.shuffle(sides)
            models = tuple(m for m, _ in sides)
            candidates = [[[LISTENER, text]] for _, text in sides]
            expected = GOLD
        units.append(
            UnitSpec(
                item_id=item_id,
                models=models,
                display={'context': _context(item), 'candidates': candidates},
                needed=0,
                is_check=True,
                expected=expected,
            )
        )
    return units


@dataclass
class OpenUnit:
    unit_id: int
    item_id: str
    remaining: int  # ratings still wanted, not counting slots already handed out


def plan_assignment(
    rng: random.Random,
    open_units: Sequence[OpenUnit],
    checks: Sequence[OpenUnit],
    seen_items: Set[str],
    size: int,
    n_checks: int,
) -> List[int]:
    """Pick up to ``size`` units (neediest first) and ``n_checks`` checks for one worker.

    No item appears twice in the assignment or repeats an item the worker saw before. Checks go
    to random positions. Returns unit ids in display order ([] when nothing is left to do).
    """
    candidates = [u for u in open_units if u.remaining > 0 and u.item_id not in seen_items]
    rng.shuffle(candidates)
    candidates.sort(key=lambda u: -u.remaining)  # stable: random order within equal need
    picked, used_items = [], set(seen_items)
    for unit in candidates:
        if len(picked) == size:
            break
        if unit.item_id not in used_items:
            picked.append(unit.unit_id)
            used_items.add(unit.item_id)
    if not picked:
        return []
    check_pool = [c for c in checks if c.item_id not in used_items]
    rng.shuffle(check_pool)
    for check in check_pool[:n_checks]:
        picked.insert(rng.randint(1, len(picked)), check.unit_id)
    return picked
