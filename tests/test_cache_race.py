"""Caches that the ranks of a distributed run build at the same moment.

Two processes are started together on the same cache; exactly one may build it, the other must
wait and then read what the first wrote; nobody may read a half-written file. Covered: the
ranker's candidate encodings (through the real 2-worker ``multiprocessing_eval``, and through
``encoding_cache.load_or_build``), the GoEmotions tag cache of ED, the ED response pool, the
cleaned-ED report and the streaming example counts.
"""

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import torch

from bert_ranker_tiny import build_tiny_bert
from parlai_empathy.data import ed_source
from parlai_empathy.emotions import tag_cache
from parlai_empathy.models.encoding_cache import load_encodings
from test_emotions_support import make_tiny_bert, make_tiny_classifier

SAMPLE = ed_source.sample_dir()


def race(tmp_path, setup: str, body: str, workers: int = 2):
    """Run ``setup`` (imports) in ``workers`` Python processes, which then wait at a barrier file
    and run ``body`` together; each prints one JSON line last. Returns (parsed line, stderr)."""
    barrier = tmp_path / 'go'
    script = tmp_path / 'worker.py'
    script.write_text(
        'import json, os, sys, time\n'
        + textwrap.dedent(setup)
        + textwrap.dedent("""
        barrier, worker = sys.argv[1], int(sys.argv[2])
        open(f'{barrier}.ready{worker}', 'w').close()
        while not os.path.exists(barrier):
            time.sleep(0.005)
    """)
        + textwrap.dedent(body)
    )
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(barrier), str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        for n in range(workers)
    ]
    while not all(os.path.exists(f'{barrier}.ready{n}') for n in range(workers)):
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.05)
    barrier.write_text('go')
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
        outputs.append((json.loads(out.strip().splitlines()[-1]), err))
    return outputs


def test_candidate_encodings_built_once(tmp_path):
    cache = tmp_path / 'pool.encs'
    results = race(
        tmp_path,
        """
        import torch
        from parlai_empathy.models.encoding_cache import load_or_build
    """,
        f"""
        def build():
            with open({str(tmp_path / 'builds.log')!r}, 'a') as log:
                log.write(f'{{worker}}\\n')
            time.sleep(3)  # a slow encoder: the other worker arrives while this one builds
            return torch.arange(12, dtype=torch.float32).reshape(4, 3)
        encs, built = load_or_build({str(cache)!r}, {{'model': 'm1'}}, build, rows=4)
        print(json.dumps({{'built': built, 'encs': encs.tolist()}}))
    """,
    )
    assert sorted(r['built'] for r, _ in results) == [False, True]
    assert (tmp_path / 'builds.log').read_text().count('\n') == 1
    assert results[0][0]['encs'] == results[1][0]['encs']
    assert any('waiting for another process' in err for _, err in results)
    assert torch.equal(load_encodings(str(cache), {'model': 'm1'}), torch.tensor(results[0][0]['encs']))
    assert not [p for p in os.listdir(tmp_path) if '.tmp' in p]


def test_two_ranker_workers_encode_the_pool_once(tmp_path, ed_dir, run_parlai):
    """The real 2-worker evaluation from an empty cache: rank 0 encodes the ED train pool, rank 1
    waits for it and reuses the file (each rank's own log lines, with --verbose)."""
    bert = build_tiny_bert(str(tmp_path / 'bert'), os.path.join(ed_dir, 'train.csv'))
    cache = tmp_path / 'pool.encs'
    done = run_parlai(
        'multiprocessing_eval',
        '--distributed-world-size',
        2,
        '--verbose',
        '-m',
        'empathy/bert_ranker',
        '--bert-model',
        bert,
        '--pooling',
        'mean',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-dt',
        'test',
        '--eval-candidates',
        'fixed',
        '--pool-ed-datapath',
        'sample',
        '--candidate-encodings-cache',
        cache,
        '--datapath',
        tmp_path / 'data',
        '-bs',
        32,
        timeout=900,
    )
    log = done.stdout + done.stderr
    saved = [line for line in log.splitlines() if 'candidate encodings to' in line]
    reused = [line for line in log.splitlines() if 'Reusing' in line and 'cached candidate encodings' in line]
    assert len(saved) == 1 and len(reused) == 1, log[-4000:]
    pools = os.listdir(tmp_path / 'data' / 'empathy_response_pools')
    assert len([p for p in pools if p.endswith('.cands')]) == 1 and not [p for p in pools if '.tmp' in p]
    assert load_encodings(str(cache), torch.load(cache, weights_only=True)['key']).size(0) > 0


