"""Each table row's ``gpu`` plan, derived from its ``cpu`` plan, and its time budget.

    python tools/gpu/gpu_plans.py            # print the budget table, check the plans in table.json
    python tools/gpu/gpu_plans.py --write    # (re)write only the "gpu" key of every row

A row whose plan says ``"cpu_only": "<why>"`` has no gpu plan (the published rows: they fetch
another paper's file, which the GPU machine cannot reach, and take a minute on a CPU).

The ``cpu`` plan of a row (``projects/<paper>/table.json``, ``reproduce.rows.<row>.cpu``) is what
made its committed figures; the ``gpu`` plan trains the same model with the same settings, changed
only where a GPU makes another choice sensible:

* rankers of Rashkin et al. train with the paper's batch of 256 (255 in-batch negatives per
  example); Metz & You's keep their 32. The updates are scaled so that the same number of
  examples is seen (steps and warm-up times 32/256);
* emotion classifiers use batches of 128 (updates and warm-up scaled the same way);
* MIME and Multi-TR use batches of 64 with the Noam warm-up, decay and validation interval
  scaled by 16/64 (the same examples per phase); ETHREED keeps its batch of 16 and its validation
  once an epoch (batch 64 learns far less per epoch, tools/gpu/README.md; its learning-rate
  milestones count validations);
* a row whose model another row reads ED tags of (``--listener-emotions``: ETHREED's listener
  labels) tags ED (``empathy_tag_ed``) if its cpu plan does not already: without the tags the
  reading row cannot train;
* every training step stops at a wall budget (``--max-train-time``, below), checkpoints every
  minute, validates every minute where the CPU plan validated every half hour, and then also every
  third of its updates, so that the last validation falls just before the last update; evaluation batches
  are 128; tagging ED takes batches of 65,536 tokens.

The budgets come from one timing model of ``tools/gpu/run.sh full`` (all rows at once on one GPU,
finished within 9 minutes): a row starts when the rows it needs have done every step but their
evaluation (``empathy_leaderboard`` makes evidence, never anything another row uses), and its
training gets what is left before the end once its other steps are paid for. The per-step costs
are estimates until a ``smoke`` run on the GPU measures them (see tools/gpu/README.md).
"""

import argparse
import json
import math
import os
import sys
from typing import Dict, List, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# ----- the timing model of `run.sh full`, seconds --------------------------------------------------
FULL_END = 525  # every row done by then; 15 s of the 9 minutes stay for gathering and packing
SETUP = 45  # venv, wheels, data and MiniLM unpacked (about 5 s when a smoke run left them)
STEP_START = 25  # one parlai process: imports, CUDA start, ED loaded
STEP_WORK = {
    'train_model': 20,  # its own final validation and test pass
    'empathy_leaderboard': 75,  # the test set (both P@1,100 passes for rankers) + BERTScore
    'empathy_tag_ed': 30,
}  # every ED utterance through MiniLM
OTHER_STEP_WORK = 10
NEEDED_BUDGET = 90  # training of a row other rows wait for (a classifier or the tagger)
MIN_BUDGET = 60

# Rows that run alone, on a GPU machine held for them: all-mpnet-base-v2 (209 MiB in float16) first
# travels in four pieces, one command each, and the last command joins them and runs the row
# (tools/gpu/README.md). Their budget: the setup plus the join, and a ranker's evaluation as it
# measured on a GPU (both P@1,100 passes, retrieval from the ED train pool, BERTScore: 187-203 s,
# tools/gpu/README.md), not the shared-run model's 75 s.
ALONE = ('rashkin2019_empatheticdialogues/mpnet_ft', 'rashkin2019_empatheticdialogues/ed32_situation_mpnet')
ALONE_SETUP = 70
ALONE_EVIDENCE_WORK = 210

EVIDENCE = 'empathy_leaderboard'
TAGS_OPTION = '--listener-emotions'  # a classifier whose ED tags (empathy_tag_ed) the row reads
RASHKIN_BATCH, CLASSIFIER_BATCH, GENERATOR_BATCH = 256, 128, 64


def is_evidence_step(argv: List[str]) -> bool:
    """A step that only writes a row's evidence: rows that need this row need not wait for it."""
    return argv[0] == EVIDENCE


def _option(argv: List[str], flag: str):
    return argv[argv.index(flag) + 1] if flag in argv else None


def _set(argv: List[str], flag: str, value) -> List[str]:
    """``argv`` with ``flag`` set to ``value`` (replaced where it is, else appended)."""
    argv = list(argv)
    if flag in argv:
        argv[argv.index(flag) + 1] = str(value)
    else:
        argv += [flag, str(value)]
    return argv


def _scaled(argv: List[str], flag: str, factor: float) -> List[str]:
    value = _option(argv, flag)
    return argv if value is None else _set(argv, flag, max(1, math.ceil(int(value) * factor)))


