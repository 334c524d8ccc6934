"""Writes bench/RESULTS.md from the committed result files in bench/results/ (nothing is typed by
hand: every figure, machine, load, command and commit is read from a result file).

    python bench/results_md.py            # rewrite bench/RESULTS.md
    python bench/results_md.py --check    # exit 1 when bench/RESULTS.md differs from what it would write

One table per benchmark; one row per configuration and machine: a configuration is the command's
options (paths dropped) and the kernel environment the file records, the machine is the CPU model
it records (else its platform string). Only the latest file of a configuration and machine belongs
in bench/results/: `superseded()` names the older ones (tests/test_bench_results.py keeps it empty).
A field a file does not record is shown as "not recorded", never guessed.
"""

import argparse
import json
import os
import re
import shlex
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(HERE, 'results')
RESULTS_MD = os.path.join(HERE, 'RESULTS.md')
COMMAND = 'python bench/results_md.py'
NOT_RECORDED = 'not recorded'

# Option values that name a place on the machine that ran it, not a setting of the measurement.
PATH_OPTIONS = {'--out', '--json', '--workdir', '--ed-dir', '--world-logs', '--ref-python'}
# Environment a file records under kernel_env that sets threads (the command's --threads says it).
THREAD_ENV = {'OMP_NUM_THREADS'}


def fmt(value, digits=2):
    if value is None:
        return NOT_RECORDED
    if isinstance(value, bool):
        return 'yes' if value else 'no'
    if isinstance(value, float):
        return f'{value:,.{digits}f}'
    if isinstance(value, int):
        return f'{value:,}'
    return str(value)


def dig(data, *keys):
    for key in keys:
        if isinstance(data, dict):
            data = data.get(key)
        elif isinstance(data, list) and isinstance(key, int) and -len(data) <= key < len(data):
            data = data[key]
        else:
            return None
    return data


def median(values):
    values = sorted(values)
    n = len(values)
    return None if not n else (values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2)


# The figures each benchmark's table shows: (column, function of the file's data).
def _ranker_latency(d):
    return [
        (
            'query bf16 median / p90 ms',
            f'{fmt(d.get("bf16_cached_query_ms_median"))} / {fmt(d.get("bf16_cached_query_ms_p90"))}',
        ),
        (
            'query fp32 median / p90 ms',
            f'{fmt(d.get("fp32_cached_query_ms_median"))} / {fmt(d.get("fp32_cached_query_ms_p90"))}',
        ),
        ('bf16 query after a 2 s idle pause, median ms', fmt(dig(d, 'bf16_after_pause_query_ms', '2.0', 'median'))),
        ('pool', fmt(d.get('full_pool_size'))),
        ('uncached candidates/s', fmt(d.get('uncached_candidates_per_s'), 0)),
        ('eval peak RSS GB', fmt(d.get('eval_fixed_pool_peak_rss_gb'))),
    ]


def _step_profile(d):
    now = d.get('now') or {}
    if 'steps_per_s' in now:
        rate = ('steps/s', fmt(now.get('steps_per_s')))
    else:
        rate = ('examples/s', fmt(now.get('examples_per_s')))
    phases = now.get('ms_per_step')
    per_step = sum(phases.values()) if isinstance(phases, dict) else now.get('ms_per_batch')
    return [
        rate,
        ('ms per step / batch', fmt(per_step, 1)),
        (
            'speed-up over before',
            fmt(d['speedup'].get('now') if isinstance(d.get('speedup'), dict) else d.get('speedup')),
        ),
        ('peak RSS MB', fmt(d.get('peak_rss_mb'), 0)),
    ]


def _adam_subnormal(d):
    last = (d.get('points') or [{}])[-1]
    steps = last.get('adam_step_ms') or {}
    return [
        ('updates', fmt(last.get('updates'))),
        ('subnormal moments', fmt(last.get('subnormal_moments'))),
        ('of moment entries', fmt(d.get('moment_entries'))),
        (
            'Adam step ms as is / flushed',
            f'{fmt(median(steps.get("as_is", [])))} / {fmt(median(steps.get("flushed", [])))}',
        ),
    ]


