"""``projects/li_ethreed/diagnostics/ppl_by_conversation.py``: per-response and per-conversation
perplexity from a run's ``outputs.jsonl.gz`` (the reference ETHREED's test loop weighs each conversation the same)."""

import gzip
import json
import math
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, 'projects', 'li_ethreed', 'diagnostics'))
import ppl_by_conversation as pbc  # noqa: E402

# conversation a: two responses (mean token NLL 1.0 and 3.0); conversation b: one (2.5)
RECORDS = [
    {'id': 'hit:1_conv:2/2', 'nll': 4.0, 'tokens': 4},
    {'id': 'hit:1_conv:2/4', 'nll': 6.0, 'tokens': 2},
    {'id': 'hit:7_conv:9/2', 'nll': 5.0, 'tokens': 2},
]


def write_run(folder, records, ppl_ex=None):
    folder.mkdir()
    with gzip.open(folder / 'outputs.jsonl.gz', 'wt', encoding='utf-8') as handle:
        for record in records:
            handle.write((record if isinstance(record, str) else json.dumps(record)) + '\n')
    if ppl_ex is not None:
        (folder / 'report.json').write_text(json.dumps({'values': {'ppl_ex': ppl_ex}}))
    return folder


def test_each_response_and_each_conversation(tmp_path, capsys):
    per_response = math.exp((1.0 + 3.0 + 2.5) / 3)
    per_conversation = math.exp(((1.0 + 3.0) / 2 + 2.5) / 2)
    run = write_run(tmp_path / 'run', RECORDS, ppl_ex=per_response)
    out = tmp_path / 'ppl.json'
    pbc.main(['--outputs', f'row={run}', '--out', str(out)])
    row = json.loads(out.read_text())['rows'][0]
    assert (row['responses'], row['conversations']) == (3, 2)
    assert row['ppl_ex'] == pytest.approx(per_response)
    assert row['ppl_ex_conv'] == pytest.approx(per_conversation)
    assert row['report_ppl_ex'] == pytest.approx(per_response)
    assert '| row | 3 | 2 |' in capsys.readouterr().out


def test_a_report_from_another_run_is_refused(tmp_path):
    run = write_run(tmp_path / 'run', RECORDS, ppl_ex=12.0)
    with pytest.raises(SystemExit, match='not the same run'):
        pbc.main(['--outputs', f'row={run}'])


@pytest.mark.parametrize(
    'bad, message',
    [
        ({'id': 'hit:1_conv:2/6', 'tokens': 3}, ':3: field "nll" missing'),
        ({'id': 'no-turn', 'nll': 1.0, 'tokens': 3}, ':3: field "id"'),
        ({'id': 'hit:1_conv:2/6', 'nll': 1.0, 'tokens': 0}, ':3: field "tokens"'),
        ('{"id": ', ':3: not a JSON line'),
    ],
)
def test_bad_records_name_the_file_line_and_field(tmp_path, bad, message):
    run = write_run(tmp_path / 'run', RECORDS[:2] + [bad])
    with pytest.raises(SystemExit, match=message) as caught:
        pbc.main(['--outputs', f'row={run}'])
    assert 'outputs.jsonl.gz' in str(caught.value)
