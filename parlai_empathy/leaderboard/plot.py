"""The board's figure, ``leaderboard.png``: one panel per headline metric, each row's bar coloured by
its model family, the paper's figure on the bars' scale (:func:`headline_panels` gives its data,
:func:`draw_panels` draws it)."""

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from parlai_empathy.leaderboard import formatting
from parlai_empathy.leaderboard.columns import HEADLINE
from parlai_empathy.leaderboard.records import EntryResult
from parlai_empathy.metrics.retrieval import METRIC as P100
from parlai_empathy.metrics.retrieval import SHUFFLED_METRIC as P100_SHUFFLED

# the figure's panels, three a row, so that panels of about as many bars share a row
PLOT_ORDER = [
    P100,
    P100_SHUFFLED,
    'accuracy',
    'avg_bleu',
    'multi_bleu',
    'bertscore_f',
    'dist-1',
    'dist-2',
    'ppl_ex',
    'ppl_word',
    'emo_acc',
    'ppl_ex_gold',
    'macro_f1',
]
FAMILY_COLOURS = {'ranker': '#4C72B0', 'generator': '#DD8452', 'classifier': '#55A868', 'published': '#937860'}
OTHER_COLOUR = '#8172B3'
LABEL_WIDTH = 24  # characters of a bar's label per line; a longer one wraps at '_' or '-'


@dataclass(frozen=True)
class Bar:
    """One row's bar: ``value`` and the paper's figure ``paper`` both on the panel's scale."""

    name: str  # the row's name on the board (``project/entry``)
    label: str  # what the figure writes beside the bar (the entry; its project heads the group)
    value: float
    paper: Optional[float]
    kind: Optional[str]
    interval: Optional[Tuple[float, float]] = None  # the figure's 95 % bootstrap interval, on the panel's scale


@dataclass(frozen=True)
class Panel:
    key: str
    title: str
    unit: str
    scale: float
    groups: List[Tuple[str, List[Bar]]]  # (project, its rows' bars), in the board's row order

    @property
    def bars(self) -> List[Bar]:
        return [bar for _, bars in self.groups for bar in bars]

    @property
    def heading(self) -> str:
        return f'{self.title} ({self.unit})'


def split_name(name: str) -> Tuple[str, str]:
    """``project/entry`` -> (project, entry); a name with no project is its own label."""
    project, sep, entry = name.partition('/')
    return (project, entry) if sep else ('', name)


def short_label(text: str, width: int = LABEL_WIDTH) -> str:
    """``text`` in lines of at most ``width`` characters, broken after '_' or '-' where it can be
    (and mid-word only where a part is longer than a line)."""
    parts, part = [], ''
    for char in text:
        part += char
        if char in '_-':
            parts.append(part)
            part = ''
    parts += [part] if part else []
    lines, line = [], ''
    for part in parts:
        while len(part) > width:
            if line:
                lines.append(line)
                line = ''
            lines.append(part[:width])
            part = part[width:]
        if len(line) + len(part) > width:
            lines.append(line)
            line = ''
        line += part
    return '\n'.join(lines + ([line] if line else []))


def headline_panels(results: List[EntryResult]) -> List[Panel]:
    """The figure's data: one panel per headline metric (in :data:`PLOT_ORDER`) with the rows that
    have it, grouped by project (each named once). A row's ``paper`` figures are on its report's
    scale (as its ``values``: :func:`~parlai_empathy.leaderboard.rows.gather_artifacts`), so bar and
    paper marker take the same ``scale``."""
    by_key = {h.key: h for h in HEADLINE}
    panels = []
    for key in PLOT_ORDER:
        headline = by_key[key]
        groups: Dict[str, List[Bar]] = {}  # in the order projects first appear
        for r in results:
            if key not in r.values:
                continue
            project, entry = split_name(r.name)
            paper = r.paper_value(key)
            low_high = (r.ci95 or {}).get(key)
            groups.setdefault(project, []).append(
                Bar(
                    r.name,
                    short_label(entry),
                    r.values[key] * headline.scale,
                    None if paper is None else paper * headline.scale,
                    r.kind,
                    None if low_high is None else (low_high[0] * headline.scale, low_high[1] * headline.scale),
                )
            )
        if groups:
            panels.append(Panel(key, headline.title, headline.unit, headline.scale, list(groups.items())))
    return panels


