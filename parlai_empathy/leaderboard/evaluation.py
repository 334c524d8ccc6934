"""Entries into board rows: each ``--entries`` item evaluated (a model file, in ParlAI's own eval
loop, with the suite's metrics recorded by the ED teacher), read (a saved ``eval_model`` report, an
earlier board's row) or scored offline (saved world logs), as an :class:`EntryResult`.

Rankers are evaluated as Rashkin et al. did: P@1,100 on the test set's 100-example candidate
blocks (consecutive and shuffled), and BLEU of the response retrieved from the ED train listener
pool. Emotion classifiers are evaluated on their own task's test split. BERTScore is computed once
per model from the world logs, in batches (:func:`add_bertscore`).
"""

import dataclasses
import os
import shlex
import tempfile
import time
from typing import Dict, List, Optional

from parlai_empathy.evidence import artifacts as evidence
from parlai_empathy.integration.model_opt import read_model_opt
from parlai_empathy.leaderboard.eval_loop import eval_command, run_eval
from parlai_empathy.leaderboard.records import Entry, EntryResult
from parlai_empathy.leaderboard.worldlogs import classifier_rows, generation_rows, p100_hits
from parlai_empathy.metrics.retrieval import METRIC as P100
from parlai_empathy.metrics.retrieval import SHUFFLED_METRIC as P100_SHUFFLED
from parlai_empathy.metrics.suite import ScoredExample, score_examples, suite_values


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


def attach_entry_args(entries: List[Entry], specs: Optional[List[str]]) -> List[Entry]:
    """The entries with ``name=ARGS`` specs' eval_model arguments added to their entry's (e.g.
    ``gen='--inference beam'``)."""
    names = sorted(e.name for e in entries)
    added: Dict[str, List[str]] = {}
    for spec in specs or []:
        name, sep, args = spec.partition('=')
        if not sep or name not in names:
            raise ValueError(f'--entry-args {spec!r}: expected NAME=ARGS with NAME one of {names}')
        added.setdefault(name, []).extend(shlex.split(args))
    return [
        dataclasses.replace(e, extra_args=e.extra_args + tuple(added[e.name])) if e.name in added else e
        for e in entries
    ]


def model_kind(model_file: str, trust: bool = False) -> str:
    """'ranker', 'generator' or 'classifier': the kind :func:`parlai_empathy.integration.safe_loading.model_folder`
    decides for the model file, which it opens only if its agent is ours or ``trust``."""
    from parlai_empathy.integration.safe_loading import model_folder

    try:
        return model_folder(model_file, trust).kind
    except ValueError as err:
        raise ValueError(f'{model_file}: {err}, so it has no place on the leaderboard') from None