def _bf16_speed(d):
    s = d.get('median_step_s') or {}
    return [
        ('native bf16', fmt(d.get('native_bf16'))),
        ('step s fp32 / bf16', f'{fmt(s.get("fp32"))} / {fmt(s.get("bf16"))}'),
        ('bf16 time / fp32', fmt(d.get('bf16_over_fp32_time'))),
    ]


def _generator_bf16(d):
    s = d.get('median_update_s') or {}
    return [
        ('model', fmt(d.get('model'))),
        ('native bf16', fmt(d.get('native_bf16'))),
        ('update s fp32 / bf16', f'{fmt(s.get("fp32"), 3)} / {fmt(s.get("bf16"), 3)}'),
        ('bf16 speed-up', fmt(d.get('bf16_speedup'))),
    ]


def _ethreed_gate(d):
    s = d.get('seconds_per_update') or {}
    return [
        ('s/update baseline (median)', fmt(median(s.get('baseline', [])), 3)),
        ('s/update ours (median)', fmt(median(s.get('ours', [])), 3)),
        ('ratio', fmt(d.get('ratio'))),
    ]


def _encoder_variants(d):
    out = []
    for variant in ('fused', 'huggingface', 'prepacked', 'compiled'):
        cells = [f'{fmt(dig(d, variant, str(n), "ms_median"))}' for n in d.get('lengths') or []]
        out.append((f'{variant} ms ({", ".join(str(n) for n in d.get("lengths") or [])} pieces)', ' / '.join(cells)))
    return out


def _humaneval_load(d):
    return [
        (
            'answers sent / stored / lost / duplicated',
            ' / '.join(fmt(d.get(k)) for k in ('sent', 'stored', 'lost', 'duplicated')),
        ),
        ('kills', fmt(len(d.get('kills') or []))),
        ('answers/s', fmt(d.get('answers_per_s'), 1)),
        ('answer p50 / p99 ms', f'{fmt(d.get("answer_p50_ms"), 0)} / {fmt(d.get("answer_p99_ms"), 0)}'),
        (
            'bad inputs answered as expected',
            f'{sum(1 for b in d.get("bad_inputs") or [] if b.get("ok"))} of {len(d.get("bad_inputs") or [])}',
        ),
        ('body memory grown MB', fmt(dig(d, 'body_memory', 'grown_mb'), 1)),
    ]


def _security(d):
    rows = d.get('rows') or []
    return [
        ('attacks', fmt(len(rows))),
        ('ended with a traceback', fmt(sum(1 for r in rows if r.get('traceback')))),
        ('max peak RSS MB', fmt(max((r.get('peak_rss_mb') or 0 for r in rows), default=None), 1)),
        ('max disk written bytes', fmt(max((r.get('disk_written_bytes') or 0 for r in rows), default=None))),
    ]


def _training_kills(d):
    return [
        (
            run.get('model', '?'),
            f'{len(run.get("kills") or [])} kills, {fmt(run.get("steps"))} updates, '
            f'finished {fmt(run.get("finished_all_steps"))}, loads {fmt(run.get("final_model_loads"))}, '
            f'updates lost per kill {", ".join(fmt(k.get("lost_updates")) for k in run.get("kills") or [])}',
        )
        for run in d.get('runs') or []
    ]


def _reference_speed(d):
    return []  # its own comparison table follows the row (the file's `table`)


