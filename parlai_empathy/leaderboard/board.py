"""The board's files: ``results.json`` and ``leaderboard.csv`` hold every figure,
``leaderboard.md`` the headline metrics in one table (then each model family's other figures),
``leaderboard.png`` one panel per headline metric (:mod:`parlai_empathy.leaderboard.plot`)."""

import csv
import os
from typing import Dict, List

from parlai_empathy.evidence import artifacts as evidence
from parlai_empathy.leaderboard import human, plot
from parlai_empathy.leaderboard.columns import HEADLINE, board_columns
from parlai_empathy.leaderboard.formatting import figure
from parlai_empathy.leaderboard.records import EntryResult

BOARD_FILES = ('results.json', 'leaderboard.md', 'leaderboard.csv', 'leaderboard.png')
FAMILIES = [
    ('ranker', 'Response rankers'),
    ('generator', 'Response generators'),
    ('classifier', 'Emotion classifiers'),
    ('published', "Other papers' released test outputs, scored by the suite"),
    (None, 'Other rows'),
]


def row_name(result: EntryResult) -> str:
    """The row's name in the markdown tables: a published row says whose outputs it scores."""
    return f'{result.name}: {result.label}' if result.label else result.name


def write_outputs(results: List[EntryResult], outdir: str, notes: Dict[str, str]) -> Dict[str, str]:
    """results.json and leaderboard.csv hold every figure; leaderboard.md the headline table (and
    the other figures by model family); leaderboard.png the headline panels."""
    os.makedirs(outdir, exist_ok=True)
    columns = board_columns(results)
    paths = {name: os.path.join(outdir, name) for name in BOARD_FILES}
    evidence.write_json(paths['results.json'], {'results': [r.to_json() for r in results], 'notes': notes})
    # the figures' columns first, then each interval's bounds: a column added to the figures later
    # lands before the intervals, which follow the figures' order
    bounds = interval_columns(results, columns)
    with open(paths['leaderboard.csv'], 'w', newline='') as f:
        writer = csv.writer(f, lineterminator='\n')
        writer.writerow(['model'] + columns + [f'{c} ci95 {side}' for c in bounds for side in ('low', 'high')])
        for r in results:
            writer.writerow(
                [r.name]
                + [r.values.get(c, '') for c in columns]
                + [x for c in bounds for x in ((r.ci95 or {}).get(c) or ['', ''])]
            )
    with open(paths['leaderboard.md'], 'w') as f:
        f.write(markdown_board(results, notes))
    plot.plot_headline(results, paths['leaderboard.png'])
    return paths


def interval_columns(results: List[EntryResult], columns: List[str]) -> List[str]:
    """The columns, in ``columns``' order, for which some row has a bootstrap interval."""
    return [c for c in columns if any(c in (r.ci95 or {}) for r in results)]


def interval_cell(result: EntryResult, key: str, scale: float = 1) -> str:
    """``low–high`` of ``key``'s 95 % interval on the table's scale; nothing where there is none."""
    low_high = (result.ci95 or {}).get(key)
    if not low_high:
        return ''
    return f'{figure(low_high[0] * scale)}–{figure(low_high[1] * scale)}'


def markdown_intervals(results: List[EntryResult]) -> List[str]:
    """The headline figures' 95 % bootstrap intervals, on the headline table's scale, for every row
    that has any (the lines of a markdown section)."""
    headlines = [h for h in HEADLINE if any(h.key in (r.ci95 or {}) for r in results)]
    rows = [r for r in results if any(h.key in (r.ci95 or {}) for h in headlines)]
    if not rows:
        return []
    from parlai_empathy.metrics.bootstrap import RESAMPLES, SEED

    lines = [
        '',
        '### 95 % bootstrap intervals of the headline figures',
        '',
        f'Over test examples, {RESAMPLES:,} resamples with replacement (seed {SEED}), percentile intervals; '
        "Distinct-n's moved by the bootstrap's bias estimate (`parlai_empathy/metrics/bootstrap.py`). "
        "Every other figure's interval is in `leaderboard.csv` (`<figure> ci95 low/high`) and `results.json`; "
        '`parlai empathy_score --compare A B` tests two rows on the examples both have.',
        '',
    ]
    lines += _md_table(
        ['model'] + [h.column for h in headlines],
        [[row_name(r)] + [interval_cell(r, h.key, h.scale) for h in headlines] for r in rows],
    )
    return lines


