"""The agent through the real ``parlai`` command (needs ``make reinstall``): train, evaluate with
P@1,100 candidate blocks, and chat with bad input."""

import json
import os
import subprocess

import pytest

from bert_ranker_tiny import build_tiny_bert
from conftest import VENV_BIN

AGENT = 'parlai_empathy.agents.bert_ranker:BertRankerAgent'


@pytest.fixture(scope='module')
def tiny_bert(tmp_path_factory, ed_dir):
    return build_tiny_bert(str(tmp_path_factory.mktemp('tiny_bert')), os.path.join(ed_dir, 'train.csv'))


def test_train_then_eval_reports_p_at_1_of_100(run_parlai, tiny_bert, tmp_path):
    model_file = tmp_path / 'ranker' / 'model'  # a folder nothing has made yet (checkpoints create it)
    run_parlai(
        'train_model',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-m',
        'empathy/bert_ranker',
        '--bert-model',
        tiny_bert,
        '--pooling',
        'mean',
        '-mf',
        model_file,
        '-bs',
        8,
        '-lr',
        1e-3,
        '--max-train-steps',
        6,
        '-vme',
        100,
        '--short-final-eval',
        'true',
        '--save-every-n-secs',
        1,
    )  # validated as the reference does: the in-batch loss (--eval-candidates batch)
    assert model_file.exists() and (tmp_path / 'ranker' / 'model.opt').exists()
    report_file = tmp_path / 'report.json'
    run_parlai(
        'eval_model',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-mf',
        model_file,
        '-dt',
        'test',
        '--ed-candidates',
        'rashkin100',
        '--eval-candidates',
        'inline',
        '-bs',
        25,
        '--report-filename',
        report_file,
    )
    metrics = json.loads(report_file.read_text())['report']
    assert metrics['exs'] == 100  # the sample's test split holds one full block of 100
    assert 0.0 <= metrics['hits@1'] <= metrics['hits@5'] <= metrics['hits@100'] == 1.0


def test_interactive_bad_input_gets_answers_not_tracebacks(tiny_bert, tmp_path):
    from parlai.core.agents import create_agent
    from parlai.core.params import ParlaiParser

    model_file = str(tmp_path / 'model')
    opt = ParlaiParser(True, True).parse_args(['-m', AGENT, '--bert-model', tiny_bert, '-mf', model_file])
    create_agent(opt).save()
    lines = [
        b'my dog died last week',
        b'',  # empty
        b'so sad ' * 200,  # far over 100 tokens
        'I got a new puppy \U0001f600\U0001f436'.encode('utf-8'),  # emoji
        b'bad bytes \xff\xfe here',  # not UTF-8
        '\U0001f600'.encode('utf-8'),  # emoji only
        b'[EXIT]',
    ]
    # raw (non-UTF-8) bytes on stdin: the stock CLI is called directly, in binary mode
    done = subprocess.run(
        [os.path.join(VENV_BIN, 'parlai'), 'interactive', '-mf', model_file, '--pool-ed-datapath', 'sample'],
        input=b'\n'.join(lines) + b'\n',
        capture_output=True,
        cwd=tmp_path,
        timeout=300,
        env=dict(os.environ, HF_HUB_OFFLINE='1'),
    )
    stdout, stderr = done.stdout.decode('utf-8', 'replace'), done.stderr.decode('utf-8', 'replace')
    assert done.returncode == 0, stderr[-3000:]
    assert 'Traceback' not in stdout + stderr
    replies = [line for line in stdout.splitlines() if '[BertRanker]:' in line]
    assert len(replies) == len(lines) - 1, stdout[-3000:]
    assert "didn't get any text" in replies[1]
    assert all(r.split('[BertRanker]:', 1)[1].strip() for r in replies)
