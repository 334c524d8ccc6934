"""Re-run a paper's table rows: ``parlai empathy_reproduce --project <paper> --rows ROW``.

``projects/<paper>/table.json`` holds, beside the tables, a ``reproduce`` section whose ``rows``
give each table row its plans, one per profile (``cpu``: what produced the committed artifacts on
2 CPU cores; ``gpu``: the same row on one GPU)::

    "reproduce": {"rows": {"mime": {"needs": [], "cpu": [{"name": "train", "parlai": [...]},
                                                          {"name": "evaluate", "parlai": [...]}]}}}

Each step is a ``parlai`` command line, exactly as it ran. Placeholders: ``{runs}`` (``--runs-dir``,
default ``runs``: model files, logs, checkpoints), ``{model}`` (``{runs}/<paper>/<row>/model``),
``{artifacts}`` (``projects/<paper>/runs``: the committed evidence; ``parlai empathy_leaderboard
--artifacts {artifacts}`` writes ``runs/<row>/`` there). ``needs`` names rows
(``paper/row``) whose model this row uses (a classifier, a tagger); they run first.

A finished step leaves ``{runs}/<paper>/<row>/<profile>.<step>.done`` holding its command (the
clone's evidence folder written as ``{artifacts}``); an interrupted one is simply run again (ParlAI
resumes training from ``<model>.checkpoint``) and a changed command runs again. A step that writes
into ``{artifacts}`` is done only where what it writes there exists (the row's evidence folder, or
the folder its first ``{artifacts}`` argument names): another clone of the project holding that
evidence (committed) skips it, a clone without it runs it again. A step marked ``"always": true`` runs every time: its output lives
outside the runs folder, so a marker there cannot vouch for it (``empathy_tag_ed`` writes its tag
cache into ParlAI's datapath, which differs between installations: a frozen clone whose row
needs another clone's tags would find the step done and no cache); such a step reuses what it
finds, so running it again costs seconds. The plan of a row is the record of how its figures
were made: its artifacts' ``meta.json`` repeats it.
"""
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

PROFILES = ('cpu', 'gpu')


class ReproduceSpecError(ValueError):
    pass


@dataclass
class Step:
    name: str
    argv: List[str]  # a parlai command line, without the leading "parlai"
    marker: Optional[str] = None  # written when the step finished
    always: bool = False  # run every time (its output is not in the runs folder)
    artifacts: Optional[str] = None  # the clone's {artifacts} folder, where the step writes into it
    evidence: Optional[str] = None  # what it writes there ({artifacts}/<row>, ...), which must exist

    def done(self) -> bool:
        if self.always or not self.marker or not os.path.isfile(self.marker):
            return False
        with open(self.marker) as f:
            recorded = f.read().strip()
        if recorded not in (self.shell(), self.recorded()):
            return False
        return self.evidence is None or os.path.isdir(self.evidence)

    def shell(self) -> str:
        return 'parlai ' + shlex.join(self.argv)

    def recorded(self) -> str:
        """The command as its marker holds it: the clone's evidence folder as ``{artifacts}``, so a
        step finished from one clone of the project is done for another that holds its evidence
        (a later commit of the same project), and runs again where that evidence is missing."""
        if not self.artifacts:
            return self.shell()
        from parlai_empathy import evidence

        return evidence.portable(self.shell(), {self.artifacts: '{artifacts}'})


@dataclass
class RowPlan:
    project: str
    entry: str
    profile: str
    needs: List[str]
    steps: List[Step]
    model: str
    artifacts: str


def _fill(argv: Sequence, values: Dict[str, str], where: str) -> List[str]:
    try:
        return [str(arg).format(**values) for arg in argv]
    except (KeyError, IndexError) as err:
        raise ReproduceSpecError(f'{where}: unknown placeholder {err} (known: {", ".join(values)})') from None


def _evidence_written(template: Sequence, argv: Sequence[str], artifacts: str, entry: str) -> Optional[str]:
    """What a step writes into the committed evidence: its first argument naming ``{artifacts}``
    (``--artifacts {artifacts}`` writes the row's folder ``{artifacts}/<row>``; ``--report-dir
    {artifacts}/../report`` writes that folder); None for a step that writes none."""
    for raw, filled in zip(template, argv):
        if '{artifacts}' in str(raw):
            return os.path.join(artifacts, entry) if filled == artifacts else os.path.normpath(filled)
    return None


def load_spec(projects_dir: str, project: str) -> Dict:
    spec_path = os.path.join(projects_dir, project, 'table.json')
    if not os.path.isfile(spec_path):
        known = sorted(d for d in os.listdir(projects_dir) if os.path.isfile(os.path.join(projects_dir, d, 'table.json'))) \
            if os.path.isdir(projects_dir) else []
        raise ReproduceSpecError(f'{spec_path} does not exist (projects in {projects_dir}: {", ".join(known) or "none"})')
    from parlai_empathy.evidence import read_json

    return read_json(spec_path, ReproduceSpecError)


