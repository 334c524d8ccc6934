"""Turning ED conversations into dialogue examples, and P@1,100 candidate sets.

The episode layout is ParlAI's: for each conversation, first the episode in which the Listener
responds (text = the Speaker's previous utterance, label = the Listener's reply), then, if both
sides are used, the episode in which the Speaker responds. ParlAI's agents keep the dialogue
history themselves; for models that want the ED paper's fixed context instead, every example also
carries its previous utterances, and ``history_length > 0`` turns each example into its own
episode whose text is the last ``history_length`` utterances.
"""

import random
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .ed_raw import Conversation

SPEAKER, LISTENER = 'speaker', 'listener'
RASHKIN_BLOCK = 100


def role_of(utterance_idx: int) -> str:
    """ED conversations alternate, the Speaker (who lived the situation) talking first."""
    return SPEAKER if utterance_idx % 2 == 1 else LISTENER


@dataclass(slots=True)
class EDExample:
    text: str
    label: str
    emotion: str
    situation: str
    conv_id: str
    turn: int  # utterance_idx of the label
    label_role: str
    context_utterances: List[str]
    context_roles: List[str]
    label_candidates: Optional[List[str]] = None
    line_no: int = 0  # of the label's row in the raw file, for error messages
    extra: Dict = field(default_factory=dict)

    def to_message(self) -> Dict:
        message = {
            'text': self.text,
            'labels': [self.label],
            'emotion': self.emotion,
            'situation': self.situation,
            'conv_id': self.conv_id,
            'turn': self.turn,
            'label_role': self.label_role,
            'context_utterances': self.context_utterances,
            'context_roles': self.context_roles,
        }
        if self.label_candidates is not None:
            message['label_candidates'] = self.label_candidates
        message.update(self.extra)
        return message


def build_episodes(
    conversations: List[Conversation], both_sides: bool, history_length: int = 0
) -> List[List[EDExample]]:
    """Episodes in ParlAI's order; the Speaker-responding side only when ``both_sides``."""
    episodes: List[List[EDExample]] = []
    for conv in conversations:
        texts = [u.text for u in conv.utterances]
        roles = [role_of(u.utterance_idx) for u in conv.utterances]
        sides = [LISTENER, SPEAKER] if both_sides else [LISTENER]
        for side in sides:
            episode = []
            for position in range(1, len(texts)):
                if roles[position] != side:
                    continue
                utt = conv.utterances[position]
                context = texts[:position]
                text = texts[position - 1]
                if history_length > 0:
                    text = '\n'.join(context[-history_length:])
                example = EDExample(
                    text=text,
                    label=texts[position].strip(),
                    emotion=conv.emotion,
                    situation=conv.situation,
                    conv_id=conv.conv_id,
                    turn=utt.utterance_idx,
                    label_role=side,
                    context_utterances=context,
                    context_roles=roles[:position],
                    label_candidates=utt.candidates,
                    line_no=utt.line_no,
                )
                if history_length > 0:
                    episodes.append([example])
                else:
                    episode.append(example)
            if episode:
                episodes.append(episode)
    return episodes


def _flat(episodes):
    return [example for episode in episodes for example in episode]


def attach_rashkin_candidates(
    episodes: List[List[EDExample]],
    block: int = RASHKIN_BLOCK,
    shuffle_seed: Optional[int] = None,
    whole_context_text: bool = True,
) -> List[List[EDExample]]:
    """Rashkin et al.'s P@1,100 protocol.

    Examples are taken in blocks of ``block``; each example's candidates are the gold responses of
    its block (its own among them), and the last partial block is dropped, as in the ED paper's
    code. With ``--eval-candidates inline``, ParlAI's hits@1 is P@1,100.

    The paper's code reports two variants. Unshuffled (``shuffle_seed=None``): blocks of
    consecutive examples, so a block holds the other Listener turns of the same conversations,
    which are hard distractors. Shuffled: blocks of a random permutation, "a hundred randomly
    selected examples in the test set" as the paper words it, which is easier. The shuffled blocks
    mix conversations, so every example becomes its own episode; with ``whole_context_text`` its
    ``text`` becomes all its previous utterances joined by newlines, what ParlAI's dialogue history
    holds at that turn of the unshuffled episode, so history-based agents see the same context in
    both protocols (``context_utterances`` carries it too).
    """
    flat = _flat(episodes)
    if len(flat) < block:
        raise ValueError(
            f'P@1,100 needs at least {block} examples, this split has {len(flat)}: '
            'use a larger split or --ed-candidates random100/none'
        )
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(flat)
    keep = len(flat) - len(flat) % block
    for start in range(0, keep, block):
        members = flat[start : start + block]
        pool = [example.label for example in members]
        for example in members:
            example.label_candidates = pool
    if shuffle_seed is not None:
        if whole_context_text:
            for example in flat[:keep]:
                example.text = '\n'.join(example.context_utterances)
        return [[example] for example in flat[:keep]]
    return _truncate(episodes, keep)


def attach_random_candidates(episodes: List[List[EDExample]], size: int = RASHKIN_BLOCK, seed: int = 0):
    """A seeded alternative (not Rashkin's): the gold plus ``size - 1`` random other responses."""
    flat = _flat(episodes)
    pool = sorted({example.label for example in flat})
    rng = random.Random(seed)
    for example in flat:
        # distinct responses other than the gold; a tiny split just gives fewer candidates
        others = len(pool) - 1
        wanted = min(size - 1, others)
        distractors = set()
        while len(distractors) < wanted:
            text = pool[rng.randrange(len(pool))]
            if text != example.label:
                distractors.add(text)
        candidates = sorted(distractors) + [example.label]
        rng.shuffle(candidates)
        example.label_candidates = candidates
    return episodes


def _truncate(episodes, keep):
    """The first ``keep`` examples, episode structure preserved (the last episode may be cut)."""
    kept, count = [], 0
    for episode in episodes:
        if count >= keep:
            break
        take = episode[: keep - count]
        kept.append(take)
        count += len(take)
    return kept
