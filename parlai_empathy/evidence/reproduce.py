"""Re-run a paper's table rows: ``parlai empathy_reproduce --project <paper> --rows ROW``.

``projects/<paper>/table.json`` holds, beside the tables, a ``reproduce`` section whose ``rows``
give each table row its plans, one per profile (``cpu``: what produced the committed artifacts on
2 CPU cores; ``gpu``: the same row on one GPU)::

    "reproduce": {"rows": {"mime": {"needs": [], "cpu": [{"name": "train", "parlai": [...]},
                                                          {"name": "evaluate", "parlai": [...]}]}}}

Each step is a ``parlai`` command line, exactly as it ran. Placeholders: ``{runs}`` (``--runs-dir``,
default ``runs``: model files, logs, checkpoints), ``{model}`` (``{runs}/<paper>/<row>/model``),
``{artifacts}`` (where the row's evidence is written: ``{runs}/projects/<paper>/runs`` unless
``--write-projects`` makes it ``projects/<paper>/runs``, the committed evidence; ``parlai
empathy_leaderboard --artifacts {artifacts}`` writes ``<row>/`` there). ``needs`` names rows
(``paper/row``) whose model this row uses (a classifier, a tagger); they run first.

The plans are found by :func:`find_projects_dir`: ``--projects-dir``, ``$PARLAI_EMPATHY_PROJECTS_DIR``,
the clone around the working directory, or the copy in the wheel (``parlai_empathy/projects/``:
each ``table.json`` and the committed rows' ``meta.json``), so ``parlai empathy_reproduce`` works
from any directory. Each step's time is what it took in the committed row
(:func:`row_timing`: the row's ``meta.json``, same profile only, with the machine it ran on).

A finished step leaves ``{runs}/<paper>/<row>/<profile>.<step>.done`` holding its command (the
clone's evidence folder written as ``{artifacts}``); an interrupted one is simply run again (ParlAI
resumes training from ``<model>.checkpoint``) and a changed command runs again. A step that writes
into ``{artifacts}`` is done only where what it writes there exists (the row's evidence folder, or
the folder its first ``{artifacts}`` argument names): another clone of the project holding that
evidence (committed) skips it, a clone without it runs it again. A step marked ``"always": true``
runs every time: its output lives outside the runs folder, so a marker there cannot vouch for it
(``empathy_tag_ed`` writes its tag cache into ParlAI's datapath, which differs between
installations: a frozen clone whose row needs another clone's tags would find the step done and no
cache); such a step reuses what it finds, so running it again costs seconds. The plan of a row is
the record of how its figures were made: its artifacts' ``meta.json`` repeats it.
"""

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

PROFILES = ('cpu', 'gpu')
SPEC_FILE = 'table.json'
PROJECTS_ENV = 'PARLAI_EMPATHY_PROJECTS_DIR'  # where the plans are, when not in a clone
PACKAGED_PROJECTS = 'projects'  # parlai_empathy/projects/: the plans and meta.json in the wheel


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
        from parlai_empathy.evidence import artifacts as evidence

        return evidence.portable(self.shell(), {self.artifacts: '{artifacts}'})


@dataclass
class RowPlan:
    project: str
    entry: str
    profile: str
    needs: List[str]
    steps: List[Step]
    model: str
    artifacts: str  # where its steps write the row's evidence
    committed: str = ''  # the committed evidence of the row, beside the plans (its meta.json times it)


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


def projects_in(projects_dir: str) -> List[str]:
    """The projects of a folder: its subfolders holding a ``table.json``."""
    if not os.path.isdir(projects_dir):
        return []
    return sorted(d for d in os.listdir(projects_dir) if os.path.isfile(os.path.join(projects_dir, d, SPEC_FILE)))


def _installed_projects_dir() -> str:
    import parlai_empathy

    return os.path.join(os.path.dirname(os.path.abspath(parlai_empathy.__file__)), PACKAGED_PROJECTS)