def evaluate_entry(
    entry: Entry,
    task: str,
    outdir: str,
    common_args: List[str],
    pool_path: Optional[str],
    progress: bool = True,
    p100_shuffled: bool = True,
    workers: int = 1,
    trust: bool = False,
) -> EntryResult:
    """Figures for one entry, with the command lines that reproduce them; its ``outputs`` hold the
    per-example rows for the artifacts (not written to results.json). ``workers`` > 1: each
    evaluation sharded over that many processes (:func:`~.eval_loop.run_eval`). ``trust``: a model
    file of an agent that is not ours is evaluated too (``--trust-model-file``), else refused unopened."""
    started = time.time()
    row = dict(name=entry.name, path=entry.path, source=entry.source)
    if entry.source == 'leaderboard':
        return earlier_result(entry)
    if entry.source == 'report':
        saved = evidence.read_json(entry.path)
        return EntryResult(
            values=suite_values(saved.get('report', saved)), commands=[], seconds=time.time() - started, **row
        )
    if entry.source == 'world_logs':
        return EntryResult(
            values={},
            commands=[],
            world_logs=entry.path,
            outputs=generation_rows(entry.path),
            seconds=time.time() - started,
            **row,
        )

    kind = model_kind(entry.path, trust)
    if kind == 'classifier':
        return evaluate_classifier(entry, outdir, common_args, progress, started, workers)
    base = ['-t', task, '-dt', 'test', '-mf', entry.path] + common_args + list(entry.extra_args)
    logs = os.path.join(outdir, f'{entry.name}.world_logs.jsonl')
    values: Dict[str, float] = {}
    commands: List[str] = []
    exs: Dict[str, int] = {}
    if kind == 'ranker':
        rows_by_id: Dict[str, Dict[str, int]] = {}
        with tempfile.TemporaryDirectory() as scratch:
            protocols = [(P100, ['--ed-candidates', 'rashkin100'])]
            if p100_shuffled:
                shuffled = ['--ed-candidates', 'rashkin100_shuffled', '--ed-candidates-seed', '0']
                protocols.append((P100_SHUFFLED, shuffled))
            for metric, candidates in protocols:
                args = base + candidates + ['--eval-candidates', 'inline']
                block_logs = os.path.join(scratch, f'{metric}.jsonl')
                report = run_eval(args, block_logs, f'{entry.name} {metric}', progress, workers)
                hits = p100_hits(block_logs, int(report['exs'].value()))
                values[metric] = sum(hits.values()) / len(hits)
                exs[metric] = len(hits)
                if abs(values[metric] - suite_values(report).get(metric, -1)) > 1e-9:
                    raise evidence.ArtifactError(
                        f'{entry.name}: {metric} from the ranked lists '
                        f"({values[metric]}) differs from the teacher's "
                        f'({suite_values(report).get(metric)})'
                    )
                for where, hit in hits.items():
                    rows_by_id.setdefault(where, {})[metric] = hit
                commands.append(eval_command(args, workers))
        if pool_path is None:
            raise ValueError('rankers need the retrieval pool (--pool); build it with parlai empathy_build_candidates')
        # test responses are not in the train pool: ParlAI must not look for the gold among them
        retrieve = base + [
            '--eval-candidates',
            'fixed',
            '--fixed-candidates-path',
            pool_path,
            '--ignore-bad-candidates',
            'true',
            '--ed-candidates',
            'none',
        ]
        report = run_eval(retrieve, logs, f'{entry.name} retrieval', progress, workers)
        values.update({k: v for k, v in suite_values(report).items() if k not in (P100, P100_SHUFFLED)})
        commands.append(eval_command(retrieve + ['--world-logs', logs], workers))
        outputs = generation_rows(logs)
        for output in outputs:
            output.update(rows_by_id.get(output['id'], {}))
    else:
        generate = base + ['--skip-generation', 'false', '--ed-candidates', 'none']
        report = run_eval(generate, logs, f'{entry.name} generation', progress, workers)
        values.update(suite_values(report))
        commands.append(eval_command(generate + ['--world-logs', logs], workers))
        outputs = generation_rows(logs)
    # every figure but P@1,100 is measured on the generation (or retrieval) pass's examples
    counts = {key: len(outputs) for key in values if key not in (P100, P100_SHUFFLED)}
    return EntryResult(
        values=values,
        commands=commands,
        kind=kind,
        world_logs=logs,
        outputs=outputs,
        exs=dict(counts, **exs),
        seconds=time.time() - started,
        **row,
    )


