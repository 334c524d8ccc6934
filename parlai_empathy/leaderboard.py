"""A leaderboard: every model evaluated on ED test with the one metric suite.

Each entry is a trained model file (evaluated here, in ParlAI's own eval loop, with the suite's
metrics recorded by the ED teacher), a saved ``eval_model`` report, saved world logs (scored
offline with the same code), or a row of an earlier leaderboard's ``results.json``
(``name=path/results.json``, or ``name=path/results.json#row`` for a row named otherwise): runs
evaluated one at a time are gathered into one board without evaluating anything again. Rankers are evaluated twice, as Rashkin et al. did: P@1,100 on the
test set's 100-example candidate blocks, and BLEU of the response retrieved from the ED train
listener pool. BERTScore is computed once per model from the world logs, in batches.

Outputs: ``results.json`` (figures, settings, the command behind each figure), ``leaderboard.md``,
``leaderboard.csv`` and ``leaderboard.png``. :func:`fill_project_tables` writes the figures into
``projects/<paper>/README.md`` tables described by ``projects/<paper>/table.json``.
"""
import csv
import json
import os
import shlex
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from parlai_empathy.metrics.retrieval import SHUFFLED_METRIC as P100_SHUFFLED
from parlai_empathy.metrics.suite import COLUMNS, ScoredExample, score_examples, suite_values

SHOWN = ['p@1,100', P100_SHUFFLED, 'avg_bleu', 'multi_bleu', 'dist-1', 'dist-2', 'bertscore_f', 'ppl', 'emo_acc', 'emo_acc@2', 'emo_acc@5']


