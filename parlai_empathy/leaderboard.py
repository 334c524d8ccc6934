"""A leaderboard: every model evaluated on ED test with the one metric suite.

Each entry is a trained model file (evaluated here, in ParlAI's own eval loop, with the suite's
metrics recorded by the ED teacher), a saved ``eval_model`` report, or saved world logs (scored
offline with the same code). Rankers are evaluated as Rashkin et al. did: P@1,100 on the test
set's 100-example candidate blocks (consecutive and shuffled), and BLEU of the response retrieved
from the ED train listener pool. Emotion classifiers are evaluated on their own task's test split.
BERTScore is computed once per model from the world logs, in batches.

With ``artifacts`` each evaluated entry leaves its evidence in ``<artifacts>/<entry>/``
(:mod:`parlai_empathy.evidence`); :func:`gather_artifacts` rebuilds the boards and the project
tables from those folders alone.

Outputs: ``results.json`` (figures, example counts, the commands behind each figure) and
``leaderboard.csv`` hold every figure; ``leaderboard.md`` the headline metrics in one table (then
each model family's other figures); ``leaderboard.png`` one panel per headline metric, the
paper's figure on the bars' scale (:func:`headline_panels` gives its data, :func:`draw_panels`
draws it). :func:`fill_project_tables` writes the figures into ``projects/<paper>/README.md``
tables described by ``projects/<paper>/table.json``.
"""
import csv
import datetime
import json
import math
import os
import shlex
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from parlai_empathy import evidence
from parlai_empathy.metrics.retrieval import METRIC as P100, SHUFFLED_METRIC as P100_SHUFFLED
from parlai_empathy.metrics.suite import COLUMNS, ScoredExample, score_examples, suite_values

SHOWN = [P100, P100_SHUFFLED, 'avg_bleu', 'multi_bleu', 'dist-1', 'dist-2', 'bertscore_f', 'ppl', 'ppl_ex',
         'ppl_ex_gold', 'emo_acc', 'emo_acc@2', 'emo_acc@5']
CLASSIFIER_COLUMNS = ['accuracy', 'macro_f1', 'micro_f1', 'macro_f1_tuned', 'micro_f1_tuned', 'speaker_agreement']


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


def read_model_opt(model_file: str) -> Dict:
    with open(model_file + '.opt') as f:
        return json.load(f)


def model_kind(model_file: str, trust: bool = False) -> str:
    """'ranker', 'generator' or 'classifier', from the agent class the model file was trained with.
    Its agent is imported (and the file later opened by it) only if it is one of ours or ``trust``
    (:func:`parlai_empathy.safe_loading.check_model_trust`)."""
    from parlai.core.loader import load_agent_module
    from parlai.core.torch_classifier_agent import TorchClassifierAgent
    from parlai.core.torch_generator_agent import TorchGeneratorAgent
    from parlai.core.torch_ranker_agent import TorchRankerAgent

    from parlai_empathy.safe_loading import check_model_trust

    model = check_model_trust(model_file, trust)
    agent_class = load_agent_module(model)
    if issubclass(agent_class, TorchRankerAgent):
        return 'ranker'
    if issubclass(agent_class, TorchGeneratorAgent):
        return 'generator'
    if issubclass(agent_class, TorchClassifierAgent):
        return 'classifier'
    raise ValueError(f'{model_file}: {model} is neither a response generator, a response ranker nor an '
                     'emotion classifier, so it has no place on the leaderboard')


def attach_entry_args(entries: List[Entry], specs: List[str]) -> None:
    """``name=ARGS`` adds eval_model arguments for one entry (e.g. ``gen='--inference beam'``)."""
    by_name = {e.name: e for e in entries}
    for spec in specs or []:
        name, sep, args = spec.partition('=')
        if not sep or name not in by_name:
            raise ValueError(f'--entry-args {spec!r}: expected NAME=ARGS with NAME one of {sorted(by_name)}')
        by_name[name].extra_args += shlex.split(args)


def _eval(opt_args: List[str], world_logs: Optional[str], desc: str, progress: bool, workers: int = 1):
    """ParlAI's eval loop (as in ``eval_model``) with a progress bar over examples; ``workers`` > 1
    shards it over that many processes (as ``parlai multiprocessing_eval`` does, see
    :func:`_sharded_eval`)."""
    if workers > 1:
        return _sharded_eval(opt_args, world_logs, desc, progress, workers)
    return _eval_loop(_eval_opt(opt_args, world_logs), world_logs, desc, progress)


def _eval_opt(opt_args: List[str], world_logs: Optional[str]):
    """``eval_model``'s options for these arguments (and world logs)."""
    from parlai.scripts.eval_model import setup_args

    return setup_args().parse_args(list(opt_args) + (['--world-logs', world_logs] if world_logs else []))


def eval_command(args: List[str], workers: int = 1) -> str:
    """The ParlAI command that evaluates like :func:`_eval` with these arguments."""
    if workers > 1:
        return 'parlai multiprocessing_eval ' + shlex.join(['--distributed-world-size', str(workers)] + list(args))
    return 'parlai eval_model ' + shlex.join(args)


