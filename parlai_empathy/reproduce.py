"""Re-run a paper's table with one command: ``parlai empathy_reproduce --project <paper>``.

``projects/<paper>/table.json`` holds, beside the table's rows, a ``reproduce`` section:

* ``prepare``: the steps every row needs first (a classifier, its tagging of ED), each a ``parlai``
  command line; a step with ``creates`` is skipped once that file exists;
* ``rows``: for each leaderboard entry of the table, the ``parlai`` command that makes its model
  file ``{model}`` (usually ``train_model``).

Placeholders: ``{runs}`` (``--runs-dir``), ``{model}`` (``{runs}/<entry>/model``), ``{bert}``
(``--bert``: the BERT-family encoder, a hub name, a directory or ``offline-minilm``), and
``{ranker_args}``, an argument of its own that expands into zero or more arguments: how the
bi-encoder pools and scores for that encoder (:func:`default_ranker_args`).

A row is trained once: a finished run leaves ``<model>.reproduced``; an interrupted one is simply
run again, and ParlAI resumes it from ``<model>.checkpoint``. Then one ``parlai
empathy_leaderboard`` evaluates every row and fills the README table.
"""
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

DONE_SUFFIX = '.reproduced'
RANKER_ARGS = '{ranker_args}'
SENTENCE_ENCODER_RANKER_ARGS = '--pooling mean --similarity cosine'


def default_ranker_args(bert: str) -> str:
    """BERT's own scoring (CLS, dot product) for BERT; for sentence encoders such as
    all-MiniLM-L6-v2, the mean pooling and cosine they were pretrained with (measured on ED:
    bench/RESULTS.md, "cosine vs dot")."""
    name = bert.lower()
    if name == 'offline-minilm' or 'minilm' in name or 'sentence-transformers' in name:
        return SENTENCE_ENCODER_RANKER_ARGS
    return ''


@dataclass
class Step:
    name: str
    argv: List[str]  # a parlai command line, without the leading "parlai"
    creates: Optional[str] = None  # skip the step once this file exists

    def done(self) -> bool:
        return bool(self.creates) and os.path.exists(self.creates)

    def shell(self) -> str:
        return 'parlai ' + shlex.join(self.argv)


@dataclass
class Plan:
    project: str
    readme_dir: str
    prepare: List[Step]
    rows: Dict[str, Step]  # entry -> the step that makes its model file

    def model_file(self, entry: str) -> str:
        return self.rows[entry].creates[: -len(DONE_SUFFIX)]


class ReproduceSpecError(ValueError):
    pass


def _fill(argv: Sequence, values: Dict[str, str], where: str) -> List[str]:
    filled = []
    try:
        for arg in argv:
            if str(arg) == RANKER_ARGS:
                filled += shlex.split(values['ranker_args'])
            else:
                filled.append(str(arg).format(**values))
    except (KeyError, IndexError) as err:
        raise ReproduceSpecError(f'{where}: unknown placeholder {err} (known: {", ".join(values)})') from None
    return filled


def load_plan(projects_dir: str, project: str, runs_dir: str, only: Sequence[str] = (),
              extra_train_args: Sequence[str] = (), bert: str = 'bert-base-uncased',
              ranker_args: Optional[str] = None) -> Plan:
    """The steps of one project's ``reproduce`` section, placeholders filled."""
    spec_path = os.path.join(projects_dir, project, 'table.json')
    if not os.path.isfile(spec_path):
        known = sorted(d for d in os.listdir(projects_dir) if os.path.isfile(os.path.join(projects_dir, d, 'table.json'))) \
            if os.path.isdir(projects_dir) else []
        raise ReproduceSpecError(f'{spec_path} does not exist (projects in {projects_dir}: {", ".join(known) or "none"})')
    with open(spec_path) as f:
        spec = json.load(f)
    section = spec.get('reproduce')
    if not section:
        raise ReproduceSpecError(f'{spec_path} has no "reproduce" section')
    runs_dir = os.path.abspath(runs_dir)
    values = {'runs': runs_dir, 'bert': bert,
              'ranker_args': default_ranker_args(bert) if ranker_args is None else ranker_args}
    prepare = []
    for i, step in enumerate(section.get('prepare', [])):
        where = f'{spec_path} reproduce.prepare[{i}]'
        creates = step.get('creates')
        prepare.append(Step(step.get('name', f'step {i}'), _fill(step['parlai'], values, where),
                            _fill([creates], values, where)[0] if creates else None))
    table_entries = [row.get('entry') for row in spec.get('rows', [])]
    rows = {}
    for entry, argv in section.get('rows', {}).items():
        if entry not in table_entries:
            raise ReproduceSpecError(f'{spec_path} reproduce.rows.{entry}: no table row has this entry')
        model = os.path.join(runs_dir, entry, 'model')
        argv = _fill(argv, dict(values, model=model), f'{spec_path} reproduce.rows.{entry}')
        if argv and argv[0] in ('train_model', 'multiprocessing_train'):
            argv += list(extra_train_args)
        rows[entry] = Step(entry, argv, model + DONE_SUFFIX)
    unknown = [e for e in only if e not in rows]
    if unknown:
        raise ReproduceSpecError(f'--rows {",".join(unknown)}: {project} reproduces {", ".join(rows)}')
    if only:
        rows = {e: rows[e] for e in only}
    return Plan(project, os.path.join(projects_dir, project), prepare, rows)


def run_step(step: Step, log_dir: str, parlai: Optional[List[str]] = None) -> None:
    """Run one parlai command, its output teed to ``<log_dir>/<name>.log``; a failure names the log."""
    os.makedirs(log_dir, exist_ok=True)
    if step.creates:
        os.makedirs(os.path.dirname(step.creates) or '.', exist_ok=True)
    log_path = os.path.join(log_dir, step.name.replace(' ', '_').replace('/', '_') + '.log')
    parlai = parlai or [sys.executable, '-m', 'parlai']
    print(f'[reproduce] {step.name}: {step.shell()}', flush=True)
    with open(log_path, 'a', encoding='utf-8') as log:
        log.write(f'$ {step.shell()}\n')
        log.flush()
        done = subprocess.run(parlai + step.argv, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f'[reproduce] {step.name} failed (exit {done.returncode}); see {log_path}. '
                           'Run the same command again to resume.')
    if step.creates and step.creates.endswith(DONE_SUFFIX):
        with open(step.creates, 'w') as f:
            f.write(step.shell() + '\n')


def leaderboard_argv(plan: Plan, outdir: str, projects_dir: str, extra: Sequence[str]) -> List[str]:
    entries = [f'{entry}={plan.model_file(entry)}' for entry in plan.rows]
    return ['empathy_leaderboard', '--entries', *entries, '--outdir', outdir, '--projects-dir', projects_dir, *extra]
