"""The evidence behind every figure of a project table: ``projects/<paper>/runs/<row>/``.

Each table row that shows our figures has a folder of committed artifacts, written by ``parlai
empathy_leaderboard --artifacts DIR`` when it evaluates the row's model:

* ``report.json``: the figures (``values``), how many examples each is computed over (``exs``),
  the evaluation commands, the settings that define them (BLEU signature, BERTScore model, ...);
* ``outputs.jsonl.gz``: one line per test example with what a metric needs (its id, the reply,
  the gold, emotions, per-example NLL and token count, P@1,100 hits, BERTScore), so every
  figure but BERTScore can be recomputed from it alone (:func:`recompute`), and BERTScore from
  the stored per-example scores;
* ``model.opt``: the model's options, machine paths replaced by placeholders (:func:`portable`);
* ``meta.json``: commit, the plan's commands, machine, load, wall times, number of examples.

No weights: the tables and ``projects/leaderboard`` regenerate from these files alone
(``parlai empathy_leaderboard --from-artifacts projects``), and a test checks that every figure
equals what its artifacts give.
"""

import gzip
import json
import math
import os
import platform
import subprocess
import time
from typing import Dict, Iterable, List, Mapping, Optional

from parlai_empathy.files.bounded import FileRefused, decode_utf8, iter_gzip_lines, load_json_file, loads_json
from parlai_empathy.files.cache_lock import atomic_write

REPORT, OUTPUTS, OPT, META = 'report.json', 'outputs.jsonl.gz', 'model.opt', 'meta.json'
ROW_FILES = (REPORT, OUTPUTS, OPT, META)
# options whose value says when or where a run happened, not what it computed
VOLATILE_OPT_KEYS = ('starttime', 'parlai_home', 'download_path', 'datapath', 'is_debug')


class ArtifactError(ValueError):
    """A row's artifacts are missing or do not agree with each other."""


def write_json(path: str, obj) -> None:
    """Sorted keys, one indentation, a final newline: the same object gives the same bytes.

    Written beside the target and renamed into place, so an interrupted write never leaves a
    truncated file where a complete one was (:func:`~parlai_empathy.files.cache_lock.atomic_write`: the
    temporary name is the writer's own, so two writers never share one)."""
    atomic_write(
        path, lambda f: f.write(json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + '\n'), binary=False
    )


def read_json(path: str, error=ArtifactError):
    """A JSON file's content; a missing or malformed file raises ``error`` naming the file, and
    the line and column where it stops being JSON (a hand-edited ``table.json``, a manifest)."""
    if not os.path.exists(path):
        raise error(f'{path} does not exist')
    try:
        return load_json_file(path, f'a JSON artifact ({os.path.basename(path)})', 'data_bytes')
    except FileRefused as err:
        raise error(str(err)) from None