@dataclass
class Entry:
    name: str
    path: str  # model file, report .json, or world logs .jsonl
    extra_args: List[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        if '#' in self.path or os.path.basename(self.path) == 'results.json':
            return 'leaderboard'
        if self.path.endswith('.jsonl'):
            return 'world_logs'
        if self.path.endswith('.json') and not os.path.exists(self.path + '.opt'):
            return 'report'
        return 'model'


def parse_entries(specs: List[str]) -> List[Entry]:
    """``name=path`` (or a bare path, named after its file)."""
    entries = []
    for spec in specs:
        name, _, path = spec.partition('=') if '=' in spec else (os.path.basename(spec), '', spec)
        file_path = path.split('#', 1)[0]
        if not os.path.exists(file_path) and not os.path.exists(file_path + '.opt'):
            raise FileNotFoundError(f'leaderboard entry {name!r}: {path} does not exist')
        entries.append(Entry(name, path))
    return entries


def model_kind(model_file: str) -> str:
    """'ranker' or 'generator', from the agent class the model file was trained with."""
    from parlai.core.loader import load_agent_module
    from parlai.core.torch_generator_agent import TorchGeneratorAgent
    from parlai.core.torch_ranker_agent import TorchRankerAgent

    with open(model_file + '.opt') as f:
        model = json.load(f).get('model', '')
    agent_class = load_agent_module(model)
    if issubclass(agent_class, TorchRankerAgent):
        return 'ranker'
    if issubclass(agent_class, TorchGeneratorAgent):
        return 'generator'
    raise ValueError(
        f'{model_file}: {model} is neither a response generator nor a response ranker, so it has '
        'no place on the response leaderboard (evaluate classifiers with parlai eval_model)'
    )


def attach_entry_args(entries: List[Entry], specs: List[str]) -> None:
    """``name=ARGS`` adds eval_model arguments for one entry (e.g. ``gen='--inference beam'``)."""
    by_name = {e.name: e for e in entries}
    for spec in specs or []:
        name, sep, args = spec.partition('=')
        if not sep or name not in by_name:
            raise ValueError(f'--entry-args {spec!r}: expected NAME=ARGS with NAME one of {sorted(by_name)}')
        by_name[name].extra_args += shlex.split(args)


def _eval(opt_args: List[str], world_logs: Optional[str], desc: str, progress: bool):
    """ParlAI's eval loop (as in ``eval_model``) with a progress bar over examples."""
    from parlai.core.agents import create_agent
    from parlai.core.worlds import create_task
    from parlai.scripts.eval_model import setup_args
    from parlai.utils.world_logging import WorldLogger
    from tqdm import tqdm

    args = list(opt_args) + (['--world-logs', world_logs] if world_logs else [])
    opt = setup_args().parse_args(args)
    agent = create_agent(opt, requireModelExists=True)
    world_logger = WorldLogger(opt) if world_logs else None
    world = create_task(opt, agent)
    total = world.num_examples()
    if opt['num_examples'] > 0:  # -ne N, as in eval_model
        total = min(total, opt['num_examples'])
    bar = tqdm(total=total, desc=desc, unit='ex', disable=not progress, leave=False)
    seen = 0
    while not world.epoch_done() and seen < total:
        world.parley()
        if world_logger is not None:
            world_logger.log(world)
        seen += opt.get('batchsize', 1)
        bar.update(opt.get('batchsize', 1))
    bar.close()
    if world_logger is not None:
        world_logger.reset()
        world_logger.write(world_logs, world, file_format='conversations')
    report = world.report()
    world.reset()
    return report


def evaluate_entry(entry: Entry, task: str, outdir: str, common_args: List[str], pool_path: Optional[str],
                   progress: bool = True, p100_shuffled: bool = True) -> Dict:
    """Figures for one entry, with the command lines that reproduce them."""
    started = time.time()
    result = {'name': entry.name, 'path': entry.path, 'source': entry.source, 'values': {}, 'commands': []}
    if entry.source == 'leaderboard':
        return earlier_result(entry)
    if entry.source == 'report':
        with open(entry.path) as f:
            saved = json.load(f)
        result['values'] = suite_values(saved.get('report', saved))
        result['seconds'] = time.time() - started
        return result
    if entry.source == 'world_logs':
        result['world_logs'] = entry.path
        result['seconds'] = time.time() - started
        return result

    kind = model_kind(entry.path)
    result['kind'] = kind
    base = ['-t', task, '-dt', 'test', '-mf', entry.path] + common_args + entry.extra_args
    logs = os.path.join(outdir, f'{entry.name}.world_logs.jsonl')
    if kind == 'ranker':
        p100 = base + ['--ed-candidates', 'rashkin100', '--eval-candidates', 'inline']
        report = _eval(p100, None, f'{entry.name} P@1,100', progress)
        result['values'].update(suite_values(report))
        result['commands'].append('parlai eval_model ' + shlex.join(p100))
        if p100_shuffled:
            shuffled = base + ['--ed-candidates', 'rashkin100_shuffled', '--ed-candidates-seed', '0',
                               '--eval-candidates', 'inline']
            values = suite_values(_eval(shuffled, None, f'{entry.name} P@1,100 shuffled', progress))
            if P100_SHUFFLED in values:
                result['values'][P100_SHUFFLED] = values[P100_SHUFFLED]
            result['commands'].append('parlai eval_model ' + shlex.join(shuffled))
        if pool_path is None:
            raise ValueError('rankers need the retrieval pool (--pool); build it with parlai empathy_build_candidates')
        # test responses are not in the train pool: ParlAI must not look for the gold among them
        retrieve = base + ['--eval-candidates', 'fixed', '--fixed-candidates-path', pool_path,
                           '--ignore-bad-candidates', 'true', '--ed-candidates', 'none']
        report = _eval(retrieve, logs, f'{entry.name} retrieval', progress)
        retrieved = {k: v for k, v in suite_values(report).items() if k != 'p@1,100'}
        result['values'].update(retrieved)
        result['commands'].append('parlai eval_model ' + shlex.join(retrieve + ['--world-logs', logs]))
    else:
        generate = base + ['--skip-generation', 'false', '--ed-candidates', 'none']
        report = _eval(generate, logs, f'{entry.name} generation', progress)
        result['values'].update(suite_values(report))
        result['commands'].append('parlai eval_model ' + shlex.join(generate + ['--world-logs', logs]))
    result['world_logs'] = logs
    result['seconds'] = time.time() - started
    return result


def earlier_result(entry: Entry) -> Dict:
    """The row of an earlier leaderboard's results.json, renamed to this entry."""
    path, _, row = entry.path.partition('#')
    with open(path) as f:
        rows = json.load(f).get('results', [])
    wanted = row or entry.name
    found = [r for r in rows if r.get('name') == wanted]
    if not found and not row and len(rows) == 1:
        found = rows
    if not found:
        names = ', '.join(r.get('name', '?') for r in rows)
        raise ValueError(f'leaderboard entry {entry.name!r}: {path} has no row {wanted!r} (rows: {names}); '
                         f'name it as {entry.name}={path}#ROW')
    result = dict(found[0], name=entry.name, path=entry.path, source='leaderboard')
    result['values'] = dict(found[0].get('values', {}))
    return result


def add_bertscore(result: Dict, scorer) -> None:
    """BERTScore F1 of the saved responses, batched (and any figure the logs alone give)."""
    from parlai_empathy.metrics.saved_outputs import read_world_logs

    logs = result.get('world_logs')
    if not logs or result.get('source') == 'leaderboard':
        return  # an earlier board's row keeps the figures it was scored with
    examples: List[ScoredExample] = read_world_logs(logs)
    scored = score_examples(examples, scorer=scorer)
    for key, value in scored.values.items():
        if key == 'bertscore_f' or key not in result['values']:
            result['values'][key] = value
    result.setdefault('notes', {}).update(scored.notes)


def write_outputs(results: List[Dict], outdir: str, notes: Dict[str, str]) -> Dict[str, str]:
    os.makedirs(outdir, exist_ok=True)
    columns = [c for c in SHOWN if any(c in r['values'] for r in results)]
    columns += [c for c in COLUMNS if c not in columns and any(c in r['values'] for r in results)]
    paths = {name: os.path.join(outdir, name) for name in ('results.json', 'leaderboard.md', 'leaderboard.csv', 'leaderboard.png')}
    with open(paths['results.json'], 'w') as f:
        json.dump({'results': results, 'notes': notes}, f, indent=1)
    with open(paths['leaderboard.csv'], 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(['model'] + columns)
        for r in results:
            writer.writerow([r['name']] + [r['values'].get(c, '') for c in columns])
    lines = ['| model | ' + ' | '.join(columns) + ' |', '|---' * (len(columns) + 1) + '|']
    for r in results:
        cells = [_fmt(r['values'].get(c)) for c in columns]
        lines.append(f'| {r["name"]} | ' + ' | '.join(cells) + ' |')
    lines.append('')
    lines += [f'- {key}: {note}' for key, note in notes.items()]
    lines.append('')
    for r in results:
        for command in r.get('commands', []):
            lines.append(f'- `{r["name"]}`: `{command}`')
    with open(paths['leaderboard.md'], 'w') as f:
        f.write('\n'.join(lines) + '\n')
    _plot(results, columns, paths['leaderboard.png'])
    return paths


def _fmt(value) -> str:
    if value is None or value == '':
        return ''
    return f'{value:.4g}' if abs(value) < 1000 else f'{value:.0f}'


def _plot(results: List[Dict], columns: List[str], path: str) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    n = len(columns)
    cols = min(4, n) or 1
    rows = (n + cols - 1) // cols or 1
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), squeeze=False)
    names = [r['name'] for r in results]
    for ax, column in zip(axes.flat, columns):
        values = [r['values'].get(column) for r in results]
        ax.barh(names, [v if v is not None else 0 for v in values], color='#4C72B0')
        ax.set_title(column)
        ax.invert_yaxis()
        for i, v in enumerate(values):
            if v is not None:
                ax.text(v, i, f' {_fmt(v)}', va='center', fontsize=8)
    for ax in list(axes.flat)[n:]:
        ax.axis('off')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


