"""The stock ``parlai`` commands resolve our plain names and run end to end."""

import json

FIRST_VALID_TEXT = 'Today,as i was leaving for work in the morning,i had a tire burst in the middle of a busy road.'


def test_display_data_clean_valid(run_parlai):
    done = run_parlai('display_data', '-t', 'empathy_ed_clean', '-dt', 'valid', '-n', '2')
    assert FIRST_VALID_TEXT in done.stdout
    assert 'Are you fine now?' in done.stdout
    assert 'loaded 2769 episodes with a total of 5738 examples' in done.stdout + done.stderr


def test_display_data_faithful_train(run_parlai):
    done = run_parlai('display_data', '-t', 'empathy_ed', '-n', '1')
    assert 'with a total of 64636 examples' in done.stdout + done.stderr


def test_python_m_display_data_without_superscript(run_parlai):
    done = run_parlai('python', '-m', 'parlai.scripts.display_data', '-t', 'empathy_ed_clean', '-dt', 'test', '-n', '1')
    assert 'with a total of 5259 examples' in done.stdout + done.stderr


def test_full_path_fallback(run_parlai):
    done = run_parlai('display_data', '-t', 'parlai_empathy.tasks.ed:CleanTeacher', '-dt', 'valid', '-n', '1')
    assert FIRST_VALID_TEXT in done.stdout


def test_missing_data_gives_instructions(run_parlai, tmp_path):
    done = run_parlai(
        'display_data', '-t', 'empathy_ed_clean', '--ed-datapath', str(tmp_path / 'nowhere'), '-n', '1', check=False
    )
    assert done.returncode != 0
    assert 'lacks train.csv, valid.csv, test.csv' in done.stderr


def test_clean_report_command(run_parlai, tmp_path):
    done = run_parlai('empathy_clean_report', '--splits', 'valid', '--datapath', str(tmp_path), '--json', 'true')
    report = json.loads(done.stdout[done.stdout.index('{') :])
    assert report['valid']['rows_kept'] == 12078
    assert report['valid']['unrecoverable'] == []
    assert report['valid']['fixes']['edge_whitespace']['count'] > 0
    assert list(tmp_path.glob('empathy_ed_clean/*/valid.cleaning_report.json'))


def _train_args(model_file, steps):
    return [
        'train_model',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-m',
        'transformer/generator',
        '-mf',
        model_file,
        '--n-layers',
        '1',
        '--embedding-size',
        '16',
        '--ffn-size',
        '32',
        '--n-heads',
        '2',
        '-bs',
        '8',
        '--max-train-steps',
        str(steps),
        '-vstep',
        '10',
        '-vmt',
        'ppl',
        '-vmm',
        'min',
        '--skip-generation',
        'true',
        '--dict-maxtokens',
        '2000',
        '--truncate',
        '48',
        '--save-every-n-secs',
        '1',
    ]


def test_stock_generator_trains_and_evaluates_with_default_scheduler(run_parlai, tmp_path):
    """ParlAI's default --lr-scheduler reduceonplateau crashes on torch 2.13 without our compat."""
    model_file = str(tmp_path / 'model')
    done = run_parlai(*_train_args(model_file, 20))
    log = done.stdout + done.stderr
    assert 'max_train_steps elapsed:20' in log
    opt = json.load(open(model_file + '.opt'))
    assert opt['lr_scheduler'] == 'reduceonplateau' and opt['task'] == 'empathy_ed_clean'
    evaluated = run_parlai(
        'eval_model',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-mf',
        model_file,
        '-dt',
        'test',
        '--inference',
        'greedy',
        '--skip-generation',
        'false',
        '-bs',
        '16',
        '--report-filename',
        str(tmp_path / 'report.json'),
    )
    report = json.load(open(tmp_path / 'report.json'))['report']
    assert report['exs'] > 100 and report['ppl'] > 1
    assert 'bleu-4' in report
    assert 'exs' in evaluated.stdout