# ----- portable options ----------------------------------------------------------------------------
def path_placeholders(extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """Absolute prefixes and the placeholder each becomes in committed files (longest first)."""
    places = dict(extra or {})
    places.setdefault(os.path.expanduser('~'), '~')
    # $PARLAI_EMPATHY_RUNS_DIR: set by `parlai empathy_reproduce` for its steps
    for env, name in (
        ('PARLAI_EMPATHY_RUNS_DIR', '{runs}'),
        ('PARLAI_EMPATHY_ED_DIR', '{ed_dir}'),
        ('PARLAI_EMPATHY_GOEMOTIONS_DIR', '{goemotions_dir}'),
    ):
        if os.environ.get(env):
            places.setdefault(os.path.abspath(os.environ[env]), name)
    try:
        import parlai

        places.setdefault(os.path.dirname(os.path.dirname(os.path.abspath(parlai.__file__))), '{site_packages}')
    except ImportError:  # pragma: no cover - ParlAI is always there in practice
        pass
    return dict(sorted(places.items(), key=lambda kv: -len(kv[0])))


def portable(value, places: Mapping[str, str]):
    """``value`` with every known absolute prefix replaced by its placeholder, also inside
    command lines (longest prefixes first, so ``{runs}`` wins over ``~``)."""
    if isinstance(value, str):
        for prefix, name in places.items():
            value = value.replace(prefix.rstrip('/'), name)
        return value
    if isinstance(value, list):
        return [portable(v, places) for v in value]
    if isinstance(value, dict):
        return {k: portable(v, places) for k, v in value.items()}
    return value


def portable_opt(opt: Mapping, places: Mapping[str, str]) -> Dict:
    """A model's options for committing: volatile keys dropped, machine paths replaced."""
    return portable({k: v for k, v in opt.items() if k not in VOLATILE_OPT_KEYS}, places)


def absolute_paths(obj, where: str = '') -> List[str]:
    """Every string in ``obj`` that looks like an absolute machine path (for tests and checks)."""
    found = []
    if isinstance(obj, str):
        if obj.startswith('/') and len(obj) > 1 and not obj.startswith('//'):
            found.append(f'{where}: {obj}')
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            found += absolute_paths(v, f'{where}[{i}]')
    elif isinstance(obj, dict):
        for k, v in obj.items():
            found += absolute_paths(v, f'{where}.{k}' if where else str(k))
    return found


# ----- machine and code -----------------------------------------------------------------------------
def machine() -> Dict[str, object]:
    """What ran it: CPU model and count, GPU if any, and the load when the run ended."""
    cpu = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    cpu = line.split(':', 1)[1].strip()
                    break
    except OSError:
        pass
    info = {'cpu': cpu, 'cores': os.cpu_count(), 'python': platform.python_version()}
    try:
        import torch

        info['torch'] = torch.__version__
        info['gpu'] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:  # pragma: no cover
        pass
    try:
        info['load_average'] = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        pass
    return info


# What the project's own commands write into a checkout (evidence, filled tables, curves, boards):
# a change there is not a change of the code that ran, so ``dirty`` does not count it.
EVIDENCE_PATHS = ('projects/*/runs/**', 'projects/*/README.md', 'projects/*/*.png', 'projects/leaderboard/**')


def code_version(repo: Optional[str] = None) -> Dict[str, object]:
    """The commit of the code that ran: ``$PARLAI_EMPATHY_COMMIT`` when the package was installed
    from a known commit (a run's frozen environment), else the checkout's HEAD and whether it had
    uncommitted changes to tracked files other than the evidence our commands write
    (:data:`EVIDENCE_PATHS`: a frozen clone that evaluated one row holds that row's new evidence
    when it evaluates the next)."""
    from parlai_empathy import __version__

    if os.environ.get('PARLAI_EMPATHY_COMMIT'):
        return {'commit': os.environ['PARLAI_EMPATHY_COMMIT'], 'dirty': False, 'package': __version__}
    repo = repo or os.environ.get('PARLAI_EMPATHY_REPO') or os.getcwd()
    try:
        commit = subprocess.run(
            ['git', '-C', repo, 'rev-parse', 'HEAD'], capture_output=True, text=True, check=True
        ).stdout.strip()
        excluded = [f':(exclude,glob){path}' for path in EVIDENCE_PATHS]
        dirty = bool(
            subprocess.run(
                ['git', '-C', repo, 'status', '--porcelain', '--untracked-files=no', '--', '.', *excluded],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
    except (OSError, subprocess.CalledProcessError):
        return {'commit': None}
    return {'commit': commit, 'dirty': dirty, 'package': __version__}


# the variables that choose the CPU kernels PyTorch, oneDNN and MKL use, the thread count and how
# idle OpenMP threads wait: a figure taken under them is not the machine's default
KERNEL_ENV = (
    'ATEN_CPU_CAPABILITY',
    'ONEDNN_MAX_CPU_ISA',
    'MKL_ENABLE_INSTRUCTIONS',
    'OMP_NUM_THREADS',
    'OMP_WAIT_POLICY',
    'GOMP_SPINCOUNT',
)


def benchmark_record(repo: Optional[str] = None) -> Dict[str, object]:
    """What a benchmark's JSON says of its run besides the figures: when (UTC), the machine and its
    load at that moment, the code (:func:`code_version`), the kernel settings in force. Taken at
    the start of a run; :func:`finish_benchmark_record` adds the load at its end."""
    import torch

    return {
        'taken': time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()),
        'machine': machine(),
        'code': code_version(repo),
        'kernel_env': {name: os.environ.get(name) for name in KERNEL_ENV},
        'torch_cpu_capability': torch.backends.cpu.get_cpu_capability(),
    }


def finish_benchmark_record(record: Dict[str, object]) -> Dict[str, object]:
    """``record`` with the load average at the end of the run (a run that shared the machine shows)."""
    record['load_average_end'] = machine().get('load_average')
    return record


# ----- outputs ------------------------------------------------------------------------------------
def write_outputs(path: str, rows: Iterable[Mapping]) -> int:
    """``rows`` as gzipped JSON lines (fixed mtime: the same rows give the same bytes)."""
    n = 0
    with open(path, 'wb') as raw:
        with gzip.GzipFile(filename='', mode='wb', fileobj=raw, mtime=0) as f:
            for row in rows:
                f.write((json.dumps(row, sort_keys=True, ensure_ascii=False) + '\n').encode('utf-8'))
                n += 1
    return n


def read_outputs(path: str) -> List[Dict]:
    """A row's ``outputs.jsonl.gz``, through the bounded reader (a regular file, its unpacked bytes
    and every line within their caps, each line JSON within the caps on nesting and numbers)."""
    if not os.path.exists(path):
        raise ArtifactError(f'{path} does not exist')
    rows = []
    try:
        for line_no, raw in iter_gzip_lines(path, 'per-example outputs (gzipped JSON lines)'):
            if raw.strip():
                rows.append(loads_json(decode_utf8(raw, path, line_no), path, line_no, what='an outputs row'))
    except FileRefused as err:
        raise ArtifactError(str(err)) from None
    return rows


def example_id(teacher: Mapping) -> str:
    """``conv_id/turn`` of an ED teacher message (the id in ``outputs.jsonl.gz``)."""
    conv, turn = teacher.get('conv_id'), teacher.get('turn')
    return f'{conv}/{turn}' if conv is not None else str(teacher.get('id', ''))


def label_f1(rows: List[Mapping], predicted_key: str, classes) -> Dict:
    """Per-class precision, recall, F1 and support of a classifier's outputs (multi-label golds and
    predictions are comma-separated), with macro-F1 over ``classes`` (a class never seen scores
    0, as the agent's metric and sklearn's default do) and micro-F1."""
    from parlai_empathy.data.goemotions import split_labels

    counts = {label: [0, 0, 0] for label in classes}
    for row in rows:
        gold = set(split_labels(row['gold']))
        predicted = set(split_labels(row[predicted_key])) if row.get(predicted_key) else set()
        for label in gold | predicted:
            tp_fp_fn = counts.setdefault(label, [0, 0, 0])
            tp_fp_fn[0] += label in gold and label in predicted
            tp_fp_fn[1] += label in predicted and label not in gold
            tp_fp_fn[2] += label in gold and label not in predicted
    labels = {}
    for label, (tp, fp, fn) in counts.items():
        labels[label] = {
            'precision': tp / (tp + fp) if tp + fp else 0.0,
            'recall': tp / (tp + fn) if tp + fn else 0.0,
            'f1': 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0,
            'support': tp + fn,
        }
    tp, fp, fn = (sum(c[i] for c in counts.values()) for i in range(3))
    return {
        'labels': labels,
        'macro_f1': sum(v['f1'] for v in labels.values()) / max(len(labels), 1),
        'micro_f1': 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0,
    }


def recompute_classifier(rows: List[Mapping], classes) -> Dict[str, float]:
    """A classifier row's figures from its outputs alone (single- or multi-label)."""
    values = {}
    scored = label_f1(rows, 'predicted', classes)
    values['macro_f1'], values['micro_f1'] = scored['macro_f1'], scored['micro_f1']
    if rows and all(',' not in r['gold'] for r in rows) and not any(r.get('predicted_tuned') for r in rows):
        values['accuracy'] = sum(r['gold'] == r['predicted'] for r in rows) / len(rows)
    if any('predicted_tuned' in r for r in rows):
        tuned = label_f1(rows, 'predicted_tuned', classes)
        values['macro_f1_tuned'], values['micro_f1_tuned'] = tuned['macro_f1'], tuned['micro_f1']
    return values


def recompute(rows: List[Mapping]) -> Dict[str, float]:
    """The figures ``outputs.jsonl.gz`` gives on its own, through the same metric code.

    Response metrics (BLEU, Distinct-n) from ``reply`` and ``gold``; perplexities from ``nll`` /
    ``tokens`` (and ``nll_gold``); emotion accuracy and P@1,100 from the stored per-example hits;
    BERTScore as the mean of the stored per-example scores.
    """
    from parlai_empathy.metrics.suite import ScoredExample, score_examples

    values: Dict[str, float] = {}
    examples = [
        ScoredExample(context='', gold=r['gold'], response=r.get('reply'), source=r.get('id', ''))
        for r in rows
        if r.get('reply') is not None and r.get('gold') is not None
    ]
    if examples:
        for key, value in score_examples(examples).values.items():
            values[key] = value
    for suffix in ('', '_gold'):
        pairs = [(r['nll' + suffix], r['tokens']) for r in rows if r.get('nll' + suffix) is not None]
        if pairs:
            values['ppl' + suffix] = math.exp(sum(n for n, _ in pairs) / max(sum(t for _, t in pairs), 1))
            values['ppl_ex' + suffix] = math.exp(sum(n / max(t, 1) for n, t in pairs) / len(pairs))
    words = [(r['nll_reply'], r['words']) for r in rows if r.get('nll_reply') is not None and r.get('words')]
    if words:  # per word of the gold reply, end token excluded (docs/metric_definitions.md)
        values['ppl_word'] = math.exp(sum(n for n, _ in words) / sum(w for _, w in words))
    for key in (
        'emo_acc',
        'emo_acc@2',
        'emo_acc@5',
        'p@1,100',
        'p@1,100_shuffled',
        'reply_emotion_acc',
        'reply_tokens',
    ):
        hits = [r[key] for r in rows if r.get(key) is not None]
        if hits:
            values[key] = sum(hits) / len(hits)
    scores = [r['bertscore_f'] for r in rows if r.get('bertscore_f') is not None]
    if scores:
        values['bertscore_f'] = sum(scores) / len(scores)
    return values


# ----- a row's folder ------------------------------------------------------------------------------
def write_row(
    row_dir: str,
    report: Mapping,
    outputs: List[Mapping],
    opt: Mapping,
    meta: Mapping,
    places: Optional[Mapping[str, str]] = None,
) -> Dict[str, str]:
    """Write the four artifacts of one row; paths under known prefixes become placeholders."""
    os.makedirs(row_dir, exist_ok=True)
    places = places or path_placeholders()
    paths = {name: os.path.join(row_dir, name) for name in ROW_FILES}
    write_json(paths[REPORT], portable(dict(report), places))
    write_outputs(paths[OUTPUTS], outputs)
    write_json(paths[OPT], portable_opt(opt, places))
    write_json(paths[META], portable(dict(meta), places))
    return paths


def read_report(row_dir: str) -> Dict:
    report = read_json(os.path.join(row_dir, REPORT))
    if not isinstance(report.get('values'), dict):
        raise ArtifactError(f'{os.path.join(row_dir, REPORT)}: no "values" object')
    return report
