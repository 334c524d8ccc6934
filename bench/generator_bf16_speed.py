"""Does ``--bf16`` pay for MIME / Multi-TR training on this machine? fp32 against bf16 autocast.

bfloat16 autocast earns its place in MIME's training only where it makes training at least 1.3x
faster without raising valid PPL. This measures the first half: one training update of the paper
configuration (the model the agents build, D_h 300, batch 16 real ED Listener pairs with their
whole history, vocabulary 23,656 as the reference's, forward, every loss, backward and an Adam
step), timed in float32 and under bfloat16 autocast (what ``--bf16 true`` wraps around the
agents' training forward), alternating update by update in one process so that load from other
processes falls on both alike. It also reports the loss of the same batch and weights both ways.

    .venv/bin/python bench/generator_bf16_speed.py --model mime --steps 30 --threads 1 --out bf16_mime.json
"""

import argparse
import contextlib
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bf16_speed import command_line, emit, median


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--ed-dir', default=os.environ.get('PARLAI_EMPATHY_ED_DIR', '../shared/data/empatheticdialogues')
    )
    parser.add_argument('--model', choices=['mime', 'multitask_transformer'], default='mime')
    parser.add_argument('--steps', type=int, default=30, help='timed updates per precision (after 3 warm-up pairs)')
    parser.add_argument('--batch', type=int, default=16)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--out', default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from parlai_empathy.data import ed_tensors
    from parlai_empathy.evidence import artifacts as evidence
    from parlai_empathy.models.mime import Mime
    from parlai_empathy.models.multitask_transformer import MultitaskTransformer
    from parlai_empathy.models.precision import native_bf16

    vocab_size = 23656  # the reference's vocabulary
    pairs = ed_tensors.listener_pairs(os.path.join(args.ed_dir, 'train.csv'))
    vocab = ed_tensors.build_vocab(pairs, vocab_size)
    random.Random(0).shuffle(pairs)
    model = (Mime if args.model == 'mime' else MultitaskTransformer)(vocab_size).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    batches = [
        ed_tensors.to_tensors(pairs[i : i + args.batch], vocab, max_context=512, max_response=64)
        for i in range(0, (args.steps + 3) * 2 * args.batch, args.batch)
    ]

    def precision(bf16):
        return torch.autocast('cpu', dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    def update(bf16, batch):
        context, speakers, response, emotion = batch
        start = time.perf_counter()
        with precision(bf16):
            loss, _ = model.training_loss(context, speakers, emotion, ys=response, emotion=emotion)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return time.perf_counter() - start

    # the same weights and batch, both ways (no update), before timing moves the weights
    with torch.no_grad():
        context, speakers, response, emotion = batches[0]
        losses = {}
        for bf16 in (False, True):
            torch.manual_seed(1)  # the same latent samples
            with precision(bf16):
                losses[bf16] = float(model.training_loss(context, speakers, emotion, ys=response, emotion=emotion)[0])
    times = {False: [], True: []}
    for i, batch in enumerate(batches):
        bf16 = bool(i % 2)
        elapsed = update(bf16, batch)
        if i >= 6:  # three warm-up updates each
            times[bf16].append(elapsed)
    fp32, bf16 = (median(times[k]) for k in (False, True))
    report = {
        'command': command_line('bench/generator_bf16_speed.py', args),
        'machine': evidence.machine(),
        'native_bf16': native_bf16(),
        'model': args.model,
        'batch': args.batch,
        'timed_updates_each': len(times[False]),
        'median_update_s': {'fp32': round(fp32, 4), 'bf16': round(bf16, 4)},
        'bf16_speedup': round(fp32 / bf16, 2),
        'loss_same_batch': {'fp32': round(losses[False], 3), 'bf16': round(losses[True], 3)},
    }
    emit(report, args.out)


if __name__ == '__main__':
    main()
