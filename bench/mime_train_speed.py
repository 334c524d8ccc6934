"""Training and decoding speed of MIME and Multi-TR, paper configuration, on CPU threads.

The reference MIME (declare-lab/MIME) trains at 28.8 context-response pairs/s at batch 16 on 2
threads of this machine type (0.556 s/step) and greedy-decodes 3.4-3.7 test contexts/s; the
project's goal is at least 1.5x (43.2 pairs/s).

Batches are real ED listener-response pairs (train split, whole dialogue history as context, as
MIME uses it), shuffled with a fixed seed; the model's vocabulary is 23,656 rows as in the
reference. A step is forward, all losses, backward, gradient clipping (2.0) and Adam.

    .venv/bin/python bench/mime_train_speed.py [--threads 2] [--steps 40] [--out results_section.md]
"""
import argparse
import os
import platform
import random
import sys
import time

import torch

from parlai_empathy.data import ed_tensors
from parlai_empathy.models.mime import Mime
from parlai_empathy.models.multitask_transformer import MultitaskTransformer

REFERENCE_VOCAB = 23656


def batches(pairs, vocab, batch_size, count, seed=0):
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    rng.shuffle(order)
    for start in range(0, count * batch_size, batch_size):
        chunk = [pairs[i] for i in order[start: start + batch_size]]
        yield ed_tensors.to_tensors(chunk, vocab, max_context=512, max_response=64)


def train_speed(model, data, warmup):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
    model.train()
    seen, started = 0, None
    for step, (context, speakers, response, emotion) in enumerate(data):
        if step == warmup:
            started, seen = time.perf_counter(), 0
        loss, _ = model.training_loss(context, speakers, emotion, ys=response, emotion=emotion)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        optimizer.step()
        seen += context.size(0)
    return seen / (time.perf_counter() - started)


def decode_speed(model, pairs, vocab, n=100, batch_size=100, maxlen=31):
    model.eval()
    started = time.perf_counter()
    for start in range(0, n, batch_size):
        context, speakers, _, _ = ed_tensors.to_tensors(pairs[start: start + batch_size], vocab, 512)
        model.greedy_decode(context, speakers, maxlen=maxlen)
    return n / (time.perf_counter() - started)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--ed-dir', default=os.environ.get('PARLAI_EMPATHY_ED_DIR',
                                                           '../shared/data/empatheticdialogues'))
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--batch-size', type=int, default=16)
    parser.add_argument('--steps', type=int, default=40)
    parser.add_argument('--warmup', type=int, default=10)
    parser.add_argument('--out', default=None, help='append a markdown section to this file')
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    pairs = ed_tensors.listener_pairs(os.path.join(args.ed_dir, 'train.csv'))
    vocab = ed_tensors.build_vocab(pairs, REFERENCE_VOCAB)
    test_pairs = ed_tensors.listener_pairs(os.path.join(args.ed_dir, 'test.csv'), limit=100)
    rows = []
    for name, cls in (('MIME', Mime), ('Multi-TR', MultitaskTransformer)):
        model = cls(REFERENCE_VOCAB)
        params = sum(p.numel() for p in model.parameters()) / 1e6
        data = batches(pairs, vocab, args.batch_size, args.warmup + args.steps)
        train = train_speed(model, data, args.warmup)
        decode = decode_speed(model, test_pairs, vocab)
        rows.append((name, params, train, decode))
        print(f'{name}: {params:.2f}M params, train {train:.1f} pairs/s '
              f'({args.batch_size / train:.3f} s/step), greedy decode {decode:.1f} contexts/s',
              flush=True)

    lines = [
        '## MIME and Multi-TR training speed (models helper)',
        '',
        f'`{" ".join([os.path.basename(sys.executable)] + sys.argv)}` on {platform.machine()} CPU, '
        f'{args.threads} threads, no GPU, torch {torch.__version__}; batch {args.batch_size} real ED '
        f'train listener pairs (full history), vocab {REFERENCE_VOCAB}, {args.steps} timed steps '
        f'after {args.warmup} warm-up. Decode: greedy, 100 ED test contexts in one batch, 31 steps max.',
        '',
        '| model | params | train pairs/s | s/step | vs reference MIME 28.8 | greedy decode contexts/s |',
        '|---|---|---|---|---|---|',
    ]
    for name, params, train, decode in rows:
        lines.append(f'| {name} | {params:.2f}M (paper MIME: 17.80M) | {train:.1f} | '
                     f'{args.batch_size / train:.3f} | {train / 28.8:.2f}x | {decode:.1f} |')
    text = '\n'.join(lines) + '\n'
    print(text)
    if args.out:
        with open(args.out, 'a') as handle:
            handle.write(text + '\n')


if __name__ == '__main__':
    main()