def test_tag_cache_tagged_once(tmp_path, goemotions_dir):
    from parlai_empathy.data import goemotions

    bert = make_tiny_bert(str(tmp_path / 'bert'))
    classes = goemotions.read_taxonomy(goemotions_dir).classes('none')
    classifier = make_tiny_classifier(str(tmp_path / 'goemo' / 'model'), bert, classes)
    root = tmp_path / 'tags'
    results = race(
        tmp_path,
        """
        from parlai_empathy.emotions import tag_cache
    """,
        f"""
        run = tag_cache.tag_ed({classifier!r}, {SAMPLE!r}, {str(root)!r}, chunk_size=300, progress=False)
        print(json.dumps({{'dir': run.directory, 'tagged': run.tagged, 'reused': run.reused, 'total': run.total}}))
    """,
    )
    runs = [r for r, _ in results]
    total = runs[0]['total']
    assert runs[0]['dir'] == runs[1]['dir']
    assert sorted((r['tagged'], r['reused']) for r in runs) == [(0, total), (total, 0)], runs
    table = tag_cache.TagTable(runs[0]['dir'])
    assert table.probs.shape[0] == total and np.isfinite(table.probs).all()
    assert not os.path.exists(os.path.join(runs[0]['dir'], 'parts'))


def test_report_pool_and_stream_counts_built_once(tmp_path):
    """Two teachers of the cleaned ED, streaming, started together: the cleaning report, the
    response pool and the streaming example counts are each written once and read whole."""
    data = tmp_path / 'data'
    results = race(
        tmp_path,
        """
        from parlai.core.params import ParlaiParser
        from parlai.core.teachers import create_task_agent_from_taskname
        from parlai_empathy.data import response_pool
        from parlai_empathy.tasks import ed  # noqa: F401
    """,
        f"""
        opt = ParlaiParser(True, False).parse_args(['-t', 'empathy_ed_clean', '--ed-datapath', 'sample',
                                                     '-dt', 'valid:stream', '--datapath', {str(data)!r}])
        teacher = create_task_agent_from_taskname(opt)[0]
        pool = response_pool.ensure_pool('sample', 20, {str(data / 'pools')!r})
        print(json.dumps({{'exs': teacher.num_examples(), 'eps': teacher.num_episodes(),
                          'pool_lines': sum(1 for _ in open(pool))}}))
    """,
    )
    assert results[0][0] == results[1][0] and results[0][0]['exs'] > 0
    written = [os.path.join(d, f) for d, _, files in os.walk(data) for f in files]
    assert not [p for p in written if '.tmp' in p]
    lengths = [p for p in written if p.endswith('.lengths')]
    assert len(lengths) == 1
    with open(lengths[0]) as f:
        assert [int(x) for x in f.read().split()] == [results[0][0]['eps'], results[0][0]['exs']]
    reports = [p for p in written if p.endswith('valid.cleaning_report.json')]
    assert len(reports) == 1
    with open(reports[0]) as f:
        json.load(f)


def test_half_written_stream_counts_are_counted_again(tmp_path):
    """A counts file left empty by a killed process is recounted, not a crash (ParlAI would fail
    unpacking it)."""
    from parlai_empathy.tasks.ed import locked_length_loader

    path = tmp_path / 'valid.lengths'
    path.write_text('')
    calls = []

    def parlai_load_length():  # ParlAI's: counts when the file is missing, else reads it
        if not path.exists():
            calls.append('count')
            path.write_text('3\n7')
        eps, exs = path.read_text().split()
        return int(eps), int(exs)

    assert locked_length_loader(parlai_load_length, str(path))() == (3, 7)
    assert calls == ['count']
    assert locked_length_loader(parlai_load_length, str(path))() == (3, 7) and calls == ['count']
