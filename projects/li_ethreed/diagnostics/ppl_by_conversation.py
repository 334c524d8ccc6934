"""Perplexity averaged per conversation, as outsider-lj/ethreed's test loop averages it, from a
row's committed per-example outputs.

Our ``ppl_ex`` is exp of the mean over responses of each response's mean token NLL: every
response weighs the same. The reference ETHREED's test loop (``lj_solver.py`` ``test``, with
``configs.py``'s ``--eval_batch_size 1``: one conversation per batch) takes, per batch,
``multi_loss``'s mean over that conversation's responses of each response's mean token NLL
(``model/layers/loss.py``), then the mean over batches, then exp: every *conversation* weighs the
same, so a response of a two-response conversation counts half of one in a one-response
conversation (fidelity row 26 of ``projects/li_ethreed/README.md``). Both come from the same
numbers: each record of ``outputs.jsonl.gz`` holds the response's summed NLL (``nll``), its token
count (``tokens``) and its id ``<conversation>/<turn>``, so no model is run.

Usage (from the repository root)::

    python projects/li_ethreed/diagnostics/ppl_by_conversation.py \\
        --outputs ethreed=projects/li_ethreed/runs/ethreed \\
        ethreed_no_policy=projects/li_ethreed/runs/ethreed_no_policy \\
        --out projects/li_ethreed/runs/diagnostics/ppl_conversation/ppl.json

Each ``NAME=PATH`` is a run folder (``outputs.jsonl.gz``, and ``report.json`` whose ``ppl_ex``
the per-response figure must reproduce) or an ``outputs.jsonl.gz`` file. Prints a markdown table.
"""

import argparse
import collections
import gzip
import json
import math
import os
import time

from parlai_empathy.evidence import artifacts as evidence

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def read_outputs(path):
    """Per-response mean token NLLs, grouped by conversation, in file order.

    :return: ``{conversation: [mean NLL, ...]}``
    """
    groups = collections.OrderedDict()
    with gzip.open(path, 'rt', encoding='utf-8') as handle:
        for line_no, line in enumerate(handle, start=1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise SystemExit(f'{path}:{line_no}: not a JSON line ({err.msg})') from None
            for field in ('id', 'nll', 'tokens'):
                if field not in record:
                    raise SystemExit(f'{path}:{line_no}: field "{field}" missing')
            conversation, sep, _turn = str(record['id']).rpartition('/')
            if not sep:
                raise SystemExit(
                    f'{path}:{line_no}: field "id": "<conversation>/<turn>" expected, not {record["id"]!r}'
                )
            tokens = record['tokens']
            if not isinstance(tokens, int) or tokens < 1:
                raise SystemExit(f'{path}:{line_no}: field "tokens": a positive count expected, not {tokens!r}')
            groups.setdefault(conversation, []).append(float(record['nll']) / tokens)
    if not groups:
        raise SystemExit(f'{path}: no records')
    return groups


def perplexities(groups):
    """``ppl_ex`` (each response weighs the same) and ``ppl_ex_conv`` (each conversation does)."""
    per_response = [value for values in groups.values() for value in values]
    per_conversation = [sum(values) / len(values) for values in groups.values()]
    return {
        'responses': len(per_response),
        'conversations': len(per_conversation),
        'ppl_ex': math.exp(sum(per_response) / len(per_response)),
        'ppl_ex_conv': math.exp(sum(per_conversation) / len(per_conversation)),
    }


def resolve(path):
    """``(outputs file, report.json or None)`` for a run folder or an outputs file."""
    if os.path.isdir(path):
        outputs, report = os.path.join(path, 'outputs.jsonl.gz'), os.path.join(path, 'report.json')
    else:
        outputs, report = path, os.path.join(os.path.dirname(path), 'report.json')
    if not os.path.isfile(outputs):
        raise SystemExit(f'{outputs}: no such file (a run folder with outputs.jsonl.gz, or the file)')
    return outputs, (report if os.path.isfile(report) else None)


def relative(path):
    path = os.path.abspath(path)
    return os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--outputs', nargs='+', required=True, metavar='NAME=PATH')
    parser.add_argument('--out', help='write the figures as JSON here')
    args = parser.parse_args(argv)
    rows = []
    for item in args.outputs:
        name, sep, path = item.partition('=')
        if not sep or not name or not path:
            parser.error(f'--outputs: NAME=PATH expected, not {item!r}')
        outputs, report = resolve(path)
        row = {'name': name, 'path': relative(path), 'outputs': relative(outputs)}
        row.update(perplexities(read_outputs(outputs)))
        if report:
            reported = evidence.read_report(os.path.dirname(report))['values'].get('ppl_ex')
            if reported is not None:
                row['report_ppl_ex'] = reported
                if abs(reported - row['ppl_ex']) > 1e-6 * reported:
                    raise SystemExit(
                        f'{report}: ppl_ex {reported} but its outputs give {row["ppl_ex"]}: not the same run'
                    )
        rows.append(row)
    print(
        '| run | responses | conversations | `ppl_ex` (each response) | each conversation (the '
        "reference's test loop) | difference |"
    )
    print('|---|---|---|---|---|---|')
    for row in rows:
        print(
            f'| {row["name"]} | {row["responses"]:,} | {row["conversations"]:,} | '
            f'{row["ppl_ex"]:.2f} | {row["ppl_ex_conv"]:.2f} | '
            f'{row["ppl_ex_conv"] - row["ppl_ex"]:+.2f} |'
        )
    if args.out:
        report = {
            'what': 'perplexity per response (ppl_ex) and per conversation (outsider-lj/ethreed '
            'test loop: eval batch = one conversation) from committed outputs.jsonl.gz '
            '(projects/li_ethreed/diagnostics/ppl_by_conversation.py)',
            'command': ['python', 'projects/li_ethreed/diagnostics/ppl_by_conversation.py', '--outputs']
            + [f'{row["name"]}={row["path"]}' for row in rows]
            + ['--out', relative(args.out)],
            'code': evidence.code_version(REPO),
            'date': time.strftime('%Y-%m-%d %H:%M:%S %z'),
            'rows': rows,
        }
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        evidence.write_json(args.out, report)


if __name__ == '__main__':
    main()