def _shard_logs(world_logs: str, rank: int) -> str:
    base, extension = os.path.splitext(world_logs)
    return f'{base}_{rank}{extension}'


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _sharded_eval(opt_args: List[str], world_logs: Optional[str], desc: str, progress: bool, workers: int):
    """The evaluation sharded over ``workers`` processes: this one (rank 0) and ``workers - 1``
    spawned ones, as ``parlai multiprocessing_eval --distributed-world-size N`` runs it (ParlAI's
    teachers give rank r the episodes i with i % N == r in evaluation; the reports are summed, so
    counts, accuracies, BLEU and corpus Distinct-n equal the 1-worker figures and float sums such as
    PPL agree to rounding: tests/test_sharded_eval.py). Each rank writes its own world log; rank 0
    joins them into ``world_logs`` in rank order (so the examples are not in the 1-worker order)."""
    import torch.multiprocessing

    port = _free_port()
    spawned = torch.multiprocessing.start_processes(
        _eval_shard, args=(opt_args, world_logs, desc, False, workers, port, 1), nprocs=workers - 1,
        join=False, start_method='spawn')
    try:
        report = _eval_shard(0, opt_args, world_logs, desc, progress, workers, port, 0)
        spawned.join()
    except BaseException:
        for process in spawned.processes:
            if process.is_alive():
                process.terminate()
        raise
    if world_logs:
        with open(world_logs, 'w', encoding='utf-8') as out:
            for rank in range(workers):
                with open(_shard_logs(world_logs, rank), encoding='utf-8') as f:
                    shutil.copyfileobj(f, out)
                os.remove(_shard_logs(world_logs, rank))
    return report


def _eval_shard(index: int, opt_args: List[str], world_logs: Optional[str], desc: str, progress: bool,
                workers: int, port: int, rank_offset: int):
    """One rank of :func:`_sharded_eval` (``index + rank_offset``; spawned ranks start at 1)."""
    from parlai.core.metrics import aggregate_unnamed_reports
    from parlai.utils import distributed as distributed_utils

    rank = index + rank_offset
    logs = _shard_logs(world_logs, rank) if world_logs else None
    opt = _eval_opt(opt_args, logs)
    opt['distributed_world_size'] = workers
    with distributed_utils.distributed_context(index, opt, rank_offset,
                                               init_method=f'tcp://localhost:{port}') as opt:
        opt['multiprocessing'] = True
        report = _eval_loop(opt, logs, f'{desc} (rank 0 of {workers})', progress)
        return aggregate_unnamed_reports(distributed_utils.all_gather_list(report))


