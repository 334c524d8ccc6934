"""Adam's subnormal moments in MIME's training, and what an Adam step costs with and without them.

Trains plain ``-m empathy/mime`` (batch 16, the ED files, ``--glove-init false``) with the agent's
flush of subnormal moments switched off, so its Adam state is what PyTorch's Adam leaves: the
moments of words absent from the batches decay by beta1 = 0.9 and beta2 = 0.98 a step into
float32's subnormal range and, rounded to nearest, stop a few units above zero. Every
``--every`` updates it counts the subnormal entries per tensor and times ``--repeat`` Adam steps
on copies of the weights, the state and the last batch's real gradients: as the state is
(``as_is``) and with its subnormal entries set to zero (``flushed``,
``encoder_readout.flush_subnormal_moments``, what the agents do every 100 updates), alternating
three times. Both copies end in the same weights (compared to the bit).

    .venv/bin/python bench/adam_subnormal.py --steps 6000 --every 1000 \
        --out bench/results/adam_subnormal_amd.json
"""

import argparse
import copy
import json
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def subnormal_counts(optimizer, names):
    from parlai_empathy.agents.encoder_readout import MOMENTS, SMALLEST_NORMAL

    counts, total = {}, 0
    for param, state in optimizer.state.items():
        for key in MOMENTS:
            if key in state:
                size = state[key].abs()
                found = int(((size < SMALLEST_NORMAL) & (size > 0)).sum())
                total += found
                if found >= 1000:
                    counts[f'{names[param]}.{key}'] = [found, state[key].numel()]
    return total, counts


def time_adam_steps(optimizer, repeat):
    """ms per Adam step on copies of the live weights, state and gradients, as is and flushed."""
    import torch

    from parlai_empathy.agents.encoder_readout import flush_subnormal_moments

    live = [p for group in optimizer.param_groups for p in group['params'] if p.grad is not None]
    seconds = {'as_is': [], 'flushed': []}
    weights = {}
    for kind in ('as_is', 'flushed') * 3:
        params = [torch.nn.Parameter(p.detach().clone()) for p in live]
        for copy_, p in zip(params, live):
            copy_.grad = p.grad.detach().clone()
        group = {k: v for k, v in optimizer.param_groups[0].items() if k != 'params'}
        adam = torch.optim.Adam(
            params, **{k: group[k] for k in ('lr', 'betas', 'eps', 'weight_decay', 'amsgrad')}, foreach=True
        )
        for copy_, p in zip(params, live):
            adam.state[copy_] = copy.deepcopy(optimizer.state[p])
        if kind == 'flushed':
            flush_subnormal_moments(adam)
        adam.step()  # warm-up, outside the clock
        start = time.perf_counter()
        for _ in range(repeat):
            adam.step()
        seconds[kind].append((time.perf_counter() - start) / repeat)
        weights[kind] = [p.detach().clone() for p in params]
    same = all(torch.equal(a, b) for a, b in zip(weights['as_is'], weights['flushed']))
    return {kind: [round(1000 * s, 2) for s in values] for kind, values in seconds.items()}, same


def measure(args):
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    from parlai.core.agents import create_agent
    from parlai.core.worlds import create_task
    from parlai.scripts.build_dict import build_dict
    from parlai.scripts.train_model import setup_args

    from parlai_empathy.agents import encoder_readout

    encoder_readout.FLUSH_SUBNORMAL_EVERY = 1 << 62  # off: the state as PyTorch's Adam leaves it
    workdir = args.workdir or tempfile.mkdtemp(prefix='adam-subnormal-')
    model_file = os.path.join(workdir, 'model')
    opt = setup_args().parse_args(
        [
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
            '-dt',
            'train',
        ]
    )
    if not os.path.isfile(model_file + '.dict'):
        build_dict(opt)
    agent = create_agent(opt)
    world = create_task(opt, agent)
    optimizer = getattr(agent.optimizer, 'optimizer', agent.optimizer)
    names = {p: n for n, p in agent.model.named_parameters()}
    points = []
    start = time.perf_counter()
    for update in range(1, args.steps + 1):
        world.parley()
        if update % args.every == 0:
            total, counts = subnormal_counts(optimizer, names)
            elapsed = time.perf_counter() - start
            ms, same = time_adam_steps(optimizer, args.repeat)
            points.append(
                {
                    'updates': update,
                    'subnormal_moments': total,
                    'by_tensor': counts,
                    'adam_step_ms': ms,
                    'same_weights': same,
                    'training_minutes': round(elapsed / 60, 2),
                }
            )
            print(json.dumps(points[-1]), flush=True)
            start = time.perf_counter() - elapsed  # the timing of Adam steps is not training time
    state_size = sum(t.numel() for s in optimizer.state.values() for k, t in s.items() if k in encoder_readout.MOMENTS)
    return {
        'points': points,
        'moment_entries': state_size,
        'model': {
            'agent': 'empathy/mime',
            'params': sum(p.numel() for p in agent.model.parameters()),
            'vocab': len(agent.dict),
            'batch': args.batch,
        },
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--ed-dir',
        default=os.environ.get('PARLAI_EMPATHY_ED_DIR')
        or os.path.join(os.path.dirname(REPO), 'shared', 'data', 'empatheticdialogues'),
    )
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--batch', type=int, default=16)
    parser.add_argument('--steps', type=int, default=6000, help='training updates')
    parser.add_argument('--every', type=int, default=1000, help='updates between measurements')
    parser.add_argument('--repeat', type=int, default=20, help='timed Adam steps per setting and round')
    parser.add_argument('--workdir', default=None, help='dictionary folder (default: a new temporary one)')
    parser.add_argument('--out', default=None)
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from mime_step_profile import cpu_flags

    from parlai_empathy.evidence import artifacts as evidence

    run = evidence.benchmark_record(REPO)
    report = measure(args)
    report.update(
        command='python bench/adam_subnormal.py '
        + ' '.join(
            f'--{k.replace("_", "-")} {v}' for k, v in vars(args).items() if k not in ('ed_dir', 'out', 'workdir')
        ),
        cpu=cpu_flags(),
        **evidence.finish_benchmark_record(run),
    )
    print(json.dumps(report, indent=1))
    if args.out:
        evidence.write_json(args.out, report)
    return 0


if __name__ == '__main__':
    sys.exit(main())
