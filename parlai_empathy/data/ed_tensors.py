"""ED listener-response pairs as padded id tensors, for the plain-torch models.

Used by model unit tests and speed benchmarks, which exercise the ``parlai_empathy.models``
modules without ParlAI (the ParlAI agents use ParlAI's dictionary and batching instead). The
examples are MIME's: every Listener turn, its context being all previous utterances, each token
tagged with the speaker (0) or listener (1) who said it.
"""

import re
from collections import Counter

import torch

from .ed_episodes import LISTENER, build_episodes
from .ed_raw import read_clean
from .emotions import emotion_to_id

PAD, START, END, UNK = '__null__', '__start__', '__end__', '__unk__'  # ids 0..3, as ParlAI's dict
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?|[^\sa-z0-9]")


def tokenize(text):
    """Lower-cased words and punctuation."""
    return _TOKEN.findall(text.lower())


def listener_pairs(csv_path, limit=None):
    """``(context utterances, context roles, response, emotion)`` of each Listener turn."""
    conversations, _ = read_clean(csv_path)
    pairs = []
    for episode in build_episodes(conversations, both_sides=False):
        for ex in episode:
            pairs.append((ex.context_utterances, ex.context_roles, ex.label, ex.emotion))
            if limit and len(pairs) >= limit:
                return pairs
    return pairs


def build_vocab(pairs, max_size=None):
    """Word list (ids = positions) with ParlAI's four special tokens first."""
    counts = Counter()
    for context, _, response, _ in pairs:
        for text in context + [response]:
            counts.update(tokenize(text))
    words = [PAD, START, END, UNK] + [w for w, _ in counts.most_common()]
    return words[:max_size] if max_size else words


def to_tensors(pairs, vocab, max_context=128, max_response=32):
    """Padded ``(context ids, speaker ids, response ids ending with END, emotion ids)``.

    Contexts keep their last ``max_context`` tokens (the most recent turns), as ParlAI truncates.
    """
    index = {w: i for i, w in enumerate(vocab)}
    unk, end = index[UNK], index[END]
    contexts, speakers, responses = [], [], []
    for context, roles, response, _ in pairs:
        ids, who = [], []
        for text, role in zip(context, roles):
            tokens = [index.get(t, unk) for t in tokenize(text)]
            ids += tokens
            who += [1 if role == LISTENER else 0] * len(tokens)
        contexts.append(ids[-max_context:])
        speakers.append(who[-max_context:])
        responses.append(([index.get(t, unk) for t in tokenize(response)])[: max_response - 1] + [end])
    emotions = torch.tensor([emotion_to_id(p[3]) for p in pairs])
    return _pad(contexts), _pad(speakers), _pad(responses), emotions


def _pad(rows):
    out = torch.zeros(len(rows), max(1, max(len(r) for r in rows)), dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out