BENCHMARKS = [
    # (script, title, figures)
    ('ranker_latency', "`empathy/bert_ranker`'s interactive query against the ED train pool", _ranker_latency),
    (
        'ranker_encoder_variants',
        "The ranker's context encoder: what the agent runs beside alternatives",
        _encoder_variants,
    ),
    ('reference_speed', 'Our MIME and ETHREED beside the reference code, in one run', _reference_speed),
    ('mime_step_profile', 'Training and validation steps of MIME and MoEL, phase by phase', _step_profile),
    ('adam_subnormal', "Adam's subnormal moments in MIME's training", _adam_subnormal),
    ('generator_bf16_speed', 'MIME and Multi-TR training under bfloat16 autocast', _generator_bf16),
    ('bf16_speed', 'bfloat16 autocast of the MiniLM encoder on a CPU', _bf16_speed),
    ('ethreed_gate_speed', "ETHREED's emotion gate as a matrix product", _ethreed_gate),
    ('humaneval_load', 'The rating server under load, kills and bad input', _humaneval_load),
    ('security_attacks', 'Hostile files and clients: every attack ends with one line', _security),
    ('training_kills', 'Training under SIGKILL: resumed from the checkpoint', _training_kills),
]


def load(path):
    with open(path, encoding='utf-8') as f:
        data = json.load(f)
    if isinstance(data, list):  # training_kills.json: a list of runs, nothing else recorded
        data = {'runs': data}
    return data


def command_of(d):
    command = d.get('command') or dig(d, 'meta', 'command')
    if isinstance(command, list):
        command = shlex.join(command)
    return command


def script_of(name, d):
    command = command_of(d) or ''
    found = re.search(r'bench/(\w+)\.py', command)
    if found:
        return found.group(1)
    return next((s for s, _, _ in BENCHMARKS if name.startswith(s)), None)


def configuration(d):
    """The command's options without its paths, and the kernel environment recorded beside it."""
    command = command_of(d)
    if not command:
        return NOT_RECORDED
    words = shlex.split(command)
    start = next((i + 1 for i, w in enumerate(words) if w.endswith('.py')), len(words))
    kept, skip = [], False
    for word in words[start:]:
        if skip:
            skip = False
            if not word.startswith('--'):
                continue
        if word in PATH_OPTIONS:
            skip = True
            continue
        kept.append(word)
    # --world-logs takes several values; drop the NAME=PATH words it left
    kept = [w for w in kept if not re.match(r'^\w+=/', w)]
    env = {k: v for k, v in (d.get('kernel_env') or {}).items() if v is not None and k not in THREAD_ENV}
    env_words = [f'{k}={v}' for k, v in sorted(env.items())]
    return ' '.join(env_words + kept) or '(defaults)'


def machine_of(d):
    """(cpu model or platform, flags, cores) as the file records them."""
    machine = d.get('machine')
    meta = d.get('meta') or {}
    cpu = dig(d, 'cpu', 'model') or (machine.get('cpu') if isinstance(machine, dict) else None) or meta.get('cpu')
    if cpu is None and isinstance(machine, dict) and machine.get('platform'):
        cpu = f'{NOT_RECORDED} (platform {machine["platform"]})'
    if cpu is None and isinstance(machine, str):
        cpu = f'{NOT_RECORDED} (noted: "{machine}")'
    flags = dig(d, 'cpu', 'flags')
    flags = ' '.join(flags) if flags else NOT_RECORDED
    capability = d.get('torch_cpu_capability')
    if capability:
        flags += f' (torch kernels: {capability})'
    return cpu or NOT_RECORDED, flags


def load_of(d):
    start = dig(d, 'machine', 'load_average') if isinstance(d.get('machine'), dict) else None
    end = d.get('load_average_end') or d.get('load_at_end') or dig(d, 'meta', 'load_average_after')

    def one(v):
        return ' '.join(f'{x:.2f}' for x in v) if v else NOT_RECORDED

    note = dig(d, 'meta', 'note')
    return f'{one(start)} -> {one(end)}' + (f' ({note})' if note else '')


def taken_of(d):
    return d.get('taken') or d.get('date') or NOT_RECORDED


def commit_of(d):
    code = d.get('code')
    if isinstance(code, dict) and code.get('commit'):
        return code['commit'][:7] + (' (uncommitted changes)' if code.get('dirty') else '')
    if isinstance(code, str):
        return code
    return NOT_RECORDED