TABLE_START, TABLE_END = '<!-- leaderboard-table:start -->', '<!-- leaderboard-table:end -->'


def fill_project_tables(projects_dir: str, results: List[Dict]) -> List[str]:
    """Rewrite the table in each ``projects/<paper>/README.md`` that has a ``table.json``.

    A table row names the leaderboard entry that provides "ours"; figures are shown on the
    paper's scale (``scale`` per metric, e.g. 100 for a percentage). Missing figures stay blank.
    """
    by_name = {r['name']: r for r in results}
    changed = []
    for paper in sorted(os.listdir(projects_dir)):
        spec_path = os.path.join(projects_dir, paper, 'table.json')
        readme = os.path.join(projects_dir, paper, 'README.md')
        if not os.path.isfile(spec_path) or not os.path.isfile(readme):
            continue
        with open(spec_path) as f:
            spec = json.load(f)
        table = render_project_table(spec, by_name)
        with open(readme) as f:
            text = f.read()
        if TABLE_START not in text or TABLE_END not in text:
            raise ValueError(f'{readme} has no {TABLE_START} ... {TABLE_END} markers')
        head, rest = text.split(TABLE_START, 1)
        _, tail = rest.split(TABLE_END, 1)
        new = f'{head}{TABLE_START}\n{table}\n{TABLE_END}{tail}'
        if new != text:
            with open(readme, 'w') as f:
                f.write(new)
            changed.append(readme)
    return changed


def render_project_table(spec: Dict, by_name: Dict[str, Dict]) -> str:
    metrics = spec['metrics']  # [{"key": "p@1,100", "label": "P@1,100", "scale": 100}]
    header = ['model'] + [f'{m["label"]} (paper)' for m in metrics] + [f'{m["label"]} (ours)' for m in metrics] + ['our command']
    lines = ['| ' + ' | '.join(header) + ' |', '|---' * len(header) + '|']
    for row in spec['rows']:
        ours = by_name.get(row.get('entry') or '', {}).get('values', {})
        paper_cells = [_fmt(row.get('paper', {}).get(m['key'])) for m in metrics]
        our_cells = [_fmt(ours[m['key']] * m.get('scale', 1)) if m['key'] in ours else '' for m in metrics]
        command = row.get('command', '')
        lines.append('| ' + ' | '.join([row['label']] + paper_cells + our_cells + [f'`{command}`' if command else '']) + ' |')
    return '\n'.join(lines)