def packaged_projects_dir() -> str:
    """The plans and the committed rows' ``meta.json`` shipped inside the installed package, so
    a pip-installed user without a clone can still print and run a plan (imported from a source
    tree instead, that tree's ``projects/``)."""
    installed = _installed_projects_dir()
    source = os.path.join(os.path.dirname(os.path.dirname(installed)), 'projects')
    return installed if os.path.isdir(installed) or not os.path.isdir(source) else source


def clone_projects_dir(start: Optional[str] = None) -> Optional[str]:
    """``projects/`` of the parlai-empathy clone holding ``start`` (default: the working
    directory), found by walking up; None outside a clone."""
    folder = os.path.abspath(start or os.getcwd())
    while True:
        candidate = os.path.join(folder, 'projects')
        if projects_in(candidate):
            return candidate
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def find_projects_dir(project: Optional[str] = None, explicit: Optional[str] = None) -> str:
    """Where the plans are: ``explicit`` (``--projects-dir``), else ``$PARLAI_EMPATHY_PROJECTS_DIR``,
    else the clone around the working directory when it holds ``project``, else the copy
    installed with the package. A folder without the project is left to :func:`load_spec`, whose
    error lists what the folder holds."""
    if explicit:
        return explicit
    if os.environ.get(PROJECTS_ENV):
        return os.environ[PROJECTS_ENV]
    clone = clone_projects_dir()
    packaged = packaged_projects_dir()
    for candidate in (clone, packaged):
        if candidate and (project is None or project in projects_in(candidate)):
            return candidate
    return clone or packaged


def is_packaged(projects_dir: str) -> bool:
    """Whether ``projects_dir`` is the copy inside the installed package (no clone to write into)."""
    return os.path.realpath(projects_dir) == os.path.realpath(_installed_projects_dir())


def load_spec(projects_dir: str, project: str) -> Dict:
    spec_path = os.path.join(projects_dir, project, SPEC_FILE)
    if not os.path.isfile(spec_path):
        known = projects_in(projects_dir)
        raise ReproduceSpecError(
            f'{spec_path} does not exist '
            f'(projects in {projects_dir}: {", ".join(known) or "none"}); '
            f'name the folder that holds {project}/{SPEC_FILE} with --projects-dir DIR '
            f'or ${PROJECTS_ENV}'
        )
    from parlai_empathy.evidence.artifacts import read_json

    return read_json(spec_path, ReproduceSpecError)


def row_plan(
    projects_dir: str, project: str, entry: str, runs_dir: str, profile: str = 'cpu', evidence_dir: Optional[str] = None
) -> RowPlan:
    """One row's steps for ``profile``, placeholders filled. ``evidence_dir`` plays ``projects/``
    for what the steps write (``{artifacts}`` is ``<evidence_dir>/<project>/runs``); by default
    the plans' own folder, i.e. over the committed rows."""
    spec = load_spec(projects_dir, project)
    where = f'{os.path.join(projects_dir, project, SPEC_FILE)} reproduce.rows.{entry}'
    rows = spec.get('reproduce', {}).get('rows', {})
    if entry not in rows:
        raise ReproduceSpecError(f'{project} has no plan for row {entry!r} (rows with a plan: {", ".join(rows)})')
    plans = rows[entry]
    if profile not in plans:
        raise ReproduceSpecError(
            f'{where}: no {profile!r} profile (profiles: {", ".join(p for p in plans if p in PROFILES)})'
        )
    runs_dir = os.path.abspath(runs_dir)
    row_dir = os.path.join(runs_dir, project, entry)
    values = {
        'runs': runs_dir,
        'model': os.path.join(row_dir, 'model'),
        'artifacts': os.path.abspath(os.path.join(evidence_dir or projects_dir, project, 'runs')),
    }
    steps = []
    for i, step in enumerate(plans[profile]):
        name = step.get('name', f'step{i}')
        argv = _fill(step['parlai'], values, f'{where}.{profile}[{i}]')
        evidence = _evidence_written(step['parlai'], argv, values['artifacts'], entry)
        steps.append(
            Step(
                name,
                argv,
                os.path.join(row_dir, f'{profile}.{i}.{name}.done'),
                bool(step.get('always')),
                values['artifacts'] if evidence else None,
                evidence,
            )
        )
    return RowPlan(
        project,
        entry,
        profile,
        list(plans.get('needs', [])),
        steps,
        values['model'],
        os.path.join(values['artifacts'], entry),
        os.path.join(projects_dir, project, 'runs', entry),
    )