def gpu_train(argv: List[str], project: str, budget: int) -> List[str]:
    """A CPU plan's ``train_model`` step as the GPU plan runs it (see the module doc)."""
    model = _option(argv, '-m')
    argv = _set(argv, '--save-every-n-secs', 60)
    if _option(argv, '-vtim') is not None:
        argv = _set(argv, '-vtim', 60)
    batch = None
    if model == 'empathy/bert_ranker' and project.startswith('rashkin2019'):
        batch = RASHKIN_BATCH
    elif model == 'empathy/emotion_classifier':
        batch = CLASSIFIER_BATCH
    if batch:
        factor = int(_option(argv, '-bs')) / batch
        argv = _scaled(_scaled(_set(argv, '-bs', batch), '--max-train-steps', factor), '--warmup-updates', factor)
    if model in ('empathy/mime', 'empathy/multitask_transformer'):  # defaults: batch 16, Noam 8000, valid every 1000
        argv = _set(argv, '-bs', GENERATOR_BATCH)
        for flag, value in (('--warmup-updates', 8000), ('--invsqrt-lr-decay-gamma', 8000), ('-vstep', 1000)):
            argv = _set(argv, flag, value * 16 // GENERATOR_BATCH)
    # ETHREED keeps its cpu plan's batch of 16 (the reference's ~16.5 responses per update): one
    # epoch at batch 64 leaves valid ppl_ex at 43-46 where one epoch at 16 gives 37 (measured
    # runs: tools/gpu/README.md); and it is validated once an epoch (no -vtim): its
    # learning rate decays after the 4th and the 5th *validation* (--lr-milestones, the
    # reference's MultiStepLR over epochs), so a validation every minute would decay it after
    # 4 and 5 minutes
    steps = _option(argv, '--max-train-steps')
    validated = _option(argv, '-vtim') is not None or _option(argv, '-veps') is not None
    if validated and steps is not None and int(steps) > 3:
        # train_model keeps the best *validated* model and stops at --max-train-steps (or its epochs)
        # before it validates: a validation every (steps - 1) / 3 updates puts one just before the
        # end, so that the evaluated model is not one from early in training
        argv = _set(argv, '-vstep', (int(steps) - 1) // 3)
    return _set(argv, '--max-train-time', budget)


def gpu_step(argv: List[str], project: str, budget: int) -> List[str]:
    if argv[0] == 'train_model':
        return gpu_train(argv, project, budget)
    if argv[0] == EVIDENCE and _option(argv, '--eval-args') is not None:
        return _set(argv, '--eval-args', _option(argv, '--eval-args').replace('-bs 64', '-bs 128'))
    if argv[0] == 'empathy_tag_ed':
        return _set(argv, '--batch-tokens', 65536)
    return list(argv)


def step_cost(argv: List[str], alone: bool = False) -> int:
    """Seconds a step costs beyond its training budget (``alone``: a row of :data:`ALONE`)."""
    if alone and is_evidence_step(argv):
        return STEP_START + ALONE_EVIDENCE_WORK
    return STEP_START + STEP_WORK.get(argv[0], OTHER_STEP_WORK)


# ----- every row of every project ------------------------------------------------------------------
def load_specs(projects_dir: str) -> Dict[str, Dict]:
    specs = {}
    for project in sorted(os.listdir(projects_dir)):
        path = os.path.join(projects_dir, project, 'table.json')
        if os.path.isfile(path):
            with open(path, encoding='utf-8') as f:
                specs[project] = json.load(f)
    return specs


def cpu_rows(specs: Dict[str, Dict]) -> Dict[str, Dict]:
    """``project/row`` -> {'needs': [project/row, ...], 'steps': [{'name', 'parlai'}, ...]}: the
    steps of the gpu plan before :func:`gpu_step` (the cpu plan's, evidence last, tagging added
    where another row needs a model's ED tags)."""
    rows = {}
    for project, spec in specs.items():
        for entry, plans in spec.get('reproduce', {}).get('rows', {}).items():
            if plans.get('cpu_only'):  # e.g. a released file fetched from GitHub: no GPU, no network there
                continue
            needs = [n if '/' in n else f'{project}/{n}' for n in plans.get('needs', [])]
            rows[f'{project}/{entry}'] = {'needs': needs, 'steps': [dict(s) for s in plans['cpu']]}
    for _key, row in rows.items():
        for step in row['steps']:
            tags_of = _option(step['parlai'], TAGS_OPTION)
            tagger = tags_of and tags_of.startswith('{runs}/') and tags_of[len('{runs}/') : -len('/model')]
            if tagger in rows and not any(s['parlai'][0] == 'empathy_tag_ed' for s in rows[tagger]['steps']):
                rows[tagger]['steps'].append(
                    {'name': 'tag ED', 'parlai': ['empathy_tag_ed', '-mf', '{model}'], 'always': True}
                )
    for row in rows.values():
        row['steps'] = [s for s in row['steps'] if not is_evidence_step(s['parlai'])] + [
            s for s in row['steps'] if is_evidence_step(s['parlai'])
        ]
    return rows


def budgets(rows: Dict[str, Dict]) -> Dict[str, Tuple[int, int]]:
    """``project/row`` -> (start, training budget) in seconds of ``run.sh full``."""
    needed = {n for row in rows.values() for n in row['needs']}
    start, gate, out = {}, {}, {}

    def visit(key: str, chain=()) -> None:
        if key in start:
            return
        if key in chain:
            raise ValueError(f'rows need each other in a cycle: {" -> ".join(chain + (key,))}')
        if key not in rows:
            raise ValueError(f'{chain[-1]} needs {key}, which has no plan')
        for need in rows[key]['needs']:
            visit(need, chain + (key,))
        start[key] = max([start[n] + gate[n] for n in rows[key]['needs']], default=SETUP)
        steps = [s['parlai'] for s in rows[key]['steps']]
        trains = any(s[0] == 'train_model' for s in steps)
        if key in needed:
            budget = NEEDED_BUDGET
        elif key in ALONE:
            start[key] = ALONE_SETUP
            budget = FULL_END - ALONE_SETUP - sum(step_cost(s, alone=True) for s in steps)
        else:
            budget = FULL_END - start[key] - sum(step_cost(s) for s in steps)
            if trains and budget < MIN_BUDGET:
                raise ValueError(f'{key}: only {budget} s of training fit the 9 minutes (start {start[key]} s)')
        budget = budget if trains else 0
        gate[key] = sum(step_cost(s) for s in steps if not is_evidence_step(s)) + budget
        out[key] = (start[key], budget)

    for key in rows:
        visit(key)
    return out


def gpu_plans(specs: Dict[str, Dict]) -> Dict[str, List[Dict]]:
    """``project/row`` -> its gpu plan (steps named as in the cpu plan, ``always`` kept)."""
    rows = cpu_rows(specs)
    times = budgets(rows)
    return {
        key: [
            dict(
                {'name': s['name'], 'parlai': gpu_step(s['parlai'], key.split('/')[0], times[key][1])},
                **({'always': True} if s.get('always') else {}),
            )
            for s in row['steps']
        ]
        for key, row in rows.items()
    }


def with_gpu_plans(spec: Dict, project: str, plans: Dict[str, List[Dict]]) -> Dict:
    """``spec`` with each row's ``gpu`` key set right after its ``cpu`` key; nothing else changes."""
    spec = json.loads(json.dumps(spec))
    for entry, row in spec.get('reproduce', {}).get('rows', {}).items():
        rebuilt = {}
        for key, value in row.items():
            if key == 'gpu':
                continue
            rebuilt[key] = value
            if key == 'cpu' and not row.get('cpu_only'):
                rebuilt['gpu'] = plans[f'{project}/{entry}']
        spec['reproduce']['rows'][entry] = rebuilt
    return spec


def dump(spec: Dict) -> str:
    """table.json's own layout (one-space indentation, a final newline)."""
    return json.dumps(spec, indent=1, ensure_ascii=False) + '\n'


def budget_table(specs: Dict[str, Dict]) -> str:
    rows = cpu_rows(specs)
    lines = ['| row | needs | starts at | training budget |', '|---|---|---|---|']
    for key, (start, budget) in sorted(budgets(rows).items(), key=lambda kv: (kv[1][0], kv[0])):
        needs = ', '.join(rows[key]['needs']) or '-'
        lines.append(f'| {key} | {needs} | {start} s | {f"{budget} s" if budget else "-"} |')
    return '\n'.join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--projects-dir', default=os.path.join(REPO, 'projects'))
    parser.add_argument('--write', action='store_true', help='rewrite the gpu key of every row in table.json')
    args = parser.parse_args(argv)
    specs = load_specs(args.projects_dir)
    plans = gpu_plans(specs)
    print(budget_table(specs))
    stale = []
    for project, spec in specs.items():
        path = os.path.join(args.projects_dir, project, 'table.json')
        text = dump(with_gpu_plans(spec, project, plans))
        with open(path, encoding='utf-8') as f:
            if f.read() == text:
                continue
        if args.write:
            with open(path, 'w', encoding='utf-8') as f:
                f.write(text)
            print(f'wrote the gpu plans of {path}')
        else:
            stale.append(path)
    if stale:
        print('gpu plans differ from what the cpu plans give (run with --write): ' + ', '.join(stale), file=sys.stderr)
    return 1 if stale else 0


if __name__ == '__main__':
    sys.exit(main())
