"""ED train subsets selected by emotion-interaction patterns (Metz & You 2020, Tables 1 and 2).

* **Fraction subsets** (presets ``p87``, ``p57``): conversations are ranked by pattern density
  (pattern transitions per turn pair; a seeded random order breaks ties) and the top ones are kept
  until the target fraction of train conversations is reached. Richer pattern conversations are
  therefore always kept first.
* **Equal-size pair** (``with43`` / ``without43``): the same number of conversations (43% of train
  by default, fewer if a pool is smaller), drawn with a seed from two disjoint pools, the
  conversations that show at least one pattern and those that show none.

Every selection returns a manifest: the parameters, sorted conv_ids and statistics. It has no
timestamps or paths that vary, so the same inputs give the byte-identical manifest.
"""

import hashlib
import json
import os
from typing import Dict, List

import numpy as np
import pandas as pd

from parlai_empathy.emotions.patterns import PatternParams, pattern_hits, select_patterns, transitions
from parlai_empathy.files.cache_lock import atomic_write

PRESETS = {
    'p87': {'kind': 'fraction', 'fraction': 0.87},
    'p57': {'kind': 'fraction', 'fraction': 0.57},
    'with43': {'kind': 'pair', 'fraction': 0.43, 'side': 'with'},
    'without43': {'kind': 'pair', 'fraction': 0.43, 'side': 'without'},
}


def conversation_scores(pairs: pd.DataFrame, patterns: pd.DataFrame) -> pd.DataFrame:
    """Per conversation: turn pairs, pattern transitions, density."""
    hits = pattern_hits(pairs, patterns)
    frame = pd.DataFrame({'conv_id': pairs['conv_id'], 'hits': hits, 'pairs': 1})
    scores = frame.groupby('conv_id', sort=True).sum()
    scores['density'] = scores['hits'] / scores['pairs']
    return scores.reset_index()


def _seeded_rank(conv_ids: List[str], seed: int) -> np.ndarray:
    """A reproducible random tie-break value per conversation (independent of input order)."""
    return np.array([int(hashlib.sha256(f'{seed}:{c}'.encode()).hexdigest()[:12], 16) for c in conv_ids])


def select(
    pairs: pd.DataFrame,
    all_conv_ids: List[str],
    classes,
    params: PatternParams,
    preset: str = None,
    fraction: float = None,
    side: str = None,
    seed: int = 0,
    source: Dict = None,
) -> Dict:
    """A manifest for one subset of ``all_conv_ids`` (train); patterns are mined on ``pairs``."""
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f'unknown pattern subset preset {preset!r}; choose one of {sorted(PRESETS)}')
        spec = dict(PRESETS[preset])
    else:
        spec = {'kind': 'pair' if side else 'fraction', 'fraction': fraction, 'side': side}
    if fraction is not None:
        spec['fraction'] = fraction
    patterns = select_patterns(transitions(pairs, classes), params)
    scores = conversation_scores(pairs, patterns).set_index('conv_id').reindex(sorted(set(all_conv_ids)), fill_value=0)
    scores['density'] = scores['density'].fillna(0.0)
    ids = list(scores.index)
    total = len(ids)
    target = int(round(spec['fraction'] * total))
    tie = _seeded_rank(ids, seed)
    if spec['kind'] == 'fraction':
        order = sorted(range(total), key=lambda i: (-scores['density'].iloc[i], -scores['hits'].iloc[i], tie[i]))
        chosen = [ids[i] for i in order[:target]]
    else:
        with_pool = [c for c in ids if scores.at[c, 'hits'] > 0]
        without_pool = [c for c in ids if scores.at[c, 'hits'] == 0]
        size = min(target, len(with_pool), len(without_pool))
        pool = with_pool if spec['side'] == 'with' else without_pool
        rng = np.random.default_rng(seed)
        chosen = sorted(rng.choice(sorted(pool), size=size, replace=False).tolist()) if size else []
        spec['pool_sizes'] = {'with': len(with_pool), 'without': len(without_pool)}
    chosen = sorted(chosen)
    sub = scores.loc[chosen]
    manifest = {
        'preset': preset,
        'selection': spec,
        'seed': seed,
        'pattern_params': params.as_dict(),
        'patterns': [[a, b] for a, b in zip(patterns['speaker'], patterns['listener'])],
        'source': source or {},
        'stats': {
            'train_conversations': total,
            'conversations': len(chosen),
            'fraction': len(chosen) / total if total else 0.0,
            'target_fraction': spec['fraction'],
            'turn_pairs': int(sub['pairs'].sum()),
            'pattern_transitions': int(sub['hits'].sum()),
            'pattern_transitions_per_pair': float(sub['hits'].sum() / max(sub['pairs'].sum(), 1)),
            'conversations_with_pattern': float((sub['hits'] > 0).mean()) if len(sub) else 0.0,
        },
        'conv_ids': chosen,
    }
    return manifest


def manifest_name(manifest: Dict) -> str:
    label = manifest['preset'] or f'{manifest["selection"]["kind"]}{manifest["selection"]["fraction"]}'
    digest = hashlib.sha256(
        json.dumps({k: v for k, v in manifest.items() if k != 'conv_ids'}, sort_keys=True).encode()
    ).hexdigest()
    return f'{label}-{digest[:12]}.json'


def write_manifest(manifest: Dict, directory: str) -> str:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, manifest_name(manifest))
    atomic_write(path, lambda f: f.write(json.dumps(manifest, indent=1, sort_keys=True) + '\n'), binary=False)
    return path


def describe(manifest: Dict) -> str:
    s = manifest['stats']
    return (
        f'{manifest["preset"] or manifest["selection"]["kind"]}: {s["conversations"]} of '
        f'{s["train_conversations"]} train '
        f'conversations ({s["fraction"]:.1%}, target {s["target_fraction"]:.0%}); {s["pattern_transitions"]} pattern '
        f'transitions in {s["turn_pairs"]} turn pairs ({s["pattern_transitions_per_pair"]:.3f}/pair); '
        f'{s["conversations_with_pattern"]:.1%} of its conversations show a pattern'
    )
