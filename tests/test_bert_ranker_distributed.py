"""``multiprocessing_train`` with 2 CPU workers (gloo) and the tiny BERT ranker."""
import os
import subprocess
import sys

import pytest

from bert_ranker_tiny import build_tiny_bert

# Spawned workers re-run the launcher's top level (as __mp_main__), so the CPU repairs are
# registered before ParlAI's distributed utilities load in every process.
LAUNCHER = '''
import parlai_empathy.cpu_distributed  # noqa: F401
from parlai.scripts.multiprocessing_train import MultiProcessTrain

if __name__ == '__main__':
    MultiProcessTrain.main()
'''


@pytest.fixture(scope='module')
def tiny_bert(tmp_path_factory, ed_dir):
    return build_tiny_bert(str(tmp_path_factory.mktemp('tiny_bert')), os.path.join(ed_dir, 'train.csv'))


def test_multiprocessing_train_two_cpu_workers(tiny_bert, tmp_path, ed_dir):
    launcher = tmp_path / 'launch.py'
    launcher.write_text(LAUNCHER)
    model_file = tmp_path / 'model'
    done = subprocess.run(
        [sys.executable, str(launcher), '-t', 'empathy_ed_clean', '--ed-datapath', 'sample',
         '-m', 'empathy/bert_ranker', '--bert-model', tiny_bert, '-mf', str(model_file), '-bs', '4',
         '--max-train-steps', '4', '--distributed-world-size', '2', '-vme', '20', '--short-final-eval', 'true',
         '--ed-candidates', 'rashkin100', '--eval-candidates', 'inline'],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
        env=dict(os.environ, PARLAI_EMPATHY_ED_DIR=ed_dir, HF_HUB_OFFLINE='1'),
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert 'Traceback' not in log
    assert 'Distributed group initialized' in log
    assert model_file.exists() and (tmp_path / 'model.test').exists()
    assert 'total_train_updates' in log and 'hits@1' in log