def row_plan(projects_dir: str, project: str, entry: str, runs_dir: str, profile: str = 'cpu') -> RowPlan:
    """One row's steps for ``profile``, placeholders filled."""
    spec = load_spec(projects_dir, project)
    where = f'{os.path.join(projects_dir, project, "table.json")} reproduce.rows.{entry}'
    rows = spec.get('reproduce', {}).get('rows', {})
    if entry not in rows:
        raise ReproduceSpecError(f'{project} has no plan for row {entry!r} (rows with a plan: {", ".join(rows)})')
    plans = rows[entry]
    if profile not in plans:
        raise ReproduceSpecError(f'{where}: no {profile!r} profile (profiles: '
                                 f'{", ".join(p for p in plans if p in PROFILES)})')
    runs_dir = os.path.abspath(runs_dir)
    row_dir = os.path.join(runs_dir, project, entry)
    values = {'runs': runs_dir, 'model': os.path.join(row_dir, 'model'),
              'artifacts': os.path.abspath(os.path.join(projects_dir, project, 'runs'))}
    steps = []
    for i, step in enumerate(plans[profile]):
        name = step.get('name', f'step{i}')
        argv = _fill(step['parlai'], values, f'{where}.{profile}[{i}]')
        evidence = _evidence_written(step['parlai'], argv, values['artifacts'], entry)
        steps.append(Step(name, argv, os.path.join(row_dir, f'{profile}.{i}.{name}.done'), bool(step.get('always')),
                          values['artifacts'] if evidence else None, evidence))
    return RowPlan(project, entry, profile, list(plans.get('needs', [])), steps, values['model'],
                   os.path.join(values['artifacts'], entry))


def all_rows(projects_dir: str, project: str) -> List[str]:
    return list(load_spec(projects_dir, project).get('reproduce', {}).get('rows', {}))


def ordered_plans(projects_dir: str, project: str, entries: Sequence[str], runs_dir: str,
                  profile: str = 'cpu') -> List[RowPlan]:
    """The rows asked for, each preceded by the rows it needs (once each, needs first)."""
    ordered: List[RowPlan] = []
    seen = set()

    def visit(proj: str, entry: str, chain: tuple):
        key = f'{proj}/{entry}'
        if key in chain:
            raise ReproduceSpecError(f'rows need each other in a cycle: {" -> ".join(chain + (key,))}')
        if key in seen:
            return
        plan = row_plan(projects_dir, proj, entry, runs_dir, profile)
        for need in plan.needs:
            need_project, _, need_entry = need.rpartition('/')
            visit(need_project or proj, need_entry, chain + (key,))
        seen.add(key)
        ordered.append(plan)

    for entry in entries:
        visit(project, entry, ())
    return ordered


def run_step(step: Step, log_dir: str, parlai: Optional[List[str]] = None, timeout: Optional[float] = None) -> None:
    """Run one parlai command, its output teed to ``<log_dir>/<name>.log``; a failure names the log.
    ``timeout``: seconds after which the command is killed (a failure too)."""
    os.makedirs(log_dir, exist_ok=True)
    if step.marker:  # {runs}/<paper>/<row>/<profile>.<i>.<name>.done -> <paper>.<row>.<profile>.<i>.<name>.log
        row_dir = os.path.dirname(step.marker)
        name = '.'.join([os.path.basename(os.path.dirname(row_dir)), os.path.basename(row_dir),
                         os.path.basename(step.marker)[: -len('.done')]])
    else:
        name = step.name
    log_path = os.path.join(log_dir, name.replace(' ', '_').replace('/', '_') + '.log')
    parlai = parlai or [sys.executable, '-m', 'parlai']
    print(f'[reproduce] {step.name}: {step.shell()}', flush=True)
    with open(log_path, 'a', encoding='utf-8') as log:
        log.write(f'$ {step.shell()}\n')
        log.flush()
        try:
            env = None
            if step.marker:  # the step's evidence names the runs folder {runs}, not this machine's path
                env = dict(os.environ, PARLAI_EMPATHY_RUNS_DIR=os.path.dirname(os.path.dirname(row_dir)))
            done = subprocess.run(parlai + step.argv, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f'[reproduce] {step.name} was stopped after {timeout:.0f} s (its time was up); '
                               f'see {log_path}. Run the same command again to resume.') from None
    if done.returncode != 0:
        raise RuntimeError(f'[reproduce] {step.name} failed (exit {done.returncode}); see {log_path}. '
                           'Run the same command again to resume.')
    if step.marker:
        os.makedirs(os.path.dirname(step.marker), exist_ok=True)
        with open(step.marker, 'w') as f:
            f.write(step.recorded() + '\n')


def record_plan(plan: RowPlan) -> None:
    """Add the row's plan (the commands that made its artifacts) to its ``meta.json``."""
    from parlai_empathy import evidence

    meta_path = os.path.join(plan.artifacts, evidence.META)
    if not os.path.isfile(meta_path):
        return
    meta = evidence.read_json(meta_path)
    places = evidence.path_placeholders({os.path.dirname(os.path.dirname(os.path.dirname(plan.model))): '{runs}',
                                         os.path.dirname(plan.artifacts): '{artifacts}'})
    meta['plan'] = {'profile': plan.profile, 'needs': plan.needs,
                    'commands': [evidence.portable(step.shell(), places) for step in plan.steps]}
    evidence.write_json(meta_path, evidence.portable(meta, places))
