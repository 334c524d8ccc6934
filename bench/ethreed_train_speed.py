"""ETHREED training speed: listener responses (= training examples) per second at batch 8.

Runs the real ParlAI training step (teacher -> vectorize -> batchify -> forward/backward/Adam)
of ``-m empathy/ethreed -o empathy/ethreed`` (paper config: hidden 300, embeddings 300, Adam)
on the shared ED train split, with the reference code's vocabulary size (8,648 words), after
warm-up steps. The reference implementation's speed on this machine type, from
``/work/shared/notes/platform.md``: 2.28 listener responses/s (7.19 s/step at 8 conversations).

    .venv/bin/python bench/ethreed_train_speed.py --ed-dir ../shared/data/empatheticdialogues \\
        --threads 2 --steps 30 --warmup 10
"""
import argparse
import os
import time

REFERENCE_RESPONSES_PER_S = 2.28
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--ed-dir', required=True)
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--steps', type=int, default=30)
    parser.add_argument('--warmup', type=int, default=10)
    parser.add_argument('--batchsize', type=int, default=8)
    parser.add_argument('--vocab', type=int, default=8648)
    parser.add_argument('--workdir', default='/tmp/ethreed_bench')
    parser.add_argument('--extra', default='', help='more ParlAI arguments, e.g. "--emp-policy false"')
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    from parlai.core.agents import create_agent
    from parlai.core.worlds import create_task
    from parlai.scripts.build_dict import build_dict
    from parlai.scripts.train_model import setup_args

    os.makedirs(args.workdir, exist_ok=True)
    dict_file = os.path.join(args.workdir, f'ed-{args.vocab}.dict')
    parlai_args = [
        '-t', 'empathy_ed_clean', '--ed-datapath', args.ed_dir, '-m', 'empathy/ethreed',
        '-o', os.path.join(REPO, 'opt_presets', 'empathy', 'ethreed.opt'),
        '-mf', os.path.join(args.workdir, 'model'), '--dict-file', dict_file,
        '--dict-maxtokens', str(args.vocab), '--listener-emotions', 'none', '--glove-init', 'false',
        '-dt', 'train', '-bs', str(args.batchsize),
    ] + args.extra.split()
    opt = setup_args().parse_args(parlai_args)
    if not os.path.isfile(dict_file):
        build_dict(opt)
    agent = create_agent(opt)
    world = create_task(opt, agent)
    params = sum(p.numel() for p in agent.model.parameters())

    for _ in range(args.warmup):
        world.parley()
    examples = 0
    start = time.perf_counter()
    for _ in range(args.steps):
        world.parley()
        examples += args.batchsize  # train batches are full (the epoch is far from its end)
    elapsed = time.perf_counter() - start
    speed = examples / elapsed
    print(f'params {params:,} (vocab {len(agent.dict):,}); threads {args.threads}; batch {args.batchsize}')
    print(f'{examples} examples in {elapsed:.1f} s: {speed:.2f} examples/s, {elapsed / args.steps:.3f} s/step')
    print(f'vs reference {REFERENCE_RESPONSES_PER_S} listener responses/s: {speed / REFERENCE_RESPONSES_PER_S:.1f}x')


if __name__ == '__main__':
    main()
