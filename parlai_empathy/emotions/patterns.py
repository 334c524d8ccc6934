"""Speaker-to-listener emotion-interaction patterns over GoEmotions-tagged ED (pandas).

A *turn pair* is a Speaker utterance and the Listener reply right after it (utterance k odd, k+1)
in one conversation. Each utterance carries a set of GoEmotions labels (thresholded tags), so a
pair contributes one *transition* a -> b for every label a of the Speaker turn and b of the
Listener turn. Over all pairs:

* ``count(a, b)``: pairs with a in the Speaker turn and b in the Listener turn;
* ``rate(a, b) = count(a, b) / pairs(a)``: how often a Speaker's a is answered with b;
* ``lift(a, b) = P(a, b) / (P(a) P(b))`` and ``pmi = log2 lift``: against independence of the
  two turns' labels.

The **pattern set** is parametric (:class:`PatternParams`): the transitions whose lift is at least
``min_lift`` and whose count is at least ``min_support``, optionally ignoring ``neutral`` and
same-label pairs (emotional mirroring). A conversation *has* a pattern when one of its turn pairs
shows one of these transitions.

The threshold is chosen per tagger (``min_lift='auto'``, the command-line default, see
:func:`resolve_min_lift`): the lowest lift on a grid (1.00, 1.05, ... 3.00) at which at most 57% of
train conversations show a pattern. Metz & You's Table 2 compares two equal subsets of about 43% of
train, one with the patterns and one without, which needs between 43% and 57% of the conversations
to show a pattern; taking the lowest such lift keeps the largest pattern set that leaves 43%
without. A fixed lift does not carry over between taggers: with an undertrained tagger (test
macro-F1 0.399) lift 1.2 gave 78 patterns in 47.4% of conversations, with the converged one (0.474)
135 patterns in 60.7%, too many for the "without" pool. Every report writes the whole sweep
(``lift_sweep.csv``) so the choice can be checked. The dataclass default (1.2) serves library
callers that pass no choice.
"""

import math
import os
from dataclasses import asdict, dataclass, replace
from typing import Dict, List, Sequence

import numpy as np
import pandas as pd

from parlai_empathy.emotions.tag_cache import TagTable, Utterance


@dataclass(frozen=True)
class PatternParams:
    min_lift: float = 1.2
    min_support: int = 30
    exclude_neutral: bool = True
    exclude_mirroring: bool = False

    def as_dict(self) -> Dict:
        return asdict(self)


def turn_pairs(table: TagTable, utterances: Sequence[Utterance], emotions: Dict[str, str]) -> pd.DataFrame:
    """One row per Speaker->Listener turn pair, with both turns' label lists and the ED emotion."""
    rows = []
    by_conv: Dict[tuple, List[Utterance]] = {}
    for u in utterances:
        by_conv.setdefault((u.split, u.conv_id), []).append(u)
    for (split, conv_id), utts in by_conv.items():
        utts = sorted(utts, key=lambda u: u.utterance_idx)
        for first, second in zip(utts, utts[1:]):
            if first.utterance_idx % 2 != 1 or second.utterance_idx != first.utterance_idx + 1:
                continue
            rows.append(
                {
                    'split': split,
                    'conv_id': conv_id,
                    'turn': first.utterance_idx,
                    'ed_emotion': emotions.get(conv_id, ''),
                    'speaker_labels': table.label_names(table.lookup(split, conv_id, first.utterance_idx)),
                    'listener_labels': table.label_names(table.lookup(split, conv_id, second.utterance_idx)),
                }
            )
    return pd.DataFrame(rows, columns=['split', 'conv_id', 'turn', 'ed_emotion', 'speaker_labels', 'listener_labels'])


def transitions(pairs: pd.DataFrame, classes: Sequence[str]) -> pd.DataFrame:
    """count, rate, lift and pmi for every (speaker label, listener label), one row each."""
    index = {c: i for i, c in enumerate(classes)}
    n = len(classes)
    speaker = np.zeros((len(pairs), n), dtype=np.float64)
    listener = np.zeros((len(pairs), n), dtype=np.float64)
    for row, (s_labels, l_labels) in enumerate(zip(pairs['speaker_labels'], pairs['listener_labels'])):
        speaker[row, [index[c] for c in s_labels]] = 1
        listener[row, [index[c] for c in l_labels]] = 1
    counts = speaker.T @ listener
    total = max(len(pairs), 1)
    p_speaker, p_listener = speaker.sum(0) / total, listener.sum(0) / total
    with np.errstate(divide='ignore', invalid='ignore'):
        rates = np.where(speaker.sum(0)[:, None] > 0, counts / speaker.sum(0)[:, None], 0.0)
        lift = np.where(np.outer(p_speaker, p_listener) > 0, (counts / total) / np.outer(p_speaker, p_listener), 0.0)
    frame = pd.DataFrame(
        {
            'speaker': np.repeat(list(classes), n),
            'listener': np.tile(list(classes), n),
            'count': counts.reshape(-1).astype(int),
            'rate': rates.reshape(-1),
            'lift': lift.reshape(-1),
        }
    )
    frame['pmi'] = [math.log2(x) if x > 0 else float('-inf') for x in frame['lift']]
    return frame


