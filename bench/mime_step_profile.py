"""Where one training step of ``-m empathy/mime`` spends its time, phase by phase.

The step is ParlAI's ``world.parley()`` of ``parlai train_model -t empathy_ed_clean -m
empathy/mime`` at the paper's batch of 16 (the plain agent's defaults and dictionary), on the ED
files. Each phase is timed by wrapping the method that does it:

* ``teacher``: the teacher hands out the next examples (``act``);
* ``observe``: the agent's ``observe`` (history, vectorizing) less ``tokenize``;
* ``tokenize``: the dictionary's ``txt2vec`` (MoEL's nltk tokens, cached per text after their
  first use, so a first-epoch step pays them and a later one does not);
* ``batchify``, ``forward`` (``compute_loss``: the model's forward, every loss and metric),
  ``backward`` and ``optimizer`` (``update_params``: the Adam step, the schedule, zeroing);
* ``other``: the rest of ``parley`` (ParlAI's bookkeeping).

The same steps are timed under three settings in one process, alternating in blocks of
``--block`` steps so that other load falls on all alike: ``before`` (PyTorch's one-tensor Adam loop
on the CPU and glibc's default ``mmap`` of every allocation above 128 KiB, what the agents did
before), ``foreach`` (Adam's multi-tensor step only) and ``now`` (that step and large tensors kept
on the heap: glibc's thresholds set in-process here, as ``MALLOC_MMAP_THRESHOLD_=1073741824
MALLOC_TRIM_THRESHOLD_=2147483647`` set them for a whole command; the agents leave them to glibc,
see docs/models.md). All three end in the
same weights (``tests/test_agents_mime.py``). A short ``torch.profiler`` window under ``now`` adds
the operators with the most CPU time, also split by their input shapes (which product of the
model an ``aten::mm`` is).

``--kernels avx2`` runs the measurement in a child process with PyTorch, oneDNN and MKL held to
AVX2 kernels (``ATEN_CPU_CAPABILITY``, ``ONEDNN_MAX_CPU_ISA``, ``MKL_ENABLE_INSTRUCTIONS``): on an
AVX-512 CPU that shows which phases depend on the wider kernels. It is not an AVX2 machine (its
caches, clock and memory stay), so figures from a real one are kept apart.

    .venv/bin/python bench/mime_step_profile.py --threads 2 --out bench/results/mime_step_profile_amd.json
    .venv/bin/python bench/mime_step_profile.py --threads 2 --kernels avx2 \
        --out bench/results/mime_step_profile_amd_avx2kernels.json

``--pass validation`` times MIME's validation instead: ``eval_step`` (what ``train_model`` runs
on each valid batch; ``--skip-generation true``: the perplexities and the emotion fields) over the
first ``--steps``
batches of the ED valid set, collected and tokenized before the clock starts, each batch scored
under both settings in turn (alternating which goes first): ``before`` (the gold polarity's and the
predicted polarity's perplexities from two whole encoder passes, what the agent did before) and
``now`` (both from one reading of the context, ``Mime.gold_and_predicted_states``). Every
example's perplexities and emotion fields are compared between the two, value for value, and
the context encodings per batch are counted.

    .venv/bin/python bench/mime_step_profile.py --pass validation --threads 2 --steps 359 \
        --out bench/results/mime_validation_profile_amd.json
"""

import argparse
import ctypes
import functools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AVX2_KERNELS = {'ATEN_CPU_CAPABILITY': 'avx2', 'ONEDNN_MAX_CPU_ISA': 'AVX2', 'MKL_ENABLE_INSTRUCTIONS': 'AVX2'}
# name: (Adam's multi-tensor step, large tensors on the heap)
SETTINGS = {'before': (False, False), 'foreach': (True, False), 'now': (True, True)}
GLIBC_DEFAULT_THRESHOLD = 128 * 1024
# glibc's mallopt(3) parameters (malloc.h), and the thresholds of the heap setting: allocations
# below 1 GiB come from the heap, and freed memory is kept for the next step rather than trimmed
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
HEAP_UP_TO, KEEP_FREED = 1 << 30, (1 << 31) - 1
PHASES = ('teacher', 'observe', 'tokenize', 'batchify', 'forward', 'backward', 'optimizer', 'other')