def evaluate_classifier(
    entry: Entry, outdir: str, common_args: List[str], progress: bool, started: float, workers: int = 1
) -> EntryResult:
    """An emotion classifier on the test split of the task it was trained on.

    ED 32-way utterance classifiers are also scored on the Speaker utterances alone: their
    agreement with the conversation's label (``speaker_agreement``, the ETHREED paper's 62.8 %).
    Multi-label taggers are scored at the threshold(s) stored with the model.
    """
    opt = read_model_opt(entry.path)
    task = opt['task']
    if 'goemotions' in task:  # the ED data options mean nothing to the GoEmotions teacher
        common_args = _without_option(common_args, '--ed-datapath')
    base = ['-t', task, '-dt', 'test', '-mf', entry.path] + common_args + list(entry.extra_args)
    if opt.get('ed_emotion_input'):  # a task option: the model file does not carry it to the teacher
        base += ['--ed-emotion-input', opt['ed_emotion_input']]
    tuned = bool(opt.get('multilabel') and opt.get('multilabel_thresholds'))
    if tuned:  # the paper's single 0.3 first: the main columns; then the per-label thresholds
        base += ['--threshold-scheme', 'single']
    logs = os.path.join(outdir, f'{entry.name}.world_logs.jsonl')
    report = run_eval(base, logs, f'{entry.name} test', progress, workers)
    commands = [eval_command(base + ['--world-logs', logs], workers)]
    values = {
        k: float(report[k].value() if hasattr(report[k], 'value') else report[k])
        for k in ('accuracy', 'macro_f1', 'micro_f1')
        if k in report
    }
    outputs = classifier_rows(logs)
    exs = {k: len(outputs) for k in values}
    per_label = evidence.label_f1(outputs, 'predicted', opt['classes'])['labels']
    per_label_tuned = None
    if tuned:
        tuned_args = base[:-1] + ['tuned']
        tuned_logs = os.path.join(outdir, f'{entry.name}.tuned.world_logs.jsonl')
        tuned_report = run_eval(tuned_args, tuned_logs, f'{entry.name} test, tuned thresholds', progress, workers)
        commands.append(eval_command(tuned_args + ['--world-logs', tuned_logs], workers))
        for key in ('macro_f1', 'micro_f1'):
            values[f'{key}_tuned'] = float(tuned_report[key].value())
            exs[f'{key}_tuned'] = len(outputs)
        tuned_rows = classifier_rows(tuned_logs)
        per_label_tuned = evidence.label_f1(tuned_rows, 'predicted', opt['classes'])['labels']
        for output, tuned_row in zip(outputs, tuned_rows):
            output['predicted_tuned'] = tuned_row['predicted']
    if opt.get('ed_emotion_input') == 'utterance':
        speaker = base + ['--ed-emotion-input', 'speaker_utterance']
        speaker_report = run_eval(speaker, None, f'{entry.name} speaker utterances', progress, workers)
        values['speaker_agreement'] = float(speaker_report['accuracy'].value())
        exs['speaker_agreement'] = int(speaker_report['exs'].value())
        commands.append(eval_command(speaker, workers))
    return EntryResult(
        name=entry.name,
        path=entry.path,
        source=entry.source,
        kind='classifier',
        values=values,
        commands=commands,
        exs=exs,
        per_label=per_label,
        per_label_tuned=per_label_tuned,
        world_logs=logs,
        outputs=outputs,
        seconds=time.time() - started,
    )


def _without_option(args: List[str], flag: str) -> List[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        else:
            out.append(arg)
    return out


def earlier_result(entry: Entry) -> EntryResult:
    """The row of an earlier leaderboard's results.json, renamed to this entry."""
    path, _, row = entry.path.partition('#')
    rows = evidence.read_json(path).get('results', [])
    wanted = row or entry.name
    found = [r for r in rows if r.get('name') == wanted]
    if not found and not row and len(rows) == 1:
        found = rows
    if not found:
        names = ', '.join(r.get('name', '?') for r in rows)
        raise ValueError(
            f'leaderboard entry {entry.name!r}: {path} has no row {wanted!r} (rows: {names}); '
            f'name it as {entry.name}={path}#ROW'
        )
    saved = dict(found[0], name=entry.name, path=entry.path, source='leaderboard')
    saved['values'] = dict(found[0].get('values', {}))
    return EntryResult.from_json(saved, f'{path} row {wanted!r}')


def add_bertscore(result: EntryResult, scorer) -> EntryResult:
    """The result with BERTScore F1 of its saved responses (batched); each example's score goes
    into its output row."""
    outputs = result.outputs
    if not outputs or result.kind == 'classifier' or scorer is None:
        return result
    replied = [i for i, row in enumerate(outputs) if row.get('reply') is not None]
    scores = scorer.f1([outputs[i]['reply'] for i in replied], [outputs[i]['gold'] for i in replied])
    scored = list(outputs)
    for i, score in zip(replied, scores):
        scored[i] = dict(outputs[i], bertscore_f=score)
    return dataclasses.replace(
        result,
        outputs=scored,
        values=dict(result.values, bertscore_f=sum(scores) / len(scores)),
        exs=dict(result.exs or {}, bertscore_f=len(scores)),
        notes=dict(result.notes or {}, bertscore_f=scorer.describe()),
    )


def add_offline_figures(result: EntryResult) -> EntryResult:
    """The result with the figures its saved outputs alone give, for entries read from world logs
    (a figure the entry already has is kept)."""
    if result.source != 'world_logs':
        return result
    examples: List[ScoredExample] = [ScoredExample('', r['gold'], r.get('reply')) for r in result.outputs]
    scored = score_examples(examples)
    values = dict(result.values)
    for key, value in scored.values.items():
        values.setdefault(key, value)
    return dataclasses.replace(result, values=values, notes=dict(result.notes or {}, **scored.notes))