def all_rows(projects_dir: str, project: str) -> List[str]:
    return list(load_spec(projects_dir, project).get('reproduce', {}).get('rows', {}))


def row_profiles(projects_dir: str, project: str, entry: str) -> List[str]:
    """The profiles a row has a plan for (a ``cpu_only`` row has no gpu plan)."""
    plans = load_spec(projects_dir, project).get('reproduce', {}).get('rows', {}).get(entry, {})
    return [profile for profile in PROFILES if profile in plans]


def ordered_plans(
    projects_dir: str,
    project: str,
    entries: Sequence[str],
    runs_dir: str,
    profile: str = 'cpu',
    evidence_dir: Optional[str] = None,
) -> List[RowPlan]:
    """The rows asked for, each preceded by the rows it needs (once each, needs first)."""
    ordered: List[RowPlan] = []
    seen = set()

    def visit(proj: str, entry: str, chain: tuple):
        key = f'{proj}/{entry}'
        if key in chain:
            raise ReproduceSpecError(f'rows need each other in a cycle: {" -> ".join(chain + (key,))}')
        if key in seen:
            return
        plan = row_plan(projects_dir, proj, entry, runs_dir, profile, evidence_dir)
        for need in plan.needs:
            need_project, _, need_entry = need.rpartition('/')
            visit(need_project or proj, need_entry, chain + (key,))
        seen.add(key)
        ordered.append(plan)

    for entry in entries:
        visit(project, entry, ())
    return ordered


# What a step's kind took in the committed row: its meta.json records these two wall times.
TIMED_STEPS = {'train_model': ('training', 'train_time'), 'empathy_leaderboard': (None, 'evaluation_seconds')}


@dataclass
class RowTiming:
    """The wall times of a row's steps in its committed run (None: not measured)."""

    seconds: List[Optional[float]]
    machine: str  # where they were measured, in words ('' without a committed run)
    note: str = ''  # why there are no figures, when there are none


def machine_words(machine: Dict) -> str:
    if machine.get('gpu'):
        return f'one {machine["gpu"]}'
    cpu = f' ({machine["cpu"]})' if machine.get('cpu') else ''
    return f'{machine.get("cores", "?")} CPU cores{cpu}'


def duration_words(seconds: float) -> str:
    if seconds < 90:
        return f'{seconds:.0f} s'
    minutes = round(seconds / 60)
    if minutes < 90:
        return f'{minutes} min'
    return f'{minutes // 60} h {minutes % 60:02d} min'


def row_timing(plan: RowPlan) -> RowTiming:
    """What each step of ``plan`` took when the committed row was made, from the row's
    ``meta.json`` (training: ParlAI's ``train_time``; evaluation: ``evaluation_seconds``). Only
    a run of the same profile counts: a gpu run says nothing about the cpu plan's time."""
    from parlai_empathy.evidence import artifacts as evidence

    none = [None] * len(plan.steps)
    meta_path = os.path.join(plan.committed, evidence.META)
    if not os.path.isfile(meta_path):
        return RowTiming(none, '', 'the row has no committed run to time it by')
    meta = evidence.read_json(meta_path, ReproduceSpecError)
    machine = machine_words(meta.get('machine') or {})
    made = str((meta.get('plan') or {}).get('profile') or '')
    measured = []
    for step in plan.steps:
        section, key = TIMED_STEPS.get(step.argv[0], (None, None))
        source = (meta.get(section) or {}) if section else meta
        value = source.get(key) if key else None
        measured.append(float(value) if isinstance(value, (int, float)) else None)
    if made.split('+')[0] != plan.profile:
        took = sum(v for v in measured if v is not None)
        what = f' in {duration_words(took)}' if took else ''
        return RowTiming(none, machine, f'the committed row ran its {made or "unrecorded"} plan{what} on {machine}')
    return RowTiming(measured, machine)


