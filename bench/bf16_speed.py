"""Does bfloat16 autocast pay on this machine? One training step of an encoder, fp32 against bf16.

What ``--bf16 auto`` decides from the hardware (``parlai_empathy.models.precision``), measured:
the same forward + backward of an ``--encoder`` (mean pooling, batch 32 of real ED utterances,
the emotion classifier's ``--max-length 50``) timed in float32 and under bfloat16 autocast, in one
process, alternating (so that load from other processes falls on both alike), and the ratio of
the medians printed with what ``native_bf16()`` says of the CPU and the machine's load.

    .venv/bin/python bench/bf16_speed.py --encoder offline-minilm --steps 10 --threads 1 --out bf16.json
"""

import argparse
import json
import os
import sys
import time

import torch


def command_line(script, args):
    """The command that re-creates a report: the script and its options (not the data path or the output)."""
    return f'python {script} ' + ' '.join(
        f'--{k.replace("_", "-")} {v}' for k, v in vars(args).items() if k not in ('ed_dir', 'out')
    )


def median(times):
    return sorted(times)[len(times) // 2]


def emit(report, out=None):
    """Print the report, and write it as JSON to ``out`` when given."""
    print(json.dumps(report, indent=1))
    if out:
        with open(out, 'w') as f:
            json.dump(report, f, indent=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--ed-dir', default=os.environ.get('PARLAI_EMPATHY_ED_DIR', '../shared/data/empatheticdialogues')
    )
    parser.add_argument('--encoder', default='offline-minilm')
    parser.add_argument('--steps', type=int, default=10, help='timed steps per precision (after 2 warm-up steps)')
    parser.add_argument('--batch', type=int, default=32)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--out', default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from transformers import AutoModel

    from parlai_empathy.data.ed_raw import read_clean
    from parlai_empathy.evidence import artifacts as evidence
    from parlai_empathy.files.offline_models import resolve_encoder
    from parlai_empathy.models.bi_encoder import PooledEncoder, load_tokenizer
    from parlai_empathy.models.precision import native_bf16

    encoder_dir = resolve_encoder(args.encoder)
    tokenizer = load_tokenizer(encoder_dir)
    conversations, _ = read_clean(os.path.join(args.ed_dir, 'valid.csv'))
    texts = [u.text for c in conversations for u in c.utterances][: args.batch]
    batch = tokenizer(texts, padding=True, truncation=True, max_length=50, return_tensors='pt')
    model = PooledEncoder(AutoModel.from_pretrained(encoder_dir), pooling='mean').train()

    def step(bf16):
        model.bf16 = bf16
        start = time.perf_counter()
        model(batch['input_ids'], batch['attention_mask']).pow(2).mean().backward()
        return time.perf_counter() - start

    for bf16 in (False, True, False, True):
        step(bf16)  # warm-up
    times = {False: [], True: []}
    for _ in range(args.steps):
        for bf16 in (False, True):
            times[bf16].append(step(bf16))
    fp32, bf16 = (median(times[k]) for k in (False, True))
    report = {
        'command': command_line('bench/bf16_speed.py', args),
        'machine': evidence.machine(),
        'native_bf16': native_bf16(),
        'encoder': args.encoder,
        'batch': args.batch,
        'tokens_per_row': int(batch['input_ids'].size(1)),
        'median_step_s': {'fp32': round(fp32, 4), 'bf16': round(bf16, 4)},
        'bf16_over_fp32_time': round(bf16 / fp32, 2),
    }
    emit(report, args.out)


if __name__ == '__main__':
    main()
