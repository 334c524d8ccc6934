"""Turn model outputs into a stored task: select items, make units and checks, write the DB."""

import itertools
from typing import List, Optional, Sequence

from parlai_empathy.humaneval import inputs, sampling
from parlai_empathy.humaneval.db import TaskDB

LIKERT_ASPECTS = ['empathy', 'relevance', 'fluency']
AB_ASPECTS = ['overall']


def _named(spec: str):
    name, sep, path = spec.partition('=')
    return (name, path) if sep else (None, spec)


def parse_model_args(
    specs: Sequence[str], outputs_specs: Sequence[str] = (), ed_datapath: Optional[str] = None
) -> List[inputs.ModelOutputs]:
    """World logs (``name=path`` or ``path``, name = file stem) and committed rows' outputs
    (``name=path`` or ``path``, name = the row's folder), parsed; the rows' contexts come from the
    cleaned ED test split at ``ed_datapath`` (default: ``$PARLAI_EMPATHY_ED_DIR``)."""
    parsed = [inputs.read_world_log(path, model=name) for name, path in map(_named, specs)]
    if outputs_specs:
        from parlai_empathy.data import ed_source

        items = inputs.ed_items(ed_source.resolve_ed_dir(ed_datapath), 'test')
        parsed += [inputs.read_outputs(path, items, model=name) for name, path in map(_named, outputs_specs)]
    return parsed


def build_task(
    db_path: str,
    mode: str,
    world_logs: Sequence[str] = (),
    pairings: Optional[str] = None,
    per_emotion: int = 0,
    num_items: int = 0,
    annotators: int = 3,
    items_per_assignment: int = 10,
    checks_per_assignment: int = 1,
    seed: int = 0,
    lease_seconds: int = 300,
    completion_url: str = '',
    acute_pairings_out: Optional[str] = None,
    overwrite: bool = False,
    aspects: Optional[Sequence[str]] = None,
    outputs: Sequence[str] = (),
    ed_datapath: Optional[str] = None,
) -> TaskDB:
    """Build and store a Likert or A/B task.

    Likert and A/B from world logs and committed rows' ``outputs`` (see
    :func:`parse_model_args`): ``per_emotion`` (MIME: 4) picks an emotion-stratified sample,
    else ``num_items`` a uniform one (0 = all shared items). A/B compares every model pair. A/B
    from ``pairings`` (ACUTE-Eval JSONL) uses each pairing as one unit.
    """
    if mode not in (sampling.LIKERT, sampling.AB):
        raise ValueError(f'mode must be likert or ab, got {mode!r}')
    if annotators < 1 or items_per_assignment < 1 or checks_per_assignment < 0:
        raise ValueError('annotators and items per assignment must be >= 1, checks >= 0')
    if pairings and mode != sampling.AB:
        raise ValueError('ACUTE-Eval pairings can only drive an A/B task')
    if pairings:
        pairs = inputs.read_pairings(pairings)
        units = sampling.ab_units_from_pairings(pairs, annotators, seed)
        items = {u.item_id: inputs.Item(u.item_id, '', '', [tuple(t) for t in u.display['context']], '') for u in units}
        models = sorted({m for p in pairs for m in p.models})
        checks = []  # pairings carry no gold replies; ACUTE uses onboarding pairs instead
    else:
        parsed = parse_model_args(world_logs, outputs, ed_datapath)
        if len(parsed) < (1 if mode == sampling.LIKERT else 2):
            raise ValueError(f'{mode} needs {"a model" if mode == "likert" else "2+ models"} (--world-logs, --outputs)')
        items, models = inputs.align(parsed)
        selected = sampling.select_items(items, per_emotion, num_items, seed)
        responses = {o.model: o.responses for o in parsed}
        if mode == sampling.LIKERT:
            units = sampling.likert_units(items, responses, selected, annotators)
        else:
            matchups = list(itertools.combinations(models, 2))
            units = sampling.ab_units(items, responses, selected, matchups, annotators, seed)
            for idx, unit in enumerate(units):
                unit.extra['pairing_index'] = idx  # its line in the ACUTE pairings file
        check_pool = [i for i in items if i not in set(selected)] or list(items)
        n_checks = max(20, 2 * checks_per_assignment) if checks_per_assignment else 0
        checks = sampling.check_units(mode, items, check_pool, n_checks, seed + 1) if n_checks else []
        if mode == sampling.AB and acute_pairings_out:
            write_acute_pairings(acute_pairings_out, items, responses, units)
    aspects = list(aspects or (LIKERT_ASPECTS if mode == sampling.LIKERT else AB_ASPECTS))
    if mode == sampling.LIKERT and checks and sampling.CHECK_ASPECT not in aspects:
        raise ValueError(
            f'Likert attention checks are scored on the {sampling.CHECK_ASPECT!r} rating, but --aspects '
            f'{",".join(aspects)} lacks it: add {sampling.CHECK_ASPECT} to --aspects, or pass '
            '--checks-per-assignment 0.'
        )
    config = {
        'mode': mode,
        'aspects': aspects,
        'models': models,
        'seed': seed,
        'annotators': annotators,
        'items_per_assignment': items_per_assignment,
        'checks_per_assignment': checks_per_assignment if checks else 0,
        'lease_seconds': lease_seconds,
        'completion_url': completion_url,
        'source': {'world_logs': list(world_logs), 'pairings': pairings},
    }
    return TaskDB.create(db_path, config, items, units + checks, overwrite=overwrite)


def write_acute_pairings(path, items, responses, units) -> None:
    """The A/B units as an ACUTE-Eval pairings file (unit order), for use in ParlAI's tool."""
    rows = []
    for u in units:
        m1, m2 = sorted(u.models)
        item = items[u.item_id]
        rows.append(
            {
                'is_onboarding': False,
                'speakers_to_eval': [m1, m2],
                'dialogue_ids': [f'{u.item_id}:{m1}', f'{u.item_id}:{m2}'],
                'dialogue_dicts': [inputs.acute_dialogue(item, m, responses[m][u.item_id]) for m in (m1, m2)],
            }
        )
    inputs.write_pairings(path, rows)
