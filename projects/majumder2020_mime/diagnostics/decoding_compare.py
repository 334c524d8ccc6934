"""One generator, several decodings, the same ED test examples, through ``parlai eval_model``.

For each ``NAME=ARGS`` decoding the script runs ``parlai eval_model -mf MODEL -t empathy_ed_clean
-dt test -ne N`` with those extra arguments, keeps its world log (compressed) and scores the
replies with our suite: mean length (13a tokens), distinct replies, corpus Distinct-1/2, multi-bleu
(lowercased, moses) and AVG BLEU. With ``--mime-repo`` the reference's released ``output.txt``
replies (greedy, beam, top-k) to the same first N examples are scored beside them (multi-bleu
against its own tokenized golds; AVG BLEU is left out there: case and tokens differ).

    python projects/majumder2020_mime/diagnostics/decoding_compare.py -mf MODEL -n 304 --mime-repo /work/ref-mime \\
        --decoding 'beam_top=--inference beam --beam-stop top' \\
        --decoding 'beam_finished=--inference beam --beam-stop finished' \\
        --decoding 'greedy=--inference greedy --beam-size 1' --outdir OUT
"""

import argparse
import gzip
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from parlai_empathy.evidence import artifacts as evidence
from parlai_empathy.metrics.bleu import corpus_bleu
from parlai_empathy.metrics.distinct import corpus_distinct, tokens


def scores(replies, golds, with_avg_bleu=True):
    bleu = corpus_bleu(replies, golds)
    out = {
        'examples': len(replies),
        'mean_tokens': round(sum(len(tokens(r)) for r in replies) / max(1, len(replies)), 2),
        'distinct_replies': len(set(replies)),
        'dist-1': corpus_distinct(replies, 1),
        'dist-2': corpus_distinct(replies, 2),
        'multi_bleu': bleu['multi_bleu'],
    }
    if with_avg_bleu:
        out['avg_bleu'] = bleu['avg_bleu']
    return out


def read_world_log(path):
    """(reply, gold) per example of a ``--world-logs`` file: the teacher's turn, then the model's."""
    replies, golds = [], []
    with open(path, encoding='utf-8') as f:
        for line in f:
            for teacher, model in (turn[:2] for turn in json.loads(line)['dialog']):
                golds.append(teacher['eval_labels'][0])
                replies.append(model.get('text', ''))
    return replies, golds


def portable_metadata(path, places):
    """ParlAI's world-log ``.metadata`` (the run's options), with machine paths as placeholders."""
    if os.path.isfile(path):
        with open(path, encoding='utf-8') as f:
            meta = json.load(f)
        with open(path, 'w', encoding='utf-8') as f:
            json.dump(evidence.portable(meta, places), f, indent=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('-mf', '--model-file', required=True)
    parser.add_argument('-n', type=int, default=300, help='the first N ED test examples')
    parser.add_argument('--decoding', action='append', required=True, metavar='NAME=ARGS')
    parser.add_argument('--mime-repo', help='a checkout of declare-lab/MIME (its output.txt)')
    parser.add_argument('--outdir', required=True)
    beside = os.path.join(os.path.dirname(sys.executable), 'parlai')  # this venv's parlai
    parser.add_argument('--parlai', default=beside if os.path.isfile(beside) else shutil.which('parlai') or 'parlai')
    args = parser.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    places = evidence.path_placeholders({os.path.abspath(args.outdir): '{outdir}'})
    script = 'projects/majumder2020_mime/diagnostics/decoding_compare.py'
    report = {
        'what': f'one model, several decodings, the same first N ED test examples ({script})',
        'command': evidence.portable(
            ['python', script] + ['REF_MIME' if args.mime_repo and a == args.mime_repo else a for a in sys.argv[1:]],
            places,
        ),
        'code': evidence.code_version(),
        'machine': evidence.machine(),
        'decodings': {},
    }
    for item in args.decoding:
        name, extra = item.split('=', 1)
        log = os.path.join(args.outdir, f'{name}.jsonl')
        command = [
            args.parlai,
            'eval_model',
            '-mf',
            args.model_file,
            '-t',
            'empathy_ed_clean',
            '-dt',
            'test',
            '-ne',
            str(args.n),
            '-bs',
            '16',
            '--skip-generation',
            'false',
            '--world-logs',
            log,
            *shlex.split(extra),
        ]
        start = time.time()
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f'{" ".join(command)} failed:\n{done.stderr[-3000:]}')
        replies, golds = read_world_log(log)
        with open(log, 'rb') as src, gzip.open(log + '.gz', 'wb') as dst:
            shutil.copyfileobj(src, dst)
        os.remove(log)
        portable_metadata(log.replace('.jsonl', '.metadata'), places)
        report['decodings'][name] = dict(
            scores(replies, golds),
            seconds=round(time.time() - start, 1),
            command=evidence.portable(['parlai'] + command[1:], places),
        )
        print(name, json.dumps(report['decodings'][name]), flush=True)
    if args.mime_repo:
        from reference_outputs import DECODINGS, parse

        released = parse(os.path.join(args.mime_repo, 'output.txt'))[: args.n]
        golds = [e['Ref'] for e in released]
        report['reference_released'] = {
            'commit': evidence.code_version(args.mime_repo).get('commit'),
            **{name.lower(): scores([e[name] for e in released], golds, with_avg_bleu=False) for name in DECODINGS},
        }
        print('reference', json.dumps(report['reference_released']))
    with open(os.path.join(args.outdir, 'summary.json'), 'w') as f:
        json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