def select_patterns(trans: pd.DataFrame, params: PatternParams) -> pd.DataFrame:
    keep = (trans['lift'] >= params.min_lift) & (trans['count'] >= params.min_support)
    if params.exclude_neutral:
        keep &= (trans['speaker'] != 'neutral') & (trans['listener'] != 'neutral')
    if params.exclude_mirroring:
        keep &= trans['speaker'] != trans['listener']
    return trans[keep].sort_values(['lift', 'count'], ascending=False).reset_index(drop=True)


MIN_LIFT_AUTO = 'auto'
MAX_PATTERN_FRACTION = 0.57  # at most 57% with a pattern: 43% of train left for Table 2's "without" subset
LIFT_GRID = tuple(round(1.0 + 0.05 * i, 2) for i in range(41))  # 1.00 ... 3.00


def lift_sweep(
    pairs: pd.DataFrame, classes: Sequence[str], params: PatternParams, grid: Sequence[float] = LIFT_GRID
) -> pd.DataFrame:
    """For each ``min_lift`` of the grid (the other thresholds of ``params`` kept): the pattern
    count and the fractions of turn pairs and of conversations that show a pattern."""
    trans = transitions(pairs, classes)
    rows = []
    for lift in grid:
        chosen = select_patterns(trans, replace(params, min_lift=float(lift)))
        hits = pattern_hits(pairs, chosen)
        rows.append(
            {
                'min_lift': float(lift),
                'patterns': len(chosen),
                'pairs_with_pattern': float((hits > 0).mean()) if len(pairs) else 0.0,
                'conversations_with_pattern': (
                    float((hits.groupby(pairs['conv_id']).sum() > 0).mean()) if len(pairs) else 0.0
                ),
            }
        )
    return pd.DataFrame(rows, columns=['min_lift', 'patterns', 'pairs_with_pattern', 'conversations_with_pattern'])


def resolve_min_lift(
    pairs: pd.DataFrame,
    classes: Sequence[str],
    params: PatternParams,
    max_fraction: float = MAX_PATTERN_FRACTION,
    grid: Sequence[float] = LIFT_GRID,
):
    """The lowest grid lift at which at most ``max_fraction`` of the conversations show a pattern,
    and the sweep it was read from. Raises if no grid lift qualifies."""
    sweep = lift_sweep(pairs, classes, params, grid)
    ok = sweep[sweep['conversations_with_pattern'] <= max_fraction]
    if ok.empty:
        raise ValueError(
            f'no min_lift in {grid[0]}..{grid[-1]} leaves at most {max_fraction:.0%} of the '
            f'conversations with a pattern (at {grid[-1]}: '
            f'{sweep["conversations_with_pattern"].iloc[-1]:.1%}); pass --pattern-min-lift explicitly'
        )
    return float(ok['min_lift'].iloc[0]), sweep


def pattern_hits(pairs: pd.DataFrame, patterns: pd.DataFrame) -> pd.Series:
    """Number of pattern transitions in each turn pair."""
    wanted = set(zip(patterns['speaker'], patterns['listener']))
    return pd.Series(
        [
            sum((a, b) in wanted for a in s for b in lst)
            for s, lst in zip(pairs['speaker_labels'], pairs['listener_labels'])
        ],
        index=pairs.index,
        dtype=int,
    )


def per_emotion(pairs: pd.DataFrame, classes: Sequence[str], params: PatternParams, top: int = 3) -> pd.DataFrame:
    """For each ED emotion, its strongest transitions (by lift, among those passing the thresholds
    scaled to the emotion's share of the pairs)."""
    rows = []
    for emotion, group in pairs.groupby('ed_emotion', sort=True):
        trans = transitions(group.reset_index(drop=True), classes)
        scaled = PatternParams(
            params.min_lift,
            max(3, int(params.min_support * len(group) / max(len(pairs), 1))),
            params.exclude_neutral,
            params.exclude_mirroring,
        )
        best = select_patterns(trans, scaled).head(top)
        for _, r in best.iterrows():
            rows.append(
                {
                    'ed_emotion': emotion,
                    'pairs': len(group),
                    'speaker': r['speaker'],
                    'listener': r['listener'],
                    'count': int(r['count']),
                    'rate': r['rate'],
                    'lift': r['lift'],
                }
            )
    return pd.DataFrame(rows, columns=['ed_emotion', 'pairs', 'speaker', 'listener', 'count', 'rate', 'lift'])


