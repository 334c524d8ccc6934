"""Model cards in ParlAI's model-card layout (the sections of ``parlai generate_model_card``).

Model Details (with Quick Usage and Sample Input And Output), Intended Use, Limitations, Privacy,
Datasets Used, Evaluation Results, Related Paper(s), Hyperparameters, Feedback. The figures come
from the row's artifacts: a leaderboard ``results.json`` row (ours) and the project's
``table.json`` (the paper's figures, the metric labels and scales, the command behind the row).
"""

import datetime
import os
from typing import Dict, List, Optional

from parlai_empathy.integration.safe_loading import agent_kind

PAPERS = {
    'empathy/bert_ranker': (
        'BERT bi-encoder retrieval model (Rashkin et al., 2019)',
        'Hannah Rashkin, Eric Michael Smith, Margaret Li, Y-Lan Boureau. "Towards '
        'Empathetic Open-domain Conversation Models: a New Benchmark and Dataset". '
        'ACL 2019.',
    ),
    'empathy/mime': (
        'MIME (Majumder et al., 2020)',
        'Navonil Majumder et al. "MIME: MIMicking Emotions for Empathetic Response Generation". EMNLP 2020.',
    ),
    'empathy/multitask_transformer': (
        "Multi-TR, the multitask transformer baseline (Rashkin et al., 2019; MIME's Multi-TR)",
        'Rashkin et al., ACL 2019 (Multitask); Majumder et al., EMNLP 2020 (Multi-TR).',
    ),
    'empathy/ethreed': ('ETHREED (Li et al.)', 'Li et al., ETHREED; see projects/li_ethreed/README.md.'),
    'empathy/emotion_classifier': (
        'Emotion classifier over a BERT-family encoder',
        'Metz & You, "Emotion modeling for improving empathy", 2020; Demszky et al., "GoEmotions", ACL 2020.',
    ),
}
ED_LICENSE = (
    'EmpatheticDialogues (Rashkin et al., 2019) is released by Facebook AI Research under the '
    'Creative Commons Attribution-NonCommercial 4.0 license (CC BY-NC 4.0, '
    'https://creativecommons.org/licenses/by-nc/4.0/). This model was trained on it; check what '
    'that license means for your use of the model.'
)


def count_parameters(model_file: str) -> int:
    from parlai_empathy.integration.safe_loading import load_checkpoint

    weights = load_checkpoint(model_file)['model']
    return int(sum(t.numel() for t in weights.values() if hasattr(t, 'numel')))


def _project_row(projects_dir: Optional[str], project: Optional[str], row: Optional[str]):
    """``(table, row)``: the table of ``projects/<project>/table.json`` that holds the row (its
    ``metrics`` and ``rows``), and the row, with ``command``: its cpu plan as shell lines,
    placeholders kept ({runs}, {model}, {artifacts})."""
    if not (projects_dir and project and row):
        return None, None
    from parlai_empathy.evidence.artifacts import read_json
    from parlai_empathy.evidence.reproduce import Step
    from parlai_empathy.leaderboard.rows import project_tables

    path = os.path.join(projects_dir, project, 'table.json')
    if not os.path.isfile(path):
        raise ValueError(
            f'--project {project}: {path} does not exist (run from a checkout of '
            'parlai-empathy, or pass --projects-dir DIR)'
        )
    spec = read_json(path, ValueError)
    tables = project_tables(spec)
    for table in tables:
        found = [r for r in table.get('rows', []) if r.get('entry') == row]
        if found:
            table_row = dict(found[0])
            plan = spec.get('reproduce', {}).get('rows', {}).get(row, {}).get('cpu', [])
            if plan and not table_row.get('command'):
                # rendered as reproduce renders its steps, placeholders unfilled
                table_row['command'] = '\n'.join(
                    Step(step.get('name', ''), [str(a) for a in step['parlai']]).shell() for step in plan
                )
            return table, table_row
    entries = ', '.join(str(r.get('entry')) for table in tables for r in table.get('rows', []))
    raise ValueError(f'{path}: no row with "entry": {row!r} (rows: {entries})')