def _eval_loop(opt, world_logs: Optional[str], desc: str, progress: bool):
    from parlai.core.agents import create_agent
    from parlai.core.worlds import create_task
    from parlai.utils.world_logging import WorldLogger
    from tqdm import tqdm

    agent = create_agent(opt, requireModelExists=True)
    world_logger = WorldLogger(opt) if world_logs else None
    world = create_task(opt, agent)
    total = world.num_examples()
    if opt['num_examples'] > 0:  # -ne N, as in eval_model
        total = min(total, opt['num_examples'])
    shards = opt.get('distributed_world_size') or 1 if opt.get('multiprocessing') else 1
    # a shard's share of the examples (rank 0's may be one more or less)
    bar = tqdm(total=-(-total // shards), desc=desc, unit='ex', disable=not progress, leave=False)
    seen = 0
    while not world.epoch_done() and seen < total:
        world.parley()
        if world_logger is not None:
            world_logger.log(world)
        # count the examples this parley really held: a batch slot whose episode is over holds
        # padding, and counting batchsize per parley would stop the loop while longer episodes
        # still have turns (it once dropped 2 of the 5,200 P@1,100 examples at -bs 64)
        done = _examples_in_parley(world)
        seen += done
        bar.update(done)
    bar.close()
    if world_logger is not None:
        world_logger.reset()
        world_logger.write(world_logs, world, file_format='conversations')
    report = world.report()
    world.reset()
    return report


def _examples_in_parley(world) -> int:
    """How many real (non-padding) teacher messages the last ``parley()`` of ``world`` held."""
    from parlai.core.message import Message

    acts = world.get_acts()
    if acts and isinstance(acts[0], (list, tuple)):  # a batch world: one list of slots per agent
        teacher_acts = acts[0]
    else:
        teacher_acts = acts[:1]
    return sum(1 for act in teacher_acts if act and not Message(act).is_padding())


# ----- per-example outputs -------------------------------------------------------------------------
def _pairs(world_logs: str):
    with open(world_logs, encoding='utf-8') as f:
        for line in f:
            if line.strip():
                for teacher, model in json.loads(line)['dialog']:
                    yield teacher, model


def _gold(teacher) -> str:
    labels = teacher.get('eval_labels') or teacher.get('labels') or ['']
    return labels[0]


def generation_rows(world_logs: str) -> List[Dict]:
    """``outputs.jsonl.gz`` rows of a generator (or a ranker's retrieval pass)."""
    rows = []
    for teacher, model in _pairs(world_logs):
        metrics = model.get('metrics') or {}
        row = {'id': evidence.example_id(teacher), 'gold': _gold(teacher), 'reply': model.get('text', ''),
               'emotion': teacher.get('emotion')}
        for key in ('predicted_emotion', 'emotion_polarity', 'speaker_emotion', 'response_emotion'):
            if model.get(key) is not None:
                row[key] = model[key]
        # ParlAI's llen is the label's length before truncation; ltrunclen what truncation cut
        tokens = metrics.get('llen') and round(metrics['llen'] - (metrics.get('ltrunclen') or 0))
        if tokens and metrics.get('loss') is not None:
            row['tokens'] = int(tokens)
            row['nll'] = float(metrics['loss']) * tokens
            if metrics.get('ppl_gold') is not None:
                row['nll_gold'] = math.log(float(metrics['ppl_gold'])) * tokens
        for key in ('emo_acc', 'emo_acc@2', 'emo_acc@5'):
            if metrics.get(key) is not None:
                row[key] = int(round(float(metrics[key])))
        rows.append(row)
    return rows


def p100_hits(world_logs: str, expected: Optional[int] = None) -> Dict[str, int]:
    """Example id -> 1 if the gold was ranked first among its block's 100 candidates.

    Every example of every block must have been ranked: a missing or short ranking stops the
    evaluation naming the example. A candidate counts as the gold when its text equals the gold's
    under ParlAI's answer normalization, so a block holding the gold text twice counts either
    copy ranked first as correct (see ``metrics/retrieval.py``).
    """
    from parlai_empathy.metrics.retrieval import NUM_CANDIDATES, top1_correct

    hits = {}
    for teacher, model in _pairs(world_logs):
        where = evidence.example_id(teacher)
        candidates = teacher.get('label_candidates') or []
        if len(candidates) != NUM_CANDIDATES:
            raise evidence.ArtifactError(f'P@1,100: example {where} has {len(candidates)} candidates, not '
                                         f'{NUM_CANDIDATES}')
        ranked = model.get('text_candidates') or []
        if not ranked:
            raise evidence.ArtifactError(f'P@1,100: example {where} was not ranked (the model returned no '
                                         'text_candidates)')
        hits[where] = int(top1_correct(ranked, _gold(teacher), len(candidates)))
    if expected is not None and len(hits) != expected:
        raise evidence.ArtifactError(f'P@1,100 covers {len(hits)} examples, not the {expected} of the blocks of 100 '
                                     '(full ED test: 5,200)')
    return hits


# ----- evaluation ----------------------------------------------------------------------------------
def evaluate_entry(entry: Entry, task: str, outdir: str, common_args: List[str], pool_path: Optional[str],
                   progress: bool = True, p100_shuffled: bool = True, workers: int = 1, trust: bool = False) -> Dict:
    """Figures for one entry, with the command lines that reproduce them; ``result['outputs']`` holds
    the per-example rows for the artifacts (not written to results.json). ``workers`` > 1: each
    evaluation sharded over that many processes (:func:`_sharded_eval`). ``trust``: a model file of
    an agent that is not ours is evaluated too (``--trust-model-file``), else refused unopened."""
    started = time.time()
    result = {'name': entry.name, 'path': entry.path, 'source': entry.source, 'values': {}, 'commands': []}
    if entry.source == 'leaderboard':
        return earlier_result(entry)
    if entry.source == 'report':
        saved = evidence.read_json(entry.path)
        result['values'] = suite_values(saved.get('report', saved))
        result['seconds'] = time.time() - started
        return result
    if entry.source == 'world_logs':
        result['world_logs'] = entry.path
        result['outputs'] = generation_rows(entry.path)
        result['seconds'] = time.time() - started
        return result

    kind = model_kind(entry.path, trust)
    result['kind'] = kind
    if kind == 'classifier':
        return evaluate_classifier(entry, result, outdir, common_args, progress, started, workers)
    base = ['-t', task, '-dt', 'test', '-mf', entry.path] + common_args + entry.extra_args
    logs = os.path.join(outdir, f'{entry.name}.world_logs.jsonl')
    exs = {}
    if kind == 'ranker':
        rows_by_id = {}
        with tempfile.TemporaryDirectory() as scratch:
            protocols = [(P100, ['--ed-candidates', 'rashkin100'])]
            if p100_shuffled:
                protocols.append((P100_SHUFFLED, ['--ed-candidates', 'rashkin100_shuffled', '--ed-candidates-seed', '0']))
            for metric, candidates in protocols:
                args = base + candidates + ['--eval-candidates', 'inline']
                block_logs = os.path.join(scratch, f'{metric}.jsonl')
                report = _eval(args, block_logs, f'{entry.name} {metric}', progress, workers)
                hits = p100_hits(block_logs, int(report['exs'].value()))
                result['values'][metric] = sum(hits.values()) / len(hits)
                exs[metric] = len(hits)
                if abs(result['values'][metric] - suite_values(report).get(metric, -1)) > 1e-9:
                    raise evidence.ArtifactError(f'{entry.name}: {metric} from the ranked lists '
                                                 f'({result["values"][metric]}) differs from the teacher\'s '
                                                 f'({suite_values(report).get(metric)})')
                for where, hit in hits.items():
                    rows_by_id.setdefault(where, {})[metric] = hit
                result['commands'].append(eval_command(args, workers))
        if pool_path is None:
            raise ValueError('rankers need the retrieval pool (--pool); build it with parlai empathy_build_candidates')
        # test responses are not in the train pool: ParlAI must not look for the gold among them
        retrieve = base + ['--eval-candidates', 'fixed', '--fixed-candidates-path', pool_path,
                           '--ignore-bad-candidates', 'true', '--ed-candidates', 'none']
        report = _eval(retrieve, logs, f'{entry.name} retrieval', progress, workers)
        result['values'].update({k: v for k, v in suite_values(report).items() if k not in (P100, P100_SHUFFLED)})
        result['commands'].append(eval_command(retrieve + ['--world-logs', logs], workers))
        outputs = generation_rows(logs)
        for row in outputs:
            row.update(rows_by_id.get(row['id'], {}))
    else:
        generate = base + ['--skip-generation', 'false', '--ed-candidates', 'none']
        report = _eval(generate, logs, f'{entry.name} generation', progress, workers)
        result['values'].update(suite_values(report))
        result['commands'].append(eval_command(generate + ['--world-logs', logs], workers))
        outputs = generation_rows(logs)
    result['world_logs'] = logs
    result['outputs'] = outputs
    result['exs'] = dict(_generation_counts(result['values'], outputs), **exs)
    result['seconds'] = time.time() - started
    return result


def _generation_counts(values: Dict[str, float], outputs: List[Dict]) -> Dict[str, int]:
    n = len(outputs)
    return {key: n for key in values if key not in (P100, P100_SHUFFLED)}


def evaluate_classifier(entry: Entry, result: Dict, outdir: str, common_args: List[str], progress: bool,
                        started: float, workers: int = 1) -> Dict:
    """An emotion classifier on the test split of the task it was trained on.

    ED 32-way utterance classifiers are also scored on the Speaker utterances alone: their
    agreement with the conversation's label (``speaker_agreement``, the ETHREED paper's 62.8 %).
    Multi-label taggers are scored at the threshold(s) stored with the model.
    """
    opt = read_model_opt(entry.path)
    task = opt['task']
    if 'goemotions' in task:  # the ED data options mean nothing to the GoEmotions teacher
        common_args = _without_option(common_args, '--ed-datapath')
    base = ['-t', task, '-dt', 'test', '-mf', entry.path] + common_args + entry.extra_args
    if opt.get('ed_emotion_input'):  # a task option: the model file does not carry it to the teacher
        base += ['--ed-emotion-input', opt['ed_emotion_input']]
    tuned = bool(opt.get('multilabel') and opt.get('multilabel_thresholds'))
    if tuned:  # the paper's single 0.3 first: the main columns; then the per-label thresholds
        base += ['--threshold-scheme', 'single']
    logs = os.path.join(outdir, f'{entry.name}.world_logs.jsonl')
    report = _eval(base, logs, f'{entry.name} test', progress, workers)
    result['commands'].append(eval_command(base + ['--world-logs', logs], workers))
    values = {k: float(report[k].value() if hasattr(report[k], 'value') else report[k])
              for k in ('accuracy', 'macro_f1', 'micro_f1') if k in report}
    outputs = classifier_rows(logs)
    exs = {k: len(outputs) for k in values}
    result['per_label'] = evidence.label_f1(outputs, 'predicted', opt['classes'])['labels']
    if tuned:
        tuned_args = base[:-1] + ['tuned']
        tuned_logs = os.path.join(outdir, f'{entry.name}.tuned.world_logs.jsonl')
        tuned_report = _eval(tuned_args, tuned_logs, f'{entry.name} test, tuned thresholds', progress, workers)
        result['commands'].append(eval_command(tuned_args + ['--world-logs', tuned_logs], workers))
        for key in ('macro_f1', 'micro_f1'):
            values[f'{key}_tuned'] = float(tuned_report[key].value())
            exs[f'{key}_tuned'] = len(outputs)
        tuned_rows = classifier_rows(tuned_logs)
        result['per_label_tuned'] = evidence.label_f1(tuned_rows, 'predicted', opt['classes'])['labels']
        for row, tuned_row in zip(outputs, tuned_rows):
            row['predicted_tuned'] = tuned_row['predicted']
    if opt.get('ed_emotion_input') == 'utterance':
        speaker = base + ['--ed-emotion-input', 'speaker_utterance']
        speaker_report = _eval(speaker, None, f'{entry.name} speaker utterances', progress, workers)
        values['speaker_agreement'] = float(speaker_report['accuracy'].value())
        exs['speaker_agreement'] = int(speaker_report['exs'].value())
        result['commands'].append(eval_command(speaker, workers))
    result['values'] = values
    result['exs'] = exs
    result['world_logs'] = logs
    result['outputs'] = outputs
    result['seconds'] = time.time() - started
    return result


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


def classifier_rows(world_logs: str) -> List[Dict]:
    rows = []
    for teacher, model in _pairs(world_logs):
        rows.append({'id': evidence.example_id(teacher), 'text': teacher.get('text', ''), 'gold': _gold(teacher),
                     'predicted': model.get('text', '')})
    return rows


def earlier_result(entry: Entry) -> Dict:
    """The row of an earlier leaderboard's results.json, renamed to this entry."""
    path, _, row = entry.path.partition('#')
    rows = evidence.read_json(path).get('results', [])
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
    """BERTScore F1 of the saved responses, batched; each example's score goes into its output row."""
    outputs = result.get('outputs')
    if not outputs or result.get('kind') == 'classifier' or scorer is None:
        return
    replied = [row for row in outputs if row.get('reply') is not None]
    scores = scorer.f1([row['reply'] for row in replied], [row['gold'] for row in replied])
    for row, score in zip(replied, scores):
        row['bertscore_f'] = score
    result['values']['bertscore_f'] = sum(scores) / len(scores)
    result.setdefault('exs', {})['bertscore_f'] = len(scores)
    result.setdefault('notes', {})['bertscore_f'] = scorer.describe()


def add_offline_figures(result: Dict) -> None:
    """Figures the saved outputs alone give, for entries read from world logs."""
    if result.get('source') != 'world_logs':
        return
    examples: List[ScoredExample] = [ScoredExample('', r['gold'], r.get('reply')) for r in result['outputs']]
    scored = score_examples(examples)
    for key, value in scored.values.items():
        result['values'].setdefault(key, value)
    result.setdefault('notes', {}).update(scored.notes)


# ----- evidence --------------------------------------------------------------------------------------
def write_entry_artifacts(result: Dict, row_dir: str, eval_command: str) -> Dict[str, str]:
    """The four files of ``parlai_empathy.evidence`` for one evaluated model entry."""
    from parlai_empathy.metrics.suite import settings_notes

    model_file = result['path']
    opt = read_model_opt(model_file)
    report = {
        'entry': result['name'], 'kind': result.get('kind'), 'values': result['values'],
        'exs': result.get('exs', {}), 'commands': result['commands'],
        'notes': dict(settings_notes(), **result.get('notes', {})),
    }
    for key in ('per_label', 'per_label_tuned'):
        if result.get(key):
            report[key] = result[key]
    if result.get('kind') != 'classifier' and result.get('outputs'):
        from parlai_empathy.metrics.bootstrap import intervals

        report['ci95'] = intervals(result['outputs'])
    meta = {
        'entry': result['name'],
        'code': evidence.code_version(),
        'machine': evidence.machine(),
        'evaluated': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
        'evaluation_seconds': round(result.get('seconds', 0.0), 1),
        'evaluation_command': eval_command,
        'examples': len(result.get('outputs') or []),
    }
    stats_path = model_file + '.trainstats'
    if os.path.isfile(stats_path):
        from parlai_empathy.learning_curve import curve, model_updates, saved_updates

        with open(stats_path) as f:
            stats = json.load(f)
        meta['training'] = {k: stats[k] for k in ('train_steps', 'total_epochs', 'train_time', 'parleys')
                            if k in stats}
        meta['training']['curve'] = curve(stats)
        updates = saved_updates(model_file)
        if updates is None:
            updates = model_updates(stats, opt.get('validation_metric') or 'loss')
        if updates is not None:  # the evaluated model: the best validated one
            meta['training']['model_updates'] = updates
    return evidence.write_row(row_dir, report, result.get('outputs') or [], opt, meta)


# ----- boards --------------------------------------------------------------------------------------
def board_columns(results: List[Dict]) -> List[str]:
    """Every figure any row has, in the CSV's order (the suite's headline columns first)."""
    columns = [c for c in SHOWN + CLASSIFIER_COLUMNS if any(c in r['values'] for r in results)]
    return columns + [c for c in COLUMNS if c not in columns and any(c in r['values'] for r in results)]


def write_outputs(results: List[Dict], outdir: str, notes: Dict[str, str]) -> Dict[str, str]:
    """results.json and leaderboard.csv hold every figure; leaderboard.md the headline table (and
    the other figures by model family); leaderboard.png the headline panels."""
    os.makedirs(outdir, exist_ok=True)
    columns = board_columns(results)
    paths = {name: os.path.join(outdir, name) for name in ('results.json', 'leaderboard.md', 'leaderboard.csv', 'leaderboard.png')}
    serializable = [{k: v for k, v in r.items() if k != 'outputs'} for r in results]
    evidence.write_json(paths['results.json'], {'results': serializable, 'notes': notes})
    with open(paths['leaderboard.csv'], 'w', newline='') as f:
        writer = csv.writer(f, lineterminator='\n')
        writer.writerow(['model'] + columns)
        for r in results:
            writer.writerow([r['name']] + [r['values'].get(c, '') for c in columns])
    with open(paths['leaderboard.md'], 'w') as f:
        f.write(markdown_board(results, notes))
    plot_headline(results, paths['leaderboard.png'])
    return paths


def _md_table(header: List[str], rows: List[List[str]]) -> List[str]:
    return (['| ' + ' | '.join(header) + ' |', '|---' * len(header) + '|']
            + ['| ' + ' | '.join(cells) + ' |' for cells in rows])


FAMILIES = [('ranker', 'Response rankers'), ('generator', 'Response generators'), ('classifier', 'Emotion classifiers'),
            (None, 'Other rows')]


def markdown_board(results: List[Dict], notes: Dict[str, str]) -> str:
    """leaderboard.md: the headline metrics of every row in one table, on the scale the figure
    shows them; then, for each model family, its rows' other figures as the suite reports them
    (so every figure of the CSV is in one of the tables); the settings notes; the commands."""
    headlines = [h for h in HEADLINE if any(h.key in r['values'] for r in results)]
    lines = _md_table(['model'] + [h.column for h in headlines],
                      [[r['name']] + [_fmt(r['values'][h.key] * h.scale) if h.key in r['values'] else ''
                                      for h in headlines] for r in results])
    lines += ['', 'Columns (the `leaderboard.csv` column, times the factor the table shows it at):', '']
    lines += [f'- **{h.column}** = `{h.key}`' + (f' × {h.scale:g}' if h.scale != 1 else '') + f': {h.title} ({h.unit})'
              + (f'; {h.note}' if h.note else '') for h in headlines]
    lines += ['', 'Every figure of every row, unrounded, is in `leaderboard.csv` and `results.json`; the tables '
              "below give each family's other figures as the suite reports them (rates as fractions)."]
    shown = {h.key for h in headlines}
    known = {kind for kind, _ in FAMILIES}
    for kind, title in FAMILIES:
        rows = [r for r in results if (r.get('kind') if r.get('kind') in known else None) == kind]
        columns = [c for c in board_columns(rows) if c not in shown]
        if rows and columns:
            lines += ['', f'### {title}: other figures', '']
            lines += _md_table(['model'] + columns, [[r['name']] + [_fmt(r['values'].get(c)) for c in columns]
                                                     for r in rows])
    lines += ['', '### Settings', '']
    lines += [f'- {key}: {note}' for key, note in sorted(notes.items())]
    lines += ['', '### Commands', '']
    for r in results:
        for command in r.get('commands', []):
            lines.append(f'- `{r["name"]}`: `{command}`')
    return '\n'.join(lines) + '\n'


def _fmt(value) -> str:
    if value is None or value == '':
        return ''
    return f'{value:.4g}' if abs(value) < 1000 else f'{value:.0f}'


@dataclass(frozen=True)
class Headline:
    """A headline metric: its report key, what it is, the scale and unit the board shows it on
    (``scale`` multiplies the report's figure: 100 turns the suite's fractions into percentages)
    and its header in the markdown table."""
    key: str
    title: str
    unit: str
    scale: float
    column: str
    note: str = ''  # said under the markdown table


# the headline figure of each family, on the scale a paper prints it, in the markdown table's order
HEADLINE = [
    Headline(P100, 'P@1,100, consecutive blocks', '%', 100, 'P@1,100 consecutive %'),
    Headline(P100_SHUFFLED, 'P@1,100, shuffled blocks', '%', 100, 'P@1,100 shuffled %'),
    Headline('ppl_ex', 'PPL, per-response mean', 'perplexity', 1, 'PPL'),
    Headline('ppl_ex_gold', 'PPL, per-response mean, gold polarity', 'perplexity', 1, 'PPL gold polarity',
             "the gold user polarity steers MIME's mimicry, as in the reference code's PPL"),
    Headline('emo_acc', 'emotion accuracy', '%', 100, 'emotion acc. %'),
    Headline('avg_bleu', 'AVG BLEU, sacrebleu', 'BLEU 0-100', 1, 'AVG BLEU'),
    Headline('multi_bleu', 'BLEU-4, multi-bleu lowercased', 'BLEU 0-100', 1, 'multi-BLEU'),
    Headline('dist-1', 'Dist-1', '%', 100, 'Dist-1 %'),
    Headline('dist-2', 'Dist-2', '%', 100, 'Dist-2 %'),
    Headline('bertscore_f', 'BERTScore F1', '0-1', 1, 'BERTScore F1'),
    Headline('accuracy', 'classifier accuracy', '%', 100, 'classifier acc. %'),
    Headline('macro_f1', 'classifier macro-F1', '0-1', 1, 'classifier macro-F1'),
]
# the figure's panels, three a row, so that panels of about as many bars share a row
PLOT_ORDER = [P100, P100_SHUFFLED, 'accuracy', 'avg_bleu', 'multi_bleu', 'bertscore_f', 'dist-1', 'dist-2', 'ppl_ex',
              'emo_acc', 'ppl_ex_gold', 'macro_f1']
FAMILY_COLOURS = {'ranker': '#4C72B0', 'generator': '#DD8452', 'classifier': '#55A868'}
OTHER_COLOUR = '#8172B3'
LABEL_WIDTH = 24  # characters of a bar's label per line; a longer one wraps at '_' or '-'


@dataclass
class Bar:
    """One row's bar: ``value`` and the paper's figure ``paper`` both on the panel's scale."""
    name: str  # the row's name on the board (``project/entry``)
    label: str  # what the figure writes beside the bar (the entry; its project heads the group)
    value: float
    paper: Optional[float]
    kind: Optional[str]


@dataclass
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


def headline_panels(results: List[Dict]) -> List[Panel]:
    """The figure's data: one panel per headline metric (in :data:`PLOT_ORDER`) with the rows that
    have it, grouped by project (each named once). A row's ``paper`` figures are on its report's scale (as its
    ``values``: :func:`gather_artifacts`), so bar and paper marker take the same ``scale``."""
    by_key = {h.key: h for h in HEADLINE}
    panels = []
    for key in PLOT_ORDER:
        headline = by_key[key]
        groups: Dict[str, List[Bar]] = {}  # in the order projects first appear
        for r in results:
            if key not in r['values']:
                continue
            project, entry = split_name(r['name'])
            paper = (r.get('paper') or {}).get(key)
            groups.setdefault(project, []).append(Bar(
                r['name'], short_label(entry), r['values'][key] * headline.scale,
                None if paper is None else paper * headline.scale, r.get('kind')))
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
    grid = [panels[i:i + cols] for i in range(0, len(panels), cols)] or [[]]
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
    ax.barh([pos for pos, _ in bars], [bar.value for _, bar in bars], height=0.8,
            color=[FAMILY_COLOURS.get(bar.kind, OTHER_COLOUR) for _, bar in bars])
    for pos, bar in bars:
        if bar.paper is not None:
            ax.plot([bar.paper, bar.paper], [pos - 0.4, pos + 0.4], color='black', linewidth=1.5)
        text = f' {_fmt(bar.value)}' + ('' if bar.paper is None else f'  (paper {_fmt(bar.paper)})')
        ax.text(max(bar.value, bar.paper or 0.0), pos, text, va='center', fontsize=7)
    ax.set_yticks(positions, [label for label, _ in slots], fontsize=7.5)
    for tick, (_, bar) in zip(ax.get_yticklabels(), slots):
        if bar is None:
            tick.set_fontweight('bold')
    ax.set_ylim(height - 0.5, -0.5)
    top = max(max(bar.value, bar.paper or 0.0) for _, bar in bars)
    ax.set_xlim(0, top * 1.45 or 1)  # room for the values written beside the longest bar
    ax.set_title(panel.heading, fontsize=10)
    ax.set_xlabel(panel.unit, fontsize=8)
    ax.tick_params(axis='x', labelsize=7.5)


def plot_headline(results: List[Dict], path: str) -> None:
    """One panel per headline metric, bars coloured by model family, only rows that have it."""
    draw_panels(headline_panels(results), path)


TABLE_START, TABLE_END = '<!-- leaderboard-table:start{} -->', '<!-- leaderboard-table:end{} -->'


def project_tables(spec: Dict) -> List[Dict]:
    """A table.json's tables: ``tables`` (each with an ``id``), or its top-level ``metrics``/``rows``."""
    if 'tables' in spec:
        return spec['tables']
    return [{'id': '', 'metrics': spec['metrics'], 'rows': spec['rows']}]


def row_report(project_dir: str, row: Dict) -> Dict:
    """A table row's report, read from its artifacts (empty when it has none)."""
    artifacts = row.get('artifacts')
    if not artifacts or not os.path.isdir(os.path.join(project_dir, artifacts)):
        return {}  # a row with a plan and no run yet
    return evidence.read_report(os.path.join(project_dir, artifacts))


def fill_project_tables(projects_dir: str) -> List[str]:
    """Rewrite every table in each ``projects/<paper>/README.md`` from its rows' artifacts.

    A table row names its artifacts folder (``runs/<row>``); figures are shown on the paper's
    scale (``scale`` per metric, e.g. 100 for a percentage). Rows without artifacts show the
    paper's figures only.
    """
    changed = []
    for paper in sorted(os.listdir(projects_dir)):
        project_dir = os.path.join(projects_dir, paper)
        spec_path, readme = os.path.join(project_dir, 'table.json'), os.path.join(project_dir, 'README.md')
        if not os.path.isfile(spec_path) or not os.path.isfile(readme):
            continue
        spec = evidence.read_json(spec_path)
        with open(readme) as f:
            text = f.read()
        new = text
        target = spec.get('learning_curve')
        if target:
            plot_project_curve(project_dir, spec)
        for table in project_tables(spec):
            suffix = f':{table["id"]}' if table.get('id') else ''
            start, end = TABLE_START.format(suffix), TABLE_END.format(suffix)
            if start not in new or end not in new:
                raise ValueError(f'{readme} has no {start} ... {end} markers')
            head, rest = new.split(start, 1)
            _, tail = rest.split(end, 1)
            new = f'{head}{start}\n{render_project_table(project_dir, table, target)}\n{end}{tail}'
            for row in table['rows']:
                new = _fill_per_label(new, project_dir, row)
        if new != text:
            with open(readme, 'w') as f:
                f.write(new)
            changed.append(readme)
    return changed


def render_project_table(project_dir: str, table: Dict, target: Optional[Dict] = None) -> str:
    """The README table; with ``target`` ({"metric", "value", "mode"}) a column gives the training
    minutes to the paper's figure, read off the row's learning curve (its ``meta.json``)."""
    metrics = table['metrics']  # [{"key": "p@1,100", "label": "P@1,100", "scale": 100}]
    header = (['model'] + [f'{m["label"]} (paper)' for m in metrics] + [f'{m["label"]} (ours)' for m in metrics]
              + ['test examples', 'evidence'])
    if target and table.get('id', '') == '':
        header.insert(-1, f'training minutes to valid {target["metric"]} {_fmt(target["value"])}')
    lines = ['| ' + ' | '.join(header) + ' |', '|---' * len(header) + '|']
    for row in table['rows']:
        report = row_report(project_dir, row)
        ours, exs, ci = report.get('values', {}), report.get('exs', {}), report.get('ci95', {})
        paper_cells = [_fmt(row.get('paper', {}).get(m['key'])) for m in metrics]
        our_cells = []
        for m in metrics:
            scale, key = m.get('scale', 1), _row_key(row, m['key'])
            cell = _fmt(ours[key] * scale) if key in ours else ''
            if cell and m.get('ci') and key in ci:
                cell += f' ({_fmt(ci[key][0] * scale)}-{_fmt(ci[key][1] * scale)})'
            our_cells.append(cell)
        counts = sorted({exs[key] for key in (_row_key(row, m['key']) for m in metrics) if key in exs})
        evidence_cell = f'[{row["artifacts"]}]({row["artifacts"]}){_gpu_note(project_dir, row)}' if ours else ''
        cells = [row['label']] + paper_cells + our_cells + [' / '.join(f'{n:,}' for n in counts)]
        if target and table.get('id', '') == '':
            cells.append(_minutes_to_target(project_dir, row, target) if ours else '')
        lines.append('| ' + ' | '.join(cells + [evidence_cell]) + ' |')
    return '\n'.join(lines)


def _gpu_note(project_dir: str, row: Dict) -> str:
    """`` (gpu plan, <card>)`` for a row whose evidence came from its gpu plan (``meta.json``): its
    batch and schedule differ from the label's, which describes the cpu plan."""
    try:
        with open(os.path.join(project_dir, row['artifacts'], 'meta.json')) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return ''
    profile = (meta.get('plan') or {}).get('profile', '')
    if not profile.startswith('gpu'):
        return ''
    return f' ({profile} plan, {(meta.get("machine") or {}).get("gpu") or "GPU"})'


PER_LABEL_START, PER_LABEL_END = '<!-- per-label-table:start:{} -->', '<!-- per-label-table:end:{} -->'


def _fill_per_label(text: str, project_dir: str, row: Dict) -> str:
    """A classifier row's per-label precision/recall/F1 (both threshold schemes when it has two)
    between ``per-label-table`` markers named after the row, if the README has them."""
    start, end = PER_LABEL_START.format(row['entry']), PER_LABEL_END.format(row['entry'])
    if start not in text or end not in text:
        return text
    report = row_report(project_dir, row)
    single, tuned = report.get('per_label', {}), report.get('per_label_tuned', {})
    lines = []
    if single:
        header = ['label', 'support', 'precision', 'recall', 'F1']
        if tuned:
            header += ['F1, tuned thresholds']
        lines = ['| ' + ' | '.join(header) + ' |', '|---' * len(header) + '|']
        for label, figures in sorted(single.items(), key=lambda kv: -kv[1]['support']):
            cells = [label, f'{figures["support"]:,}', f'{figures["precision"]:.3f}', f'{figures["recall"]:.3f}',
                     f'{figures["f1"]:.3f}']
            if tuned:
                cells.append(f'{tuned.get(label, {}).get("f1", 0.0):.3f}')
            lines.append('| ' + ' | '.join(cells) + ' |')
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f'{head}{start}\n' + '\n'.join(lines) + f'\n{end}{tail}'


def _row_key(row: Dict, key: str) -> str:
    """The report key that fills column ``key`` in ``row``: the row's ``keys`` may name another,
    where the row's model measures the column's quantity under another name (Multi-TR has no
    polarity, so the reference's PPL definition is its ``ppl_ex``, not ``ppl_ex_gold``)."""
    return (row.get('keys') or {}).get(key, key)


def _row_curve(project_dir: str, row: Dict) -> List[Dict]:
    """The row's validation curve (``meta.json``), with the row's ``keys`` applied: each point
    also carries a mapped column under the column's own key."""
    meta = evidence.read_json(os.path.join(project_dir, row['artifacts'], evidence.META))
    curve = (meta.get('training') or {}).get('curve') or []
    keys = row.get('keys') or {}
    return [dict(point, **{column: point[source] for column, source in keys.items() if source in point})
            for point in curve]


def _minutes_to_target(project_dir: str, row: Dict, target: Dict) -> str:
    from parlai_empathy.learning_curve import time_to_target

    rows = _row_curve(project_dir, row)
    if not rows:
        return ''
    reached = time_to_target(rows, target['metric'], target['value'], target.get('mode', 'min'))
    if reached is None:
        best = [r[target['metric']] for r in rows if target['metric'] in r]
        return f'not reached in {rows[-1]["minutes"]:.0f} (best {_fmt(min(best) if target.get("mode", "min") == "min" else max(best))})' if best else ''
    return f'{reached["minutes"]:.0f} ({reached["updates"]:,} updates)'


def plot_project_curve(project_dir: str, spec: Dict) -> None:
    """``learning_curve.png`` of a project: every row with a curve, the paper's figure dashed."""
    from parlai_empathy.learning_curve import plot

    target = spec['learning_curve']
    curves = {}
    for table in project_tables(spec):
        for row in table['rows']:
            if row.get('artifacts') and os.path.isdir(os.path.join(project_dir, row['artifacts'])):
                rows = _row_curve(project_dir, row)
                if rows:
                    curves[row['entry']] = rows
    if curves:
        plot(curves, target['metric'], os.path.join(project_dir, 'learning_curve.png'), target['value'],
             title=target.get('title', ''), log_y=target.get('log_y', False))


def gather_artifacts(projects_dir: str) -> List[Dict]:
    """Every project row that has artifacts, as leaderboard results (``name`` = ``paper/entry``)."""
    results = []
    for paper in sorted(os.listdir(projects_dir)):
        project_dir = os.path.join(projects_dir, paper)
        spec_path = os.path.join(project_dir, 'table.json')
        if not os.path.isfile(spec_path):
            continue
        spec = evidence.read_json(spec_path)
        for table in project_tables(spec):
            for row in table['rows']:
                if not row.get('artifacts') or not os.path.isdir(os.path.join(project_dir, row['artifacts'])):
                    continue
                report = evidence.read_report(os.path.join(project_dir, row['artifacts']))
                meta = evidence.read_json(os.path.join(project_dir, row['artifacts'], evidence.META))
                scales = {m['key']: m.get('scale', 1) for m in table['metrics']}
                results.append({
                    'name': f'{paper}/{row["entry"]}', 'kind': report.get('kind'), 'values': report['values'],
                    'exs': report.get('exs', {}), 'commands': report.get('commands', []),
                    'paper': {k: v / scales.get(k, 1) for k, v in row.get('paper', {}).items()},
                    'seconds': meta.get('evaluation_seconds', 0.0), 'notes': report.get('notes', {}),
                })
    return results


def board_notes(results: List[Dict]) -> Dict[str, str]:
    from parlai_empathy.metrics.suite import settings_notes

    notes = dict(settings_notes()) if results else {}
    for result in results:
        notes.update(result.get('notes', {}))
    notes['task'] = 'ED test (empathy_ed_clean) for response models; each classifier on its own task'
    notes['total time'] = f'{sum(r.get("seconds") or 0.0 for r in results):.0f} s of evaluation'
    return notes