def heatmap(matrix: pd.DataFrame, title: str, path: str, log: bool = False) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    values = matrix.values.astype(float)
    if log:
        values = np.log2(np.where(values > 0, values, np.nan))
    fig, ax = plt.subplots(figsize=(11, 9))
    image = ax.imshow(
        values, cmap='RdBu_r' if log else 'viridis', aspect='auto', vmin=-3 if log else None, vmax=3 if log else None
    )
    ax.set_xticks(range(len(matrix.columns)), matrix.columns, rotation=90, fontsize=7)
    ax.set_yticks(range(len(matrix.index)), matrix.index, fontsize=7)
    ax.set_xlabel('Listener label')
    ax.set_ylabel('Speaker label')
    ax.set_title(title)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(
    pairs: pd.DataFrame, classes: Sequence[str], params: PatternParams, out_dir: str, top: int = 15
) -> Dict:
    """CSVs, PNG heatmaps and a Markdown summary under ``out_dir``; returns the key figures."""
    os.makedirs(out_dir, exist_ok=True)
    trans = transitions(pairs, classes)
    patterns = select_patterns(trans, params)
    emotions = per_emotion(pairs, classes, params)
    trans.to_csv(os.path.join(out_dir, 'transitions.csv'), index=False)
    patterns.to_csv(os.path.join(out_dir, 'patterns.csv'), index=False)
    emotions.to_csv(os.path.join(out_dir, 'per_ed_emotion.csv'), index=False)
    for column, log in (('count', False), ('rate', False), ('lift', True)):
        matrix = trans.pivot(index='speaker', columns='listener', values=column).loc[list(classes), list(classes)]
        matrix.to_csv(os.path.join(out_dir, f'{column}_matrix.csv'))
        heatmap(
            matrix,
            f'Speaker -> Listener GoEmotions {column}' + (' (log2)' if log else ''),
            os.path.join(out_dir, f'heatmap_{column}.png'),
            log=log,
        )
    hits = pattern_hits(pairs, patterns)
    conv_has = hits.groupby(pairs['conv_id']).sum() > 0
    figures = {
        'turn_pairs': len(pairs),
        'conversations': int(pairs['conv_id'].nunique()),
        'patterns': len(patterns),
        'pairs_with_pattern': float((hits > 0).mean()) if len(pairs) else 0.0,
        'conversations_with_pattern': float(conv_has.mean()) if len(conv_has) else 0.0,
        'params': params.as_dict(),
    }
    nonneutral = trans[(trans['speaker'] != 'neutral') & (trans['listener'] != 'neutral')]
    lines = [
        '# Speaker -> Listener emotion-interaction patterns (GoEmotions tags of ED)',
        '',
        f'{figures["turn_pairs"]} turn pairs in {figures["conversations"]} conversations.',
        '',
        f'Pattern set: lift >= {params.min_lift}, count >= {params.min_support}, '
        f'neutral {"excluded" if params.exclude_neutral else "included"}, mirroring '
        f'{"excluded" if params.exclude_mirroring else "included"}: **{len(patterns)} transitions**; '
        f'{figures["pairs_with_pattern"]:.1%} of turn pairs and {figures["conversations_with_pattern"]:.1%} of '
        'conversations show at least one.',
        '',
        '## Most frequent transitions (neutral excluded)',
        '',
        _markdown(nonneutral.sort_values('count', ascending=False).head(top)),
        '',
        '## Pattern set (by lift)',
        '',
        _markdown(patterns.head(top)),
        '',
        '## Per ED emotion (top 3 by lift)',
        '',
        _markdown(emotions),
        '',
        'Files: transitions.csv, patterns.csv, per_ed_emotion.csv, {count,rate,lift}_matrix.csv, '
        'heatmap_{count,rate,lift}.png; '
        '`parlai empathy_patterns` adds lift_sweep.csv (the min_lift choice) and subsets/',
    ]
    with open(os.path.join(out_dir, 'summary.md'), 'w', encoding='utf-8') as f:
        f.write('\n'.join(lines) + '\n')
    figures['top_patterns'] = patterns.head(10)[['speaker', 'listener', 'count', 'rate', 'lift']].to_dict('records')
    return figures


