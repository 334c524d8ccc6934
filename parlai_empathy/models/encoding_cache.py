"""On-disk cache of fixed-candidate encodings that can never go stale.

Encoding the ~40k ED train responses takes minutes on a CPU, while one query against the cached
matrix takes milliseconds. The cache file stores, next to the matrix, the key it was built for:
the checksum of the weights, the sha256 of the candidate file and a description of how the
candidates were vectorized. Loading with any other key returns ``None`` (the caller rebuilds and
overwrites), so a cache built by other weights or from another file is never reused.

:func:`load_or_build` is what agents call: under a file lock, so when the ranks of a distributed
run start together one of them encodes the candidates and the others wait and read its file.
"""

import logging
import os
from typing import Callable, Dict, Optional, Tuple

import torch

from parlai_empathy.files.cache_lock import atomic_write, build_lock

FORMAT = 'parlai_empathy.candidate_encodings.v1'
logger = logging.getLogger(__name__)


class CacheFormatError(ValueError):
    """A cache path that holds something other than our candidate encodings."""


def load_encodings(path: str, key: Dict[str, str]) -> Optional[torch.Tensor]:
    """The cached encodings if ``path`` holds them for exactly ``key``, else ``None``.

    A file that is not a cache of ours raises :class:`CacheFormatError` naming it: silently
    overwriting an unrelated file would be worse than stopping.
    """
    if not os.path.exists(path):
        return None
    try:
        content = torch.load(path, map_location='cpu', weights_only=True)
    except Exception as err:  # torch raises several types for unreadable pickles
        raise CacheFormatError(
            f'{path}: not a candidate-encoding cache ({type(err).__name__}: {err}). '
            'Delete it or point the cache option elsewhere.'
        ) from err
    if not isinstance(content, dict) or content.get('format') != FORMAT:
        raise CacheFormatError(
            f'{path}: not a candidate-encoding cache (missing format tag {FORMAT!r}). '
            'Delete it or point the cache option elsewhere.'
        )
    stored = content.get('key', {})
    changed = sorted(k for k in set(stored) | set(key) if stored.get(k) != key.get(k))
    if changed:
        logger.warning(f'Candidate-encoding cache {path} is stale ({", ".join(changed)} changed): rebuilding.')
        return None
    encodings = content.get('encodings')
    if not isinstance(encodings, torch.Tensor) or encodings.dim() != 2:
        raise CacheFormatError(f'{path}: cache has no [n, dim] encodings tensor.')
    return encodings


def save_encodings(path: str, key: Dict[str, str], encodings: torch.Tensor) -> None:
    """Write atomically, so an interrupted build never leaves a half-written cache behind."""
    content = {'format': FORMAT, 'key': dict(key), 'encodings': encodings.detach().cpu()}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, lambda f: torch.save(content, f))


def load_or_build(
    path: str, key: Dict[str, str], build: Callable[[], torch.Tensor], rows: Optional[int] = None
) -> Tuple[torch.Tensor, bool]:
    """``(encodings, built)``: the cache at ``path`` for ``key`` (with ``rows`` rows when given), or
    ``build()``'s result, saved there. One process builds at a time; the others wait for it and
    then load what it saved instead of building again."""
    with build_lock(path, 'encoding the candidates'):
        encodings = load_encodings(path, key)
        if encodings is not None and rows is not None and encodings.size(0) != rows:
            logger.warning(f'{path}: {encodings.size(0)} encodings for {rows} candidates: rebuilding')
            encodings = None
        if encodings is not None:
            return encodings, False
        encodings = build()
        save_encodings(path, key, encodings)
        return encodings, True
