#!/usr/bin/env python3
"""Ask a model N different ED test contexts through the real ``parlai interactive`` CLI.

Each context is the Speaker's first utterance of a different ED test conversation, typed as one
message and followed by ``[DONE]`` (a fresh episode each). The script pipes them into one
``parlai interactive -mf MODEL`` process, reads the replies (and the fields given with
``--fields``, e.g. the predicted emotion) off its console output, and writes a JSON transcript
with the number of distinct replies:

    .venv/bin/python projects/common/diagnostics/interactive_replies.py \\
        -mf ~/parlai-empathy-runs/majumder2020_mime/mime/model \\
        --n 100 --fields predicted_emotion,emotion_polarity --out projects/majumder2020_mime/runs/mime/interactive.json
"""

import argparse
import csv
import json
import os
import re
import subprocess
import sys


def first_utterances(ed_dir: str, n: int):
    """The first Speaker utterance of the first ``n`` conversations of ED test."""
    seen, out = set(), []
    with open(os.path.join(ed_dir, 'test.csv'), encoding='utf-8') as f:
        reader = csv.reader(f)
        next(reader)
        for row in reader:
            if row[0] in seen or row[1] != '1':
                continue
            seen.add(row[0])
            out.append({'conv_id': row[0], 'emotion': row[2], 'text': row[5].replace('_comma_', ',')})
            if len(out) == n:
                break
    return out


def parse(stdout: str, fields):
    """Replies in order: ParlAI prints each reply's ``[field]: value`` lines, then ``[Agent]: text``."""
    replies, pending = [], {}
    for line in stdout.splitlines():
        line = line.replace('Enter Your Message:', '').strip()
        m = re.match(r'^\[([^\]]+)\]:\s?(.*)$', line)
        if not m:
            continue
        name, value = m.group(1), m.group(2)
        if name in fields:
            pending[name] = value
        elif name not in ('id', 'episode_done', 'metrics', 'context', 'text') and not name.startswith('label'):
            replies.append(dict(pending, agent=name, reply=value))
            pending = {}
    return replies


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('-mf', '--model-file', required=True)
    parser.add_argument(
        '--ed-dir', default=os.environ.get('PARLAI_EMPATHY_ED_DIR', '../shared/data/empatheticdialogues')
    )
    parser.add_argument('--n', type=int, default=100)
    parser.add_argument('--fields', default='predicted_emotion', help='reply fields to show (--display-add-fields)')
    parser.add_argument('--extra', default='', help='extra parlai interactive arguments')
    parser.add_argument('--out', default=None)
    args = parser.parse_args()
    contexts = first_utterances(args.ed_dir, args.n)
    stdin = ''.join(f'{c["text"]}\n[DONE]\n' for c in contexts) + '[EXIT]\n'
    parlai = os.path.join(os.path.dirname(sys.executable), 'parlai')
    command = [parlai, 'interactive', '-mf', args.model_file, '--display-add-fields', args.fields] + args.extra.split()
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=3600)
    if done.returncode not in (0, 1):  # ParlAI's interactive ends with StopIteration at [EXIT] on some paths
        sys.exit(f'parlai interactive exited {done.returncode}:\n{done.stderr[-3000:]}')
    fields = [f for f in args.fields.split(',') if f]
    replies = parse(done.stdout, fields)
    if len(replies) != len(contexts):
        sys.exit(f'{len(contexts)} messages but {len(replies)} replies read off the console:\n{done.stdout[-3000:]}')
    transcript = [
        dict(context=c['text'], conv_id=c['conv_id'], ed_emotion=c['emotion'], **r) for c, r in zip(contexts, replies)
    ]
    distinct = len({r['reply'] for r in replies})
    from parlai_empathy.evidence import artifacts as evidence

    places = evidence.path_placeholders({os.path.expanduser('~/parlai-empathy-runs'): '{runs}'})
    report = {
        'command': evidence.portable(' '.join(['parlai'] + command[1:]), places),
        'contexts': len(contexts),
        'distinct_replies': distinct,
        'transcript': transcript,
    }
    print(f'{distinct} distinct replies to {len(contexts)} different contexts')
    for row in transcript[:5]:
        print(f'  > {row["context"]}\n  < {row["reply"]}  ' + ' '.join(f'[{f}: {row.get(f)}]' for f in fields))
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, 'w', encoding='utf-8') as f:
            json.dump(report, f, indent=1, ensure_ascii=False)
            f.write('\n')


if __name__ == '__main__':
    main()