def _slots(panel: Panel) -> List[Tuple[str, Optional[Bar]]]:
    """The panel's y positions, top to bottom: a project's name (bold, no bar) above its rows."""
    slots = []
    for project, bars in panel.groups:
        if project or len(panel.groups) > 1:  # rows with no project are not left under another's name
            slots.append((project or '(no project)', None))
        slots += [(bar.label, bar) for bar in bars]
    return slots


def draw_panels(panels: List[Panel], path: str) -> None:
    """Draw :func:`headline_panels`' data: horizontal bars coloured by model family, the paper's
    figure as a black tick on its row, each value (and the paper's) written beside its bar."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    cols = min(3, len(panels)) or 1
    grid = [panels[i : i + cols] for i in range(0, len(panels), cols)] or [[]]
    # a row of panels is as tall as its longest panel, so bars are equally thick within a row
    row_slots = [max([sum(s.count('\n') + 1 for s, _ in _slots(p)) for p in row] or [1]) for row in grid]
    slot_inches = 0.2
    fig = plt.figure(figsize=(5.4 * cols, 0.6 + sum(slot_inches * n + 0.75 for n in row_slots)))
    spec = fig.add_gridspec(len(grid), cols, height_ratios=[slot_inches * n + 0.75 for n in row_slots])
    for row, (line, slots_in_row) in enumerate(zip(grid, row_slots)):
        for col, panel in enumerate(line):
            ax = fig.add_subplot(spec[row, col])
            _draw_panel(ax, panel, slots_in_row)
    kinds = {bar.kind for panel in panels for bar in panel.bars}
    handles = [matplotlib.patches.Patch(color=c, label=k) for k, c in FAMILY_COLOURS.items() if k in kinds]
    if kinds - set(FAMILY_COLOURS):
        handles.append(matplotlib.patches.Patch(color=OTHER_COLOUR, label='other'))
    if any(bar.paper is not None for panel in panels for bar in panel.bars):
        handles.append(matplotlib.lines.Line2D([], [], color='black', label="paper's figure (same scale)"))
    if any(bar.interval is not None for panel in panels for bar in panel.bars):
        handles.append(
            matplotlib.lines.Line2D(
                [], [], color='#333333', linewidth=0.9, label='95 % bootstrap interval over test examples'
            )
        )
    fig.legend(handles=handles, loc='upper center', ncol=len(handles), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / fig.get_figheight()))
    fig.savefig(path, dpi=100, metadata={'Software': None})
    plt.close(fig)


def _draw_panel(ax, panel: Panel, height: int) -> None:
    slots = _slots(panel)
    # a label of two lines takes the room of two slots
    positions, y = [], 0.0
    for label, _ in slots:
        lines = label.count('\n') + 1
        positions.append(y + (lines - 1) / 2)
        y += lines
    bars = [(pos, bar) for pos, (_, bar) in zip(positions, slots) if bar is not None]
    ax.barh(
        [pos for pos, _ in bars],
        [bar.value for _, bar in bars],
        height=0.8,
        color=[FAMILY_COLOURS.get(bar.kind, OTHER_COLOUR) for _, bar in bars],
    )
    for pos, bar in bars:
        if bar.interval is not None:
            ax.plot(bar.interval, [pos, pos], color='#333333', linewidth=0.9)
        if bar.paper is not None:
            ax.plot([bar.paper, bar.paper], [pos - 0.4, pos + 0.4], color='black', linewidth=1.5)
        text = f' {formatting.figure(bar.value)}'
        if bar.paper is not None:
            text += f'  (paper {formatting.figure(bar.paper)})'
        ax.text(
            max(bar.value, bar.paper or 0.0, bar.interval[1] if bar.interval else 0.0),
            pos,
            text,
            va='center',
            fontsize=7,
        )
    ax.set_yticks(positions, [label for label, _ in slots], fontsize=7.5)
    for tick, (_, bar) in zip(ax.get_yticklabels(), slots):
        if bar is None:
            tick.set_fontweight('bold')
    ax.set_ylim(height - 0.5, -0.5)
    top = max(max(bar.value, bar.paper or 0.0, bar.interval[1] if bar.interval else 0.0) for _, bar in bars)
    ax.set_xlim(0, top * 1.45 or 1)  # room for the values written beside the longest bar
    ax.set_title(panel.heading, fontsize=10)
    ax.set_xlabel(panel.unit, fontsize=8)
    ax.tick_params(axis='x', labelsize=7.5)


def plot_headline(results: List[EntryResult], path: str) -> None:
    """One panel per headline metric, bars coloured by model family, only rows that have it."""
    draw_panels(headline_panels(results), path)