def plans_estimate(
    plans: Sequence[RowPlan], timings: Optional[Sequence[RowTiming]] = None, include_done: bool = True
) -> str:
    """One sentence: how long the steps of ``plans`` took in the committed runs, in all, on which
    machines, and which steps no figure covers."""
    timings = timings or [row_timing(plan) for plan in plans]
    profile = plans[0].profile if plans else ''
    total, machines, unmeasured, notes = 0.0, [], [], []
    for plan, timing in zip(plans, timings):
        for step, seconds in zip(plan.steps, timing.seconds):
            if not include_done and step.done():
                continue
            if seconds is None:
                unmeasured.append(f'{plan.project}/{plan.entry} {step.name}')
            else:
                total += seconds
                if timing.machine not in machines:
                    machines.append(timing.machine)
        note = (
            (timing.note if len(plans) == 1 else f'{plan.project}/{plan.entry}: {timing.note}') if timing.note else ''
        )
        if note and note not in notes:
            notes.append(note)
    if not total:
        return f'the {profile} plan is not timed' + (f': {"; ".join(notes)}' if notes else '')
    rows = 'rows' if len(plans) > 1 else 'row'
    text = f'about {duration_words(total)} on {" / ".join(machines)}, as the committed {rows} took'
    if unmeasured:
        text += f'; not timed: {", ".join(unmeasured)}'
    return text


def run_step(step: Step, log_dir: str, parlai: Optional[List[str]] = None, timeout: Optional[float] = None) -> None:
    """Run one parlai command, its output teed to ``<log_dir>/<name>.log``; a failure names the log.
    ``timeout``: seconds after which the command is killed (a failure too)."""
    os.makedirs(log_dir, exist_ok=True)
    if step.marker:  # {runs}/<paper>/<row>/<profile>.<i>.<name>.done -> <paper>.<row>.<profile>.<i>.<name>.log
        row_dir = os.path.dirname(step.marker)
        name = '.'.join(
            [
                os.path.basename(os.path.dirname(row_dir)),
                os.path.basename(row_dir),
                os.path.basename(step.marker)[: -len('.done')],
            ]
        )
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
            raise RuntimeError(
                f'[reproduce] {step.name} was stopped after {timeout:.0f} s (its time was up); '
                f'see {log_path}. Run the same command again to resume.'
            ) from None
    if done.returncode != 0:
        raise RuntimeError(
            f'[reproduce] {step.name} failed (exit {done.returncode}); see {log_path}. '
            'Run the same command again to resume.'
        )
    if step.marker:
        os.makedirs(os.path.dirname(step.marker), exist_ok=True)
        with open(step.marker, 'w') as f:
            f.write(step.recorded() + '\n')


def record_plan(plan: RowPlan) -> None:
    """Add the row's plan (the commands that made its artifacts) to its ``meta.json``."""
    from parlai_empathy.evidence import artifacts as evidence

    meta_path = os.path.join(plan.artifacts, evidence.META)
    if not os.path.isfile(meta_path):
        return
    meta = evidence.read_json(meta_path)
    places = evidence.path_placeholders(
        {
            os.path.dirname(os.path.dirname(os.path.dirname(plan.model))): '{runs}',
            os.path.dirname(plan.artifacts): '{artifacts}',
        }
    )
    meta['plan'] = {
        'profile': plan.profile,
        'needs': plan.needs,
        'commands': [evidence.portable(step.shell(), places) for step in plan.steps],
    }
    evidence.write_json(meta_path, evidence.portable(meta, places))
