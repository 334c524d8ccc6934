"""The validations and training speed of a GPU run's rows, from their ``.trainstats`` (what
``run.sh`` packs into ``<project>.tar.gz`` under ``trainstats/``), as a markdown table.

    python tools/gpu/trainstats_table.py tools/gpu/results/RUN/trainstats/*.trainstats

One line per validation: the row, updates, ``train_time`` seconds at that update (ParlAI's clock of
the run), the validation's examples and its metrics (those of ``--metrics``, where the report has
them); then per row the mean updates per second and examples per second of its training reports.
"""

import argparse
import json
import os
import sys


def rows(paths, metrics):
    lines = [
        '| row | updates | train seconds | valid examples | ' + ' | '.join(metrics) + ' |',
        '|---|---|---|---|' + '---|' * len(metrics),
    ]
    speed = ['| row | training reports | updates/s | examples/s |', '|---|---|---|---|']
    for path in paths:
        with open(path) as f:
            stats = json.load(f)
        name = os.path.basename(path).rsplit('.', 1)[0]
        train = stats.get('train_reports', [])
        times = {r.get('total_train_updates'): r.get('train_time') for r in train}
        for report in stats.get('valid_reports', []):
            updates = report.get('total_train_updates')
            cells = [f'{report[m]:.4g}' if isinstance(report.get(m), (int, float)) else '' for m in metrics]
            seconds = times.get(updates)
            lines.append(
                f'| {name} | {updates} | {"" if seconds is None else f"{seconds:.0f}"} | '
                f'{report.get("exs", "")} | ' + ' | '.join(cells) + ' |'
            )
        if train:
            ups = sum(r.get('ups', 0) for r in train) / len(train)
            exps = sum(r.get('exps', 0) for r in train) / len(train)
            speed.append(f'| {name} | {len(train)} | {ups:.2f} | {exps:.0f} |')
    return '\n'.join(lines) + '\n\n' + '\n'.join(speed)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('trainstats', nargs='+')
    parser.add_argument(
        '--metrics', default='ppl_ex,ppl,emo_acc,accuracy', help='comma-separated report keys (default: %(default)s)'
    )
    args = parser.parse_args(argv)
    print(rows(args.trainstats, [m for m in args.metrics.split(',') if m]))
    return 0


if __name__ == '__main__':
    sys.exit(main())
