"""One step of `make demo`: the command's whole output (ParlAI's option dump, per-class tables,
warnings) goes to the demo's log; the terminal gets the step's result.

    python tools/demo_step.py LOG [--result trainstats MODEL_FILE | --result file PATH | --result plain]
        [--verbose] -- COMMAND ...

--result trainstats: one line from MODEL_FILE.trainstats (updates, seconds, the validation
  metric of MODEL_FILE.opt and its final value)
--result file: the file PATH (a table the step wrote)
--result plain: the command's own lines that are not ParlAI log records (a chat, examples shown)
--verbose: everything on the terminal as well (`make demo VERBOSE=1`)
A failing command prints its last 40 lines and the log's path, and the step exits with its status.
"""

import argparse
import json
import re
import shlex
import subprocess
import sys

# ParlAI's log records: "2026-12-08 01:58:01,815 INFO     | message" when stdout is not a
# terminal, "01:58:01 INFO | message" on one
LOG_RECORD = re.compile(r'(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d(,\d+)? +[A-Z]+ *\| .*$')
# a tqdm progress bar: "100%|██████████| 1/1 [00:00<00:00, 37.23it/s]"
PROGRESS = re.compile(r'^\s*\d+%\|')


def readable(line):
    """``line`` as a person reads it: without ParlAI's log records (also one that follows a prompt
    on its line) and progress bars; None when nothing is left."""
    line = LOG_RECORD.sub('', line.rstrip('\n'))
    if PROGRESS.match(line) or not line.strip():
        return None
    return line + '\n'


def trainstats_line(model_file):
    with open(model_file + '.opt', encoding='utf-8') as f:
        opt = json.load(f)
    with open(model_file + '.trainstats', encoding='utf-8') as f:
        stats = json.load(f)
    metric = opt.get('validation_metric', 'ppl')
    value = (stats.get('final_valid_report') or {}).get(metric)
    shown = f'{value:.4g}' if isinstance(value, (int, float)) else 'not reported'
    return (
        f'{stats.get("train_steps", 0):,} updates in {stats.get("train_time", 0):.0f} s; '
        f'valid {metric} {shown}; model {model_file}'
    )


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument('log')
    parser.add_argument('--result', nargs='+', default=['plain'])
    parser.add_argument('--verbose', default='')
    argv = sys.argv[1:] if argv is None else argv
    if '--' not in argv:
        parser.error('the command follows --')
    split = argv.index('--')
    args, command = parser.parse_args(argv[:split]), argv[split + 1 :]
    verbose = args.verbose not in ('', '0')
    with open(args.log, 'a', encoding='utf-8') as log:
        log.write(f'\n$ {shlex.join(command)}\n')
        log.flush()
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors='replace', bufsize=1
        )
        tail = []
        for line in process.stdout:
            log.write(line)
            tail = (tail + [line])[-40:]
            if verbose:
                sys.stdout.write(line)
            elif args.result[0] == 'plain' and readable(line):
                sys.stdout.write(readable(line))
            sys.stdout.flush()
        status = process.wait()
    if status:
        if not verbose:
            sys.stdout.writelines(tail)
        print(f'failed with status {status}; full output: {args.log}')
        return status
    if args.result[0] == 'trainstats':
        print(trainstats_line(args.result[1]))
    elif args.result[0] == 'file':
        with open(args.result[1], encoding='utf-8') as f:
            sys.stdout.write(f.read())
    return 0


if __name__ == '__main__':
    sys.exit(main())