def _ours(results: Optional[str], row: str, project: Optional[str] = None) -> Dict:
    """The row's figures in a board's ``results.json``: the board built from the artifacts names
    its rows ``project/row``, a board of ad-hoc entries by their names."""
    if not results:
        return {}
    from parlai_empathy.leaderboard.evaluation import earlier_result
    from parlai_empathy.leaderboard.records import Entry

    if project and '#' not in results:
        try:
            return earlier_result(Entry(row, f'{results}#{project}/{row}')).values
        except ValueError:
            pass
    return earlier_result(Entry(row, results)).values


def evaluation_table(spec: Optional[Dict], table_row: Optional[Dict], ours: Dict) -> List[str]:
    from parlai_empathy.leaderboard.formatting import figure

    if spec:
        metrics = spec['metrics']
    else:
        from parlai_empathy.leaderboard.columns import SHOWN

        metrics = [{'key': k, 'label': k, 'scale': 1} for k in SHOWN if k in ours]
    paper = (table_row or {}).get('paper', {})
    lines = ['| metric | ours | paper |', '|---|---|---|']
    for m in metrics:
        mine = ours.get(m['key'])
        if mine is None and m['key'] not in paper:
            continue
        lines.append(
            f'| {m["label"]} | {figure(mine * m.get("scale", 1) if mine is not None else None)} '
            f'| {figure(paper.get(m["key"]))} |'
        )
    return lines if len(lines) > 2 else []


def non_default_options(opt: Dict) -> List[str]:
    """``--option value`` for every option of the model's .opt that differs from its default."""
    from parlai.core.params import ParlaiParser

    parser = ParlaiParser(True, True)
    defaults = parser.parse_args(['-m', opt['model'], '-t', opt.get('task') or 'empathy_ed_clean'])
    flags = {}
    for action in parser._actions:
        longs = [s for s in action.option_strings if s.startswith('--')]
        if longs:
            flags.setdefault(action.dest, longs[0])

    def same(a, b):
        return list(a) == list(b) if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) else a == b

    out = []
    for key in sorted(opt):
        value = opt[key]
        if key not in flags or key in ('model', 'task', 'datatype') or same(value, defaults.get(key)):
            continue
        if isinstance(value, bool):
            value = 'true' if value else 'false'
        elif isinstance(value, (list, tuple)):
            value = ','.join(str(v) for v in value)
        out.append(f'{flags[key]} {value}')
    return out


def _data_line(opt: Dict) -> str:
    sample = opt.get('ed_datapath') == 'sample'
    where = (
        'the small EmpatheticDialogues sample embedded in parlai-empathy (`--ed-datapath sample`; '
        'a tiny demonstration model, not a useful one)'
        if sample
        else 'EmpatheticDialogues (full train split)'
    )
    sides = ', the listener side only (`--train-experiencer-only true`)' if opt.get('train_experiencer_only') else ''
    return f'- `{opt.get("task")}`: {where}{sides}.'


def _limitations(kind: str) -> List[str]:
    common = [
        'English only; trained on crowd-sourced conversations about everyday situations, with the '
        'biases of that data and no safety filtering of its own.',
        'Not a counselling or mental-health tool: it has no understanding of the person, and it '
        'can be wrong or hurtful.',
    ]
    per_kind = {
        'ranker': [
            'It never writes text: every reply is a listener response from its packed pool '
            '(ED train), chosen by similarity, so it can be off-topic.'
        ],
        'generator': [
            'A small model trained from scratch: replies are often generic, repetitive or '
            'incoherent; the predicted emotion is one of the 32 ED labels and is often wrong '
            '(see emo_acc below).'
        ],
        'classifier': [
            'Its label set is fixed by its training task; multi-label decisions depend on '
            'the threshold in model.opt (`multilabel_threshold`).'
        ],
    }
    return per_kind[kind] + common


