"""ACUTE-Eval win rates on the board: attached from ``empathy_acute_analyze``'s results.json to the
rows of the same name, shown with their interval and number of judgments; a file that is not such
a report is refused in one line naming the field."""

import json
import os

import pytest

from conftest import REPO
from parlai_empathy.leaderboard import board, rows
from parlai_empathy.leaderboard.human import HumanEvalError, attach_acute, read_acute

REPORT = {
    'kind': 'acute',
    'reference': 'majumder2020_mime/moel',
    'question': "Which listener understands the speaker's feelings better?",
    'task_name': 'empathy_acute_empathy',
    'win_rate_against_reference': {
        'mime': {
            'win_rate': 0.625,
            'ci_low': 0.458,
            'ci_high': 0.773,
            'p_value': 0.15,
            'wins': 25,
            'judgments': 40,
            'reference': 'moel',
        },
        'kemp': {
            'win_rate': 0.5,
            'ci_low': 0.2,
            'ci_high': 0.8,
            'p_value': 1.0,
            'wins': 5,
            'judgments': 10,
            'reference': 'moel',
        },
    },
}


def _write(path, report):
    path.write_text(json.dumps(report))
    return str(path)


def test_the_board_shows_each_judged_row_against_the_reference(tmp_path):
    results = rows.gather_artifacts(os.path.join(REPO, 'projects'))
    notes = rows.board_notes(results)
    attach_acute(results, [_write(tmp_path / 'results.json', REPORT)], notes)
    paths = board.write_outputs(results, str(tmp_path / 'board'), notes)
    # 'mime' (a project row's folder name) is majumder2020_mime/mime; 'kemp' is published/kemp
    mime = next(r for r in results if r.name == 'majumder2020_mime/mime')
    assert mime.values['acute_win_rate'] == 0.625 and mime.values['acute_judgments'] == 40
    assert next(r for r in results if r.name == 'published/kemp').values['acute_judgments'] == 10
    assert not any('acute_win_rate' in r.values for r in results if r.name.endswith('/moel'))
    md = open(paths['leaderboard.md']).read()
    assert '| majumder2020_mime/mime | majumder2020_mime/moel | 62.5 | 45.8-77.3 | 40 |' in md
    header = open(paths['leaderboard.csv']).readline().strip().split(',')
    assert header[-4:] != [] and 'acute_win_rate_ci_high' in header
    assert 'ACUTE-Eval win rate against majumder2020_mime/moel' in md


def test_a_name_matching_several_rows_is_left_off_and_said(tmp_path):
    results = rows.gather_artifacts(os.path.join(REPO, 'projects'))
    notes = {}
    report = dict(REPORT, win_rate_against_reference={'moel': REPORT['win_rate_against_reference']['kemp']})
    attach_acute(results, [_write(tmp_path / 'r.json', report)], notes)
    assert not any('acute_win_rate' in r.values for r in results)
    assert (
        'judged but not on this board (or matching several rows): moel'
        in notes['human evaluation (empathy_acute_empathy)']
    )


@pytest.mark.parametrize(
    'change, message',
    [
        ({'kind': 'likert'}, "kind must be 'acute'"),
        (
            {
                'win_rate_against_reference': {
                    'mime': {'win_rate': float('nan'), 'ci_low': 0, 'ci_high': 1, 'judgments': 3}
                }
            },
            'win_rate_against_reference.mime.win_rate must be a number in [0, 1], got nan',
        ),
        (
            {'win_rate_against_reference': {'mime': {'win_rate': 0.5, 'ci_low': 0, 'ci_high': 1, 'judgments': True}}},
            'win_rate_against_reference.mime.judgments must be a positive integer',
        ),
        (
            {'win_rate_against_reference': {'mime': {'win_rate': '0.5', 'ci_low': 0, 'ci_high': 1, 'judgments': 3}}},
            "got '0.5'",
        ),
        ({'reference': None}, 'win_rate_against_reference and reference missing'),
    ],
)
def test_a_report_with_a_bad_field_is_refused_naming_it(tmp_path, change, message):
    path = _write(tmp_path / 'r.json', dict(REPORT, **change))
    with pytest.raises(HumanEvalError, match=message.replace('[', r'\[').replace(']', r'\]')) as err:
        read_acute(path)
    assert str(err.value).startswith(path)


def test_deep_oversized_and_missing_files_are_refused_in_one_line(tmp_path):
    deep = tmp_path / 'deep.json'
    deep.write_text('[' * 200_000 + ']' * 200_000)
    with pytest.raises(HumanEvalError, match='not a JSON report'):
        read_acute(str(deep))
    big = tmp_path / 'big.json'
    with open(big, 'wb') as f:
        f.truncate((16 << 20) + 1)
    with pytest.raises(HumanEvalError, match='larger than'):
        read_acute(str(big))
    with pytest.raises(HumanEvalError, match='No such file'):
        read_acute(str(tmp_path / 'none.json'))