def collect(results_dir=RESULTS_DIR):
    """{script: [(name, data)]} of every JSON, and the other files (text logs, run folders)."""
    by_script, others = {}, []
    for name in sorted(os.listdir(results_dir)):
        path = os.path.join(results_dir, name)
        if not name.endswith('.json'):
            others.append(name + ('/' if os.path.isdir(path) else ''))
            continue
        d = load(path)
        script = script_of(name, d)
        if script is None:
            raise SystemExit(f'{path}: no bench script in its command and no known name prefix')
        by_script.setdefault(script, []).append((name, d))
    return by_script, others


def superseded(results_dir=RESULTS_DIR):
    """Files older than another of the same benchmark, configuration and machine."""
    by_script, _ = collect(results_dir)
    out = []
    for files in by_script.values():
        groups = {}
        for name, d in files:
            groups.setdefault((configuration(d), machine_of(d)[0]), []).append((taken_of(d), name))
        for members in groups.values():
            members.sort()
            out += [name for _, name in members[:-1]]
    return sorted(out)


def cell(text):
    return str(text).replace('|', '\\|')


def render(results_dir=RESULTS_DIR):
    by_script, others = collect(results_dir)
    lines = [
        '# Benchmark results',
        '',
        f'Generated by `{COMMAND}` from the result files in `bench/results/`; do not edit by hand',
        '(`tests/test_bench_results.py` regenerates it and compares). One table per benchmark, one row',
        'per configuration and machine, the latest file of each; older files are in git history.',
        f'"{NOT_RECORDED}" marks what a file does not record. Load: the 1/5/15-minute load averages',
        'at the start -> at the end. Model figures (P@1,100, perplexity, BLEU) live with their evidence',
        'in `projects/<paper>/runs/`; GPU sessions in `tools/gpu/results/`.',
    ]
    order = [s for s, _, _ in BENCHMARKS] + sorted(set(by_script) - {s for s, _, _ in BENCHMARKS})
    titles = {s: (t, f) for s, t, f in BENCHMARKS}
    for script in order:
        if script not in by_script:
            continue
        title, figures = titles.get(script, (script, lambda d: []))
        lines += ['', f'## {title} (`bench/{script}.py`)', '']
        rows = sorted(by_script[script], key=lambda nd: (machine_of(nd[1])[0], configuration(nd[1]), nd[0]))
        columns = [c for c, _ in figures(rows[0][1])]
        header = ['file', 'configuration', 'machine', 'CPU flags', 'load', 'taken', 'commit'] + columns
        lines.append('| ' + ' | '.join(header) + ' |')
        lines.append('|' + '---|' * (7 + len(columns)))
        for name, d in rows:
            cpu, flags = machine_of(d)
            values = [cell(v) for _, v in figures(d)]
            lines.append(
                '| '
                + ' | '.join(
                    [
                        f'`{name}`',
                        cell(configuration(d)),
                        cell(cpu),
                        cell(flags),
                        cell(load_of(d)),
                        cell(taken_of(d)),
                        cell(commit_of(d)),
                    ]
                    + values
                )
                + ' |'
            )
        lines += ['', 'Commands:', '']
        for name, d in rows:
            lines.append(f'- `{name}`: `{command_of(d) or NOT_RECORDED}`')
        for name, d in rows:
            if isinstance(d.get('table'), str):
                lines += ['', f'`{name}`:', '', d['table'].rstrip('\n')]
    if others:
        lines += ['', '## Other result files (logs and run folders, read as they are)', '']
        lines += [f'- `bench/results/{name}`' for name in others]
    return '\n'.join(lines) + '\n'


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--check', action='store_true', help='exit 1 when RESULTS.md is not what this writes')
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        with open(RESULTS_MD, encoding='utf-8') as f:
            if f.read() != text:
                print(f'{RESULTS_MD}: not what `{COMMAND}` writes; run it', file=sys.stderr)
                return 1
        return 0
    with open(RESULTS_MD, 'w', encoding='utf-8') as f:
        f.write(text)
    stale = superseded()
    if stale:
        print('superseded (a newer file has the same benchmark, configuration and machine): ' + ', '.join(stale))
    return 0


if __name__ == '__main__':
    sys.exit(main())
