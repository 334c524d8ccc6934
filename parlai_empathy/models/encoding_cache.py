"""On-disk cache of fixed-candidate encodings that can never go stale.

Encoding the ~40k ED train responses takes minutes on a CPU, while one query against the cached
matrix takes milliseconds. The cache file stores, next to the matrix, the key it was built for:
the checksum of the weights, the sha256 of the candidate file and a description of how the
candidates were vectorized. Loading with any other key returns ``None`` (the caller rebuilds and
overwrites), so a cache built by other weights or from another file is never reused.
"""
import logging
import os
from typing import Dict, Optional

import torch

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
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f'{path}.tmp{os.getpid()}'
    torch.save({'format': FORMAT, 'key': dict(key), 'encodings': encodings.detach().cpu()}, tmp)
    os.replace(tmp, path)