def cpu_flags():
    """The CPU's model name and the vector extensions PyTorch's kernels choose between."""
    name, flags = '', set()
    try:
        with open('/proc/cpuinfo') as handle:
            for line in handle:
                if line.startswith('model name') and not name:
                    name = line.split(':', 1)[1].strip()
                elif line.startswith('flags') and not flags:
                    flags = set(line.split(':', 1)[1].split())
    except OSError:
        pass
    wanted = ('avx2', 'fma', 'avx512f', 'avx512_bf16', 'avx512_vnni', 'amx_tile')
    return {'model': name, 'flags': [f for f in wanted if f in flags]}


class PhaseClock:
    """Seconds per phase, by wrapping methods at class level (ParlAI's batch world works on copies
    of the agent and the teacher, which share their classes)."""

    def __init__(self):
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.on = False

    def wrap(self, owner, name, phase, inner=None):
        original = getattr(owner, name)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            if not self.on:
                return original(*args, **kwargs)
            before = self.seconds[inner] if inner else 0.0
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                nested = (self.seconds[inner] - before) if inner else 0.0
                self.seconds[phase] += spent - nested

        setattr(owner, name, timed)


def measure(args):
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    from parlai.core.agents import create_agent
    from parlai.core.worlds import create_task
    from parlai.scripts.build_dict import build_dict
    from parlai.scripts.train_model import setup_args

    from parlai_empathy.agents import encoder_readout

    workdir = args.workdir or tempfile.mkdtemp(prefix='mime-profile-')
    model_file = os.path.join(workdir, 'model')
    opt = setup_args().parse_args(
        [
            '-t',
            'empathy_ed_clean',
            '--ed-datapath',
            args.ed_dir,
            '-m',
            args.agent,
            '-mf',
            model_file,
            '--dict-file',
            model_file + '.dict',
            '-bs',
            str(args.batch),
            '--glove-init',
            'false',
            '-dt',
            'train',
        ]
    )
    if not os.path.isfile(model_file + '.dict'):
        build_dict(opt)
    agent = create_agent(opt)
    world = create_task(opt, agent)
    teacher = world.get_agents()[0]
    clock = PhaseClock()
    clock.wrap(type(teacher), 'act', 'teacher')
    clock.wrap(type(agent.dict), 'txt2vec', 'tokenize')
    clock.wrap(type(agent), 'observe', 'observe', inner='tokenize')
    for name, phase in (
        ('batchify', 'batchify'),
        ('compute_loss', 'forward'),
        ('backward', 'backward'),
        ('update_params', 'optimizer'),
    ):
        clock.wrap(type(agent), name, phase)
    optimizer = getattr(agent.optimizer, 'optimizer', agent.optimizer)
    mallopt = ctypes.CDLL('libc.so.6').mallopt

    def setting(kind):
        foreach, heap = SETTINGS[kind]
        if foreach:
            encoder_readout.set_foreach(optimizer)
        else:
            for group in optimizer.param_groups:
                group['foreach'] = False
        if heap:
            mallopt(M_MMAP_THRESHOLD, HEAP_UP_TO)
            mallopt(M_TRIM_THRESHOLD, KEEP_FREED)
        else:  # glibc's defaults
            mallopt(M_MMAP_THRESHOLD, GLIBC_DEFAULT_THRESHOLD)
            mallopt(M_TRIM_THRESHOLD, GLIBC_DEFAULT_THRESHOLD)

    for _ in range(args.warmup):
        world.parley()
    totals = {kind: {'seconds': dict.fromkeys(PHASES, 0.0), 'steps': 0, 'parley': 0.0} for kind in SETTINGS}
    order = list(SETTINGS)
    for block in range(args.steps // args.block):
        for kind in order if block % 2 == 0 else order[::-1]:
            setting(kind)
            clock.seconds = dict.fromkeys(PHASES, 0.0)
            clock.on = True
            start = time.perf_counter()
            for _ in range(args.block):
                world.parley()
            wall = time.perf_counter() - start
            clock.on = False
            clock.seconds['other'] = wall - sum(clock.seconds.values())
            total = totals[kind]
            total['steps'] += args.block
            total['parley'] += wall
            for phase in PHASES:
                total['seconds'][phase] += clock.seconds[phase]
    setting('now')
    report = {}
    for kind, total in totals.items():
        steps = total['steps']
        report[kind] = {
            'steps': steps,
            'steps_per_s': steps / total['parley'],
            'ms_per_step': {p: round(1000 * s / steps, 2) for p, s in total['seconds'].items()},
            'share': {p: round(s / total['parley'], 4) for p, s in total['seconds'].items()},
        }
    report['speedup'] = {kind: report[kind]['steps_per_s'] / report['before']['steps_per_s'] for kind in SETTINGS}
    report['peak_rss_mb'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(args.ops_steps):
            world.parley()
    for field, grouped in (('operators', False), ('operators_by_shape', True)):
        events = sorted(
            prof.key_averages(group_by_input_shape=grouped), key=lambda e: e.self_cpu_time_total, reverse=True
        )
        whole = sum(e.self_cpu_time_total for e in events) or 1
        report[field] = [
            {
                'name': e.key,
                'ms_per_step': round(e.self_cpu_time_total / 1000 / args.ops_steps, 2),
                'share': round(e.self_cpu_time_total / whole, 4),
                'calls_per_step': e.count / args.ops_steps,
                **({'input_shapes': e.input_shapes} if grouped else {}),
            }
            for e in events[: args.ops]
        ]
        if grouped:  # the products with the output layer (vocabulary-wide operands), all shapes summed
            vocab = len(agent.dict)
            products = [
                e
                for e in events
                if e.key in ('aten::mm', 'aten::addmm') and any(vocab in shape for shape in e.input_shapes if shape)
            ]
            report['vocabulary_products'] = {
                'ms_per_step': round(sum(e.self_cpu_time_total for e in products) / 1000 / args.ops_steps, 2),
                'share': round(sum(e.self_cpu_time_total for e in products) / whole, 4),
                'calls_per_step': sum(e.count for e in products) / args.ops_steps,
            }
    report['model'] = {
        'agent': args.agent,
        'params': sum(p.numel() for p in agent.model.parameters()),
        'vocab': len(agent.dict),
        'batch': args.batch,
    }
    return report


def measure_validation(args):
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    from parlai.core.agents import create_agent
    from parlai.core.worlds import create_task
    from parlai.scripts.build_dict import build_dict
    from parlai.scripts.train_model import setup_args

    from parlai_empathy.agents.generator_common import record_response_metrics
    from parlai_empathy.agents.mime import MimeAgent

    workdir = args.workdir or tempfile.mkdtemp(prefix='mime-profile-')
    model_file = os.path.join(workdir, 'model')
    flags = [
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        args.ed_dir,
        '-m',
        'empathy/mime',
        '-mf',
        model_file,
        '--dict-file',
        model_file + '.dict',
        '-bs',
        str(args.batch),
        '--glove-init',
        'false',
        '--skip-generation',
        'true',
    ]
    if not os.path.isfile(model_file + '.dict'):
        build_dict(setup_args().parse_args(flags + ['-dt', 'train']))
    opt = setup_args().parse_args(flags + ['-dt', 'valid'])
    agent = create_agent(opt)
    world = create_task(opt, agent)
    batches = []
    scored = MimeAgent.eval_step
    MimeAgent.eval_step = lambda self, batch: batches.append(batch)  # collect only
    try:
        while len(batches) < args.steps and not world.epoch_done():
            world.parley()
    finally:
        MimeAgent.eval_step = scored
    now = MimeAgent.record_extra_eval_metrics

    def two_passes(self, batch, gold):  # the agent's method before one reading served both
        response, _, _ = self.model(
            batch.text_vec, batch.get('speaker_vec'), gold, 'gold', ys=batch.label_vec, loss_smoothing=0.0
        )
        record_response_metrics(self, response, suffix='_gold')

    settings = {'before': two_passes, 'now': now}
    keys = ('ppl_gold', 'ppl_ex_gold', 'ppl', 'ppl_ex', 'emo_acc')
    fields = ('predicted_emotion', 'emotion_polarity')
    seconds = dict.fromkeys(settings, 0.0)
    readings = dict.fromkeys(settings, 0)
    figures = {kind: {key: [] for key in keys + fields} for kind in settings}
    encoder = agent.core_model.encoder
    read_context = encoder.read_context

    current = {'kind': 'now'}  # the setting being timed

    def counted(*args, **kwargs):  # every context encoding, in a forward pass or not
        readings[current['kind']] += 1
        return read_context(*args, **kwargs)

    encoder.read_context = counted
    with torch.no_grad():
        for _ in range(2):  # warm-up
            agent._local_metrics.clear()
            agent.eval_step(batches[0])
        readings['now'] = 0
        for index, batch in enumerate(batches):
            order = list(settings) if index % 2 == 0 else list(settings)[::-1]
            for kind in order:
                current['kind'] = kind
                MimeAgent.record_extra_eval_metrics = settings[kind]
                agent._local_metrics.clear()
                start = time.perf_counter()
                output = agent.eval_step(batch)  # what train_model's validation runs per batch
                seconds[kind] += time.perf_counter() - start
                for key in keys:
                    figures[kind][key].extend(metric.value() for metric in agent._local_metrics[key])
                for field in fields:
                    figures[kind][field].extend(output[field])
    MimeAgent.record_extra_eval_metrics = now
    encoder.read_context = read_context
    agent._local_metrics.clear()
    examples = sum(len(batch.valid_indices) for batch in batches)
    report = {
        kind: {
            'batches': len(batches),
            'examples': examples,
            'ms_per_batch': round(1000 * seconds[kind] / len(batches), 2),
            'examples_per_s': round(examples / seconds[kind], 2),
            'context_encodings_per_batch': readings[kind] / len(batches),
        }
        for kind in settings
    }
    report['speedup'] = seconds['before'] / seconds['now']
    report['same_figures'] = {key: figures['before'][key] == figures['now'][key] for key in keys + fields}
    report['peak_rss_mb'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report['model'] = {
        'agent': 'empathy/mime',
        'params': sum(p.numel() for p in agent.model.parameters()),
        'vocab': len(agent.dict),
        'batch': args.batch,
    }
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--ed-dir',
        default=os.environ.get('PARLAI_EMPATHY_ED_DIR')
        or os.path.join(os.path.dirname(REPO), 'shared', 'data', 'empatheticdialogues'),
    )
    parser.add_argument(
        '--agent',
        default='empathy/mime',
        choices=['empathy/mime', 'empathy/moel'],
        help='the agent whose plain training step is profiled',
    )
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--batch', type=int, default=16)
    parser.add_argument('--warmup', type=int, default=10)
    parser.add_argument('--steps', type=int, default=80, help='timed steps per setting')
    parser.add_argument('--block', type=int, default=10, help='steps per block of one setting')
    parser.add_argument('--ops', type=int, default=15, help='operators listed')
    parser.add_argument('--ops-steps', type=int, default=10, help='steps under torch.profiler')
    parser.add_argument('--kernels', choices=['native', 'avx2'], default='native')
    parser.add_argument(
        '--pass',
        dest='phase',
        choices=['train', 'validation'],
        default='train',
        help='a training step (the phases above) or a validation batch (MIME only)',
    )
    parser.add_argument('--workdir', default=None, help='dictionary and model folder (default: a new temporary one)')
    parser.add_argument('--out', default=None)
    parser.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.kernels == 'avx2' and not args.child:
        env = dict(os.environ, **AVX2_KERNELS)
        return subprocess.call([sys.executable, *sys.argv, '--child'], env=env)
    from parlai_empathy.evidence import artifacts as evidence

    run = evidence.benchmark_record(REPO)
    if args.phase == 'validation' and args.agent != 'empathy/mime':
        parser.error('--pass validation profiles empathy/mime')
    report = measure_validation(args) if args.phase == 'validation' else measure(args)
    report.update(
        command='python bench/mime_step_profile.py '
        + ' '.join(
            f'--{("pass" if k == "phase" else k).replace("_", "-")} {v}'
            for k, v in vars(args).items()
            if k not in ('ed_dir', 'out', 'child', 'workdir')
        ),
        cpu=cpu_flags(),
        kernels=args.kernels,
        **evidence.finish_benchmark_record(run),
    )
    print(json.dumps(report, indent=1))
    if args.out:
        with open(args.out, 'w') as handle:
            json.dump(report, handle, indent=1)
            handle.write('\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
