"""P@1,100: is the gold response ranked first among 100 candidates (Rashkin et al.)?

This is ParlAI's ``hits@1`` when the teacher gives each example exactly 100 inline
``label_candidates`` (gold + 99 others) and the ranker runs with ``--eval-candidates inline``; a
candidate matches the gold under ParlAI's own answer normalization, so the figure equals the
teacher's hits@1 on those examples. Examples with any other number of candidates are not P@1,100
and are refused rather than silently mixed in.
"""

from typing import Optional, Sequence

NUM_CANDIDATES = 100
METRIC = 'p@1,100'  # on blocks of consecutive test examples (--ed-candidates rashkin100)
# the same on blocks of shuffled test examples (--ed-candidates rashkin100_shuffled): the ED
# paper's "100 randomly selected examples"; the ED teachers record it under this name
SHUFFLED_METRIC = 'p@1,100_shuffled'


def _normalize(text: str) -> str:
    from parlai.core.metrics import normalize_answer

    return normalize_answer(text)


def top1_correct(ranked: Sequence[str], gold: str, num_candidates: Optional[int]) -> bool:
    """Whether the top-ranked candidate is the gold response, for a 100-candidate block."""
    if num_candidates != NUM_CANDIDATES:
        raise ValueError(
            f'{METRIC} needs exactly {NUM_CANDIDATES} label candidates per example, got '
            f'{num_candidates}; use the teacher option --ed-candidates rashkin100'
        )
    if not ranked:
        raise ValueError(f'{METRIC}: the model returned no ranked candidates')
    return _normalize(ranked[0]) == _normalize(gold)