def render(
    name: str,
    version: str,
    agent: str,
    opt: Dict,
    sample: Dict,
    parameters: int,
    dropped: List[str] = (),
    results: Optional[str] = None,
    project: Optional[str] = None,
    row: Optional[str] = None,
    projects_dir: Optional[str] = 'projects',
    description: str = '',
) -> str:
    title, paper = PAPERS[agent]
    kind = agent_kind(agent)
    spec, table_row = _project_row(projects_dir, project, row)
    ours = _ours(results, row or name, project)
    zoo = f'zoo:empathy/{name}/model'
    out = [f'# {title}: `{zoo}`', '']
    if description:
        out += [description, '']
    out += [
        '## Model Details',
        '',
        f'- agent: `{agent}` ({kind}), {parameters:,} parameters',
        f'- release: `{name}-{version}.tar.gz`, packaged {datetime.date.today().isoformat()} '
        f'with `parlai empathy_package_model`',
        '- license of the code: MIT; of the training data: CC BY-NC 4.0 (see Datasets Used)',
        '',
        '### Quick Usage',
        '',
        '```bash',
        f'parlai interactive -mf {zoo}',
        f'parlai empathy_chat -mf {zoo}        # web chat on http://127.0.0.1:8080',
        '```',
        '',
    ]
    shown = {k: v for k, v in sample.items() if k != 'input'}
    out += ['### Sample Input And Output', '', '```', f'input: {sample.get("input")}']
    out += [f'{key}: {value}' for key, value in shown.items()]
    out += [
        '```',
        '',
        '## Intended Use',
        '',
        'Research on empathetic dialogue: talking to the model, comparing it with the paper it '
        'reproduces, and human evaluation. It is not meant to talk to people who need support.',
        '',
        '## Limitations',
        '',
    ]
    out += [f'- {line}' for line in _limitations(kind)] + ['']
    out += [
        '## Privacy',
        '',
        'The release holds weights, options, a vocabulary'
        + (
            ', and the listener responses of ED train it answers with (written by crowd workers)'
            if kind == 'ranker'
            else ''
        )
        + '; no conversations of its users. `parlai empathy_chat` keeps a conversation in memory '
        'only while it lasts and listens on 127.0.0.1.',
        '',
        '## Datasets Used',
        '',
        _data_line(opt),
        '',
        ED_LICENSE,
        '',
        '## Evaluation Results',
        '',
    ]
    table = evaluation_table(spec, table_row, ours)
    if table:
        # the results file by its name only: the packaging machine's folders mean nothing to a reader
        where = f'`{os.path.basename(results)}`' if results else 'no results file given'
        paper_source = f'; paper: `projects/{project}/table.json`' if project else '; no paper row given'
        split = 'the test split of the embedded ED sample' if opt.get('ed_datapath') == 'sample' else 'ED test'
        out += (
            [f"{split[0].upper()}{split[1:]}, the project's metric suite (ours: {where}{paper_source}).", '']
            + table
            + ['']
        )
    else:
        out += [
            'No evaluation figures were given when this release was packaged (`--results` with a '
            'leaderboard results.json).',
            '',
        ]
    out += ['## Related Paper(s)', '', paper, '', '## Hyperparameters', '']
    if table_row and table_row.get('command'):
        out += [
            'The commands behind the evaluated row (its cpu plan in `projects/{}/table.json`; '
            '`{{runs}}` is the runs folder, `{{model}}` the model file):'.format(project),
            '',
            '```bash',
            table_row['command'],
            '```',
            '',
            f'Re-run it from a checkout: `parlai empathy_reproduce --project {project} --rows {row}`.',
            '',
        ]
    try:
        options = non_default_options(opt)
    except Exception as err:  # the card is still useful without this list
        options = [f'(could not compare with the defaults: {type(err).__name__}: {err})']
    out += (
        ['Every option of `model.opt` that differs from its default:', '', '```', f'-m {agent} -t {opt.get("task")}']
        + options
        + ['```', '']
    )
    if dropped:
        out += [
            'Dropped from the packaged options (paths on the training machine): '
            + ', '.join(f'`{k}`' for k in sorted(set(dropped)))
            + '.',
            '',
        ]
    out += [
        '## Feedback',
        '',
        'Please report problems with this model or its card in the parlai-empathy issue tracker.',
        '',
    ]
    return '\n'.join(out)
