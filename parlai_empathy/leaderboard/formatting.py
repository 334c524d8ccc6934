"""How the leaderboard writes numbers: one formatter for every figure, wherever it is shown.

The board's markdown, the figure's value labels, the project README tables and the model cards
all write a figure with :func:`figure`, so one figure reads the same in each of them. Counts of
examples or updates are written with :func:`count`, per-label scores with :func:`per_label`.
"""

from typing import Optional, Union

Number = Union[int, float]


def figure(value: Optional[Number]) -> str:
    """Four significant digits (what ParlAI prints), whole numbers from 1,000 on (a perplexity of
    1234.5 is 1234, not 1.234e+03); nothing for no figure (``None`` or an empty CSV cell)."""
    if value is None or value == '':
        return ''
    return f'{value:.4g}' if abs(value) < 1000 else f'{value:.0f}'


def count(value: int) -> str:
    """A count of examples or updates, in thousands: 5,200."""
    return f'{value:,}'


def per_label(value: float) -> str:
    """A per-label precision, recall or F1: three decimals, so the labels' rows line up."""
    return f'{value:.3f}'