def interval_listing(results: List[EntryResult]) -> str:
    """Every figure that has an interval, row by row, unrounded to four digits: what
    ``parlai empathy_leaderboard --intervals`` prints."""
    body = [
        [row_name(r), key, figure(r.values.get(key)), f'{figure(low)} – {figure(high)}']
        for r in results
        for key, (low, high) in (r.ci95 or {}).items()
    ]
    return '\n'.join(_md_table(['model', 'figure', 'value', '95 % interval'], body)) + '\n'


def _md_table(header: List[str], rows: List[List[str]]) -> List[str]:
    return ['| ' + ' | '.join(header) + ' |', '|---' * len(header) + '|'] + [
        '| ' + ' | '.join(cells) + ' |' for cells in rows
    ]


def markdown_board(results: List[EntryResult], notes: Dict[str, str]) -> str:
    """leaderboard.md: the headline metrics of every row in one table, on the scale the figure
    shows them; then, for each model family, its rows' other figures as the suite reports them
    (so every figure of the CSV is in one of the tables); the settings notes; the commands."""
    headlines = [h for h in HEADLINE if any(h.key in r.values for r in results)]
    lines = _md_table(
        ['model'] + [h.column for h in headlines],
        [
            [row_name(r)] + [figure(r.values[h.key] * h.scale) if h.key in r.values else '' for h in headlines]
            for r in results
        ],
    )
    lines += ['', 'Columns (the `leaderboard.csv` column, times the factor the table shows it at):', '']
    lines += [
        f'- **{h.column}** = `{h.key}`'
        + (f' × {h.scale:g}' if h.scale != 1 else '')
        + f': {h.title} ({h.unit})'
        + (f'; {h.note}' if h.note else '')
        for h in headlines
    ]
    lines += markdown_intervals(results)
    lines += [
        '',
        'Every figure of every row, unrounded, is in `leaderboard.csv` and `results.json`; the tables '
        "below give each family's other figures as the suite reports them (rates as fractions).",
    ]
    shown = {h.key for h in headlines}
    known = {kind for kind, _ in FAMILIES}
    for kind, title in FAMILIES:
        rows = [r for r in results if (r.kind if r.kind in known else None) == kind]
        columns = [c for c in board_columns(rows) if c not in shown]
        rows = [r for r in rows if any(c in r.values for c in columns)]  # a row with none has no line here
        if rows and columns:
            lines += ['', f'### {title}: other figures', '']
            lines += _md_table(
                ['model'] + columns, [[row_name(r)] + [figure(r.values.get(c)) for c in columns] for r in rows]
            )
    aligned = [r for r in results if r.alignment]
    if aligned:
        keys = [
            'outputs',
            'matched',
            'matched_by_last_turn',
            'ambiguous',
            'unmatched',
            'duplicate',
            'ed_test_examples_without_output',
        ]
        lines += [
            '',
            "### Released outputs: each file's replies matched with the ED test examples",
            '',
            'Only matched replies are scored, against the same gold replies as our rows '
            '(`parlai_empathy/metrics/alignment.py`); every other output is listed by line in the '
            "row's `alignment.json`.",
            '',
        ]
        lines += _md_table(
            ['model'] + [k.replace('_', ' ') for k in keys],
            [[row_name(r)] + [str(r.alignment.get(k, '')) for k in keys] for r in aligned],
        )
    lines += human.markdown(results)
    lines += ['', '### Settings', '']
    lines += [f'- {key}: {note}' for key, note in sorted(notes.items())]
    lines += ['', '### Commands', '']
    for r in results:
        for command in r.commands or []:
            lines.append(f'- `{r.name}`: `{command}`')
    return '\n'.join(lines) + '\n'
