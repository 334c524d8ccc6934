"""bench/humaneval_load.py at a small size: concurrent workers, a SIGKILL of the server mid-load
and a restart; no acknowledged answer may be lost or stored twice, and every bad input must get
its expected refusal; a squatter on the entry link holds no more than its cap while every honest
worker is served. (The full-size figures are in bench/RESULTS.md; no timing is asserted.)"""

import json
import os
import subprocess
import sys

import pytest

from humaneval_helpers import REPO, cached_world_logs


@pytest.fixture(scope='module')
def logs(tmp_path_factory):
    return cached_world_logs(tmp_path_factory)


def test_small_load_with_a_kill_loses_and_duplicates_nothing(logs, tmp_path):
    out = tmp_path / 'load.json'
    done = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, 'bench', 'humaneval_load.py'),
            '--workers',
            '6',
            '--assignments',
            '2',
            '--items',
            '4',
            '--kills',
            '1',
            '--deadline',
            '900',
            '--world-logs',
            f'gold={logs["gold"]}',
            f'echo={logs["echo"]}',
            '--workdir',
            str(tmp_path),
            '--json',
            str(out),
            '--squatter-entries',
            '36',
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result['errors'] == []
    assert len(result['kills']) == 1
    assert result['sent'] == result['expected_answers'] == 6 * 2 * 5
    assert result['acknowledged'] == result['stored'] == result['sent']
    assert result['lost'] == 0 and result['duplicated'] == 0 and result['stored_differently'] == 0
    assert result['completed_assignments'] == 12
    assert result['honest_workers_served'] == 6 and result['honest_told_no_work'] == 0
    squatter = result['squatter']
    assert squatter['entries_tried'] >= 36 and squatter['most_reservations_held_at_once'] <= 2
    assert squatter['bindings_created'] <= 6
    wrong = [b for b in result['bad_inputs'] if not b['ok']]
    assert not wrong, wrong
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
