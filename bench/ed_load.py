"""Time and peak memory to load all three ED splits: our teachers vs ParlAI's own, in one run.

Each measurement runs in a fresh child process, so its peak RSS is its own; the child reports the
wall time of building the three teachers (read + clean + episodes + ParlAI's DialogData) and its
peak RSS, and the RSS after imports alone, so the data's own share is visible.

    PARLAI_EMPATHY_ED_DIR=../shared/data/empatheticdialogues .venv/bin/python bench/ed_load.py
"""

import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, resource, sys, time
from parlai.core.build_data import mark_done
from parlai.core.params import ParlaiParser
from parlai.tasks.empathetic_dialogues.agents import EmpatheticDialoguesTeacher
from parlai_empathy.tasks.ed import CleanTeacher, FaithfulTeacher
which, datapath, ed_dir = sys.argv[1:4]
teacher_class = {'parlai': EmpatheticDialoguesTeacher, 'empathy_ed': FaithfulTeacher,
                 'empathy_ed_clean': CleanTeacher}[which]
base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
examples = 0
for split in ('train', 'valid', 'test'):
    parser = ParlaiParser(True, False)
    teacher_class.add_cmdline_args(parser)
    args = ['-dt', split, '--datapath', datapath]
    if which != 'parlai':
        args += ['--ed-datapath', ed_dir]
    teacher = teacher_class(parser.parse_args(args))
    examples += teacher.num_examples()
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({'seconds': seconds, 'examples': examples, 'peak_mb': peak / 1024, 'import_mb': base_rss / 1024}))
"""


def measure(which, datapath, ed_dir, repeats=3):
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, '-c', CHILD, which, datapath, ed_dir], capture_output=True, text=True, check=True
        ).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    best = min(runs, key=lambda r: r['seconds'])
    best['median_seconds'] = sorted(r['seconds'] for r in runs)[len(runs) // 2]
    return best


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ed_dir = os.environ.get('PARLAI_EMPATHY_ED_DIR') or os.path.join(
        here, '..', '..', 'shared', 'data', 'empatheticdialogues'
    )
    ed_dir = os.path.abspath(ed_dir)
    with tempfile.TemporaryDirectory() as datapath:
        # ParlAI's teacher reads <datapath>/empatheticdialogues/empatheticdialogues/<split>.csv
        folder = os.path.join(datapath, 'empatheticdialogues', 'empatheticdialogues')
        os.makedirs(folder)
        for split in ('train', 'valid', 'test'):
            os.symlink(os.path.join(ed_dir, split + '.csv'), os.path.join(folder, split + '.csv'))
        with open(os.path.join(datapath, 'empatheticdialogues', '.built'), 'w') as f:
            f.write('built\n1.0')
        results = {which: measure(which, datapath, ed_dir) for which in ('parlai', 'empathy_ed', 'empathy_ed_clean')}
    print(f'ED train+valid+test from {ed_dir} ({os.cpu_count()} cores), best of 3 fresh processes')
    print(f'{"teacher":18s} {"examples":>9s} {"seconds":>8s} {"median":>8s} {"peak RSS MB":>12s} {"data MB":>8s}')
    for which, r in results.items():
        print(
            f'{which:18s} {r["examples"]:9d} {r["seconds"]:8.2f} {r["median_seconds"]:8.2f} '
            f'{r["peak_mb"]:12.0f} {r["peak_mb"] - r["import_mb"]:8.0f}'
        )
    base = results['parlai']['seconds']
    for which in ('empathy_ed', 'empathy_ed_clean'):
        print(f'time ratio {which} / parlai empathetic_dialogues: {results[which]["seconds"] / base:.2f}x')


if __name__ == '__main__':
    main()