def _markdown(frame: pd.DataFrame) -> str:
    if frame.empty:
        return '(none)'
    cols = list(frame.columns)
    fmt = lambda v: f'{v:.3f}' if isinstance(v, float) else str(v)  # noqa: E731
    out = ['| ' + ' | '.join(cols) + ' |', '|' + '---|' * len(cols)]
    out += ['| ' + ' | '.join(fmt(v) for v in row) + ' |' for row in frame.itertuples(index=False)]
    return '\n'.join(out)


def label_usage(table: TagTable, ed_dir: str, split: str = 'test') -> pd.DataFrame:
    """How many utterances of a cleaned ED split carry each label (a label at 0 is never predicted)."""
    from parlai_empathy.data import ed_raw

    conversations, _ = ed_raw.read_clean(os.path.join(ed_dir, split + '.csv'))
    counts = {c: 0 for c in table.classes}
    total = 0
    for conv in conversations:
        for u in conv.utterances:
            total += 1
            for label in table.label_names(table.lookup(split, conv.conv_id, u.utterance_idx)):
                counts[label] += 1
    return pd.DataFrame([{'label': c, 'utterances': n, 'share': n / max(total, 1)} for c, n in counts.items()])


def compare(old_dir: str, new_dir: str, top: int = 15) -> str:
    """A Markdown comparison of two pattern reports (e.g. two taggers): headline fractions, the
    most frequent transitions side by side, and which pattern-set transitions came and went."""
    import json

    def load(folder):
        with open(os.path.join(folder, 'figures.json'), encoding='utf-8') as f:
            figures = json.load(f)
        trans = pd.read_csv(os.path.join(folder, 'transitions.csv'))
        pats = pd.read_csv(os.path.join(folder, 'patterns.csv'))
        return figures, trans, pats

    (f_old, t_old, p_old), (f_new, t_new, p_new) = load(old_dir), load(new_dir)
    lines = ['| figure | before | now |', '|---|---|---|']
    for key, fmt in (('patterns', '{:d}'), ('pairs_with_pattern', '{:.1%}'), ('conversations_with_pattern', '{:.1%}')):
        lines.append(f'| {key.replace("_", " ")} | {fmt.format(f_old[key])} | {fmt.format(f_new[key])} |')
    for preset in sorted(set(f_old.get('subsets', {})) & set(f_new.get('subsets', {}))):
        a, b = f_old['subsets'][preset], f_new['subsets'][preset]
        lines.append(
            f'| {preset}: conversations showing a pattern | {a["conversations_with_pattern"]:.1%} | '
            f'{b["conversations_with_pattern"]:.1%} |'
        )

    def frequent(trans):
        rows = trans[(trans['speaker'] != 'neutral') & (trans['listener'] != 'neutral')]
        return rows.sort_values('count', ascending=False).head(top).reset_index(drop=True)

    a, b = frequent(t_old), frequent(t_new)
    lines += [
        '',
        f'Most frequent transitions (neutral excluded), top {top}:',
        '',
        '| rank | before | count | lift | now | count | lift |',
        '|---|---|---|---|---|---|---|',
    ]
    for i in range(max(len(a), len(b))):
        left = (f'{a.speaker[i]} -> {a.listener[i]}', a['count'][i], f'{a.lift[i]:.2f}') if i < len(a) else ('', '', '')
        right = (
            (f'{b.speaker[i]} -> {b.listener[i]}', b['count'][i], f'{b.lift[i]:.2f}') if i < len(b) else ('', '', '')
        )
        lines.append(f'| {i + 1} | ' + ' | '.join(str(x) for x in left + right) + ' |')
    keys = lambda frame: set(zip(frame.speaker, frame.listener))  # noqa: E731
    kept, gone, new = keys(p_old) & keys(p_new), keys(p_old) - keys(p_new), keys(p_new) - keys(p_old)
    lines += ['', f'Pattern set: {len(kept)} transitions in both, {len(gone)} gone, {len(new)} new.']
    for name, group in (('gone', gone), ('new', new)):
        if group:
            lines.append(f'- {name}: ' + ', '.join(f'{s} -> {t}' for s, t in sorted(group)))
    return '\n'.join(lines) + '\n'


def ed_turn_pairs(table: TagTable, ed_dir: str, split: str = 'train') -> pd.DataFrame:
    """The turn pairs of one cleaned ED split, with their tags (same reader as the tagger)."""
    from parlai_empathy.data import ed_raw

    conversations, _ = ed_raw.read_clean(os.path.join(ed_dir, split + '.csv'))
    utterances = [Utterance(split, c.conv_id, u.utterance_idx, u.text) for c in conversations for u in c.utterances]
    return turn_pairs(table, utterances, {c.conv_id: c.emotion for c in conversations})
