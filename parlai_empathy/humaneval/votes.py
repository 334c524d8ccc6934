"""A/B vote aggregation: majority of three, and MIME's rule of a 4th annotator on a 3-way split.

Votes are model names or ``TIE``. Used both while collecting (to call the 4th annotator) and in
analysis (to decide each item), so the two can never disagree.
"""

from collections import Counter
from typing import Optional, Sequence

TIE = 'tie'
BASE_ANNOTATORS = 3


def needs_extra_annotator(votes: Sequence[str]) -> bool:
    """True when the first three votes all differ (A, B and Tie once each)."""
    return len(votes) == BASE_ANNOTATORS and len(set(votes)) == BASE_ANNOTATORS


def majority_vote(votes: Sequence[str]) -> Optional[str]:
    """The decided outcome, or None while undecided.

    The first three votes decide when two of them agree; when all three differ the 4th vote
    joins them and decides (it necessarily matches one of the three). Votes beyond what the
    rule needs are ignored, so an extra rating cannot flip a settled item. With fewer than three
    votes a strict majority of those present decides (useful for pilots with 1-2 raters).
    """
    if not votes:
        return None
    first = list(votes[:BASE_ANNOTATORS])
    if len(first) < BASE_ANNOTATORS:
        top, count = Counter(first).most_common(1)[0]
        return top if count * 2 > len(first) else None
    if not needs_extra_annotator(first):
        return Counter(first).most_common(1)[0][0]
    if len(votes) > BASE_ANNOTATORS:
        return votes[BASE_ANNOTATORS]
    return None
