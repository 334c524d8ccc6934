"""Zero-shot encoding speed of a ``--bert-model`` encoder: texts/s on real ED test contexts.

What zero-shot scoring and candidate-pool encoding cost: the bi-encoder's inference path (no
gradients, length-sorted chunks of 32 rows, mean pooling) over the first N ED test contexts
(last 4 turns, at most 100 word pieces), in float32 and with bfloat16 weights (``--bf16``).

    .venv/bin/python bench/encoder_speed.py --bert-model offline-mpnet --texts 256 --threads 2
"""

import argparse
import os
import time

import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--ed-dir', default=os.environ.get('PARLAI_EMPATHY_ED_DIR', '../shared/data/empatheticdialogues')
    )
    parser.add_argument('--bert-model', default='offline-mpnet')
    parser.add_argument('--texts', type=int, default=256)
    parser.add_argument('--threads', type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from parlai_empathy.data import ed_episodes
    from parlai_empathy.data.ed_raw import read_clean
    from parlai_empathy.files.offline_models import resolve_encoder
    from parlai_empathy.models.bi_encoder import BiEncoder, load_tokenizer

    start = time.perf_counter()
    encoder_dir = resolve_encoder(args.bert_model)
    resolved_s = time.perf_counter() - start
    tokenizer = load_tokenizer(encoder_dir)
    conversations, _ = read_clean(os.path.join(args.ed_dir, 'test.csv'))
    examples = [e for ep in ed_episodes.build_episodes(conversations, both_sides=False) for e in ep][: args.texts]
    texts = ['\n'.join(e.context_utterances[-4:]) for e in examples]
    ids = tokenizer(texts, padding=True, truncation=True, max_length=100, return_tensors='pt')['input_ids']
    model = BiEncoder.from_pretrained(
        encoder_dir, share_encoders=True, pooling='mean', pad_id=tokenizer.pad_token_id
    ).eval()
    print(
        f'{args.bert_model}: {encoder_dir} (resolved in {resolved_s:.1f} s), '
        f'{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, {len(texts)} ED test contexts, '
        f'{args.threads} thread(s), '
        f'{float((ids != tokenizer.pad_token_id).sum(1).float().mean()):.1f} word pieces on average'
    )
    for precision in ('float32', 'bfloat16'):
        model.to(getattr(torch, precision))
        with torch.no_grad():
            model.encode_context(ids[:8])  # warm-up
            start = time.perf_counter()
            model.encode_context(ids)
            seconds = time.perf_counter() - start
        print(f'{precision:>9}: {len(texts) / seconds:.1f} texts/s ({seconds:.1f} s)')


if __name__ == '__main__':
    main()
