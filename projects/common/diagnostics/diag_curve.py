"""A diagnostic run's validation curve as committed evidence (``runs/<diag>/curve.json``).

Reads the ``<model>.trainstats`` that ``parlai train_model`` keeps (every validation report, with
the wall seconds trained so far) through :func:`parlai_empathy.evidence.learning_curve.read_curve`, and
writes it with what the run is, its exact command (machine paths as ``{runs}``), the commit its
frozen venv was installed from and the machine and load it ran under. The model's ``.opt`` is
written beside it as ``model.opt`` (machine paths as placeholders, ``evidence.portable_opt``; set
``PARLAI_EMPATHY_RUNS_DIR`` to the runs folder so that it reads ``{runs}``). ``--table`` prints several
such curves side by side at equal updates.

    python projects/common/diagnostics/diag_curve.py \\
        --trainstats RUNS/majumder2020_mime/diag_ctx/model.trainstats \\
        --out projects/majumder2020_mime/runs/diagnostics/ctx/curve.json --commit a512ebe \\
        --what '...' --command '...' --machine '...'
    python projects/common/diagnostics/diag_curve.py --table NAME=curve.json NAME=curve.json \\
        [--metrics ppl_ex_gold emo_acc]
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

from parlai_empathy.evidence import artifacts as evidence
from parlai_empathy.evidence.learning_curve import read_curve


def table(curves, metrics):
    points = {name: {row['updates']: row for row in json.load(open(path))['curve']} for name, path in curves}
    updates = sorted(set().union(*(p.keys() for p in points.values())))
    head = ['updates'] + [f'{name}: {m}' for name, _ in curves for m in metrics]
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for u in updates:
        row = [f'{u:,}']
        for name, _ in curves:
            point = points[name].get(u)
            row += [
                f'{point[m]:.3f}' if point and m.startswith('emo') else f'{point[m]:.1f}' if point else ''
                for m in metrics
            ]
        lines.append('| ' + ' | '.join(row) + ' |')
    return '\n'.join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--trainstats')
    parser.add_argument('--out')
    parser.add_argument('--commit', help="the commit the run's venv was frozen from")
    parser.add_argument('--what', default='')
    parser.add_argument('--command', default='')
    parser.add_argument('--machine', default='')
    parser.add_argument('--table', nargs='*', metavar='NAME=CURVE')
    parser.add_argument('--metrics', nargs='*', default=['ppl', 'ppl_ex_gold', 'emo_acc'])
    args = parser.parse_args()
    if args.table:
        print(table([tuple(item.split('=', 1)) for item in args.table], args.metrics))
        return
    if not (args.trainstats and args.out):
        parser.error('give --trainstats and --out (or --table)')
    places = evidence.path_placeholders()
    record = {
        'what': args.what,
        'command': evidence.portable(args.command, places),
        'code_commit': args.commit,
        'machine': args.machine,
        'machine_facts': evidence.machine(),
        'curve': read_curve(args.trainstats),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    evidence.write_json(args.out, record)
    opt = os.path.splitext(args.trainstats)[0] + '.opt'
    if os.path.isfile(opt):
        evidence.write_json(
            os.path.join(os.path.dirname(args.out), 'model.opt'), evidence.portable_opt(evidence.read_json(opt), places)
        )


if __name__ == '__main__':
    main()
