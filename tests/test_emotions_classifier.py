"""The emotion classifier: plain model, F1 metrics, and the ParlAI agent end to end through the
real ``parlai`` command on real GoEmotions / ED data, with a tiny random BERT."""

import json
import os
import shutil

import pytest
import torch

from parlai_empathy.models.emotion_classifier import EmotionClassifier, decide, f1_counts, multi_hot
from test_emotions_support import make_tiny_bert


@pytest.fixture(scope='session')
def tiny_bert(tmp_path_factory):
    return make_tiny_bert(str(tmp_path_factory.mktemp('tiny_bert')))


def test_multilabel_and_single_label_heads(tiny_bert):
    ids = torch.tensor([[2, 6, 7, 3, 0], [2, 8, 3, 0, 0]])
    for multilabel in (True, False):
        model = EmotionClassifier.from_pretrained(tiny_bert, 5, multilabel, pooling='mean').eval()
        logits = model(ids, ids != 0)
        assert logits.shape == (2, 5)
        probs = model.probabilities(logits)
        if multilabel:
            assert ((probs > 0) & (probs < 1)).all()
            loss = model.loss(logits, multi_hot([[0, 3], [4]], 5))
        else:
            assert torch.allclose(probs.sum(-1), torch.ones(2))
            loss = model.loss(logits, torch.tensor([1, 4]))
        assert loss.shape == (2,) and (loss > 0).all()
        # padding does not change an example's logits
        longer = torch.cat([ids, torch.zeros(2, 3, dtype=torch.long)], 1)
        assert torch.allclose(model(longer, longer != 0), logits, atol=1e-5)


def test_threshold_decisions_and_counts():
    probs = torch.tensor([[0.9, 0.31, 0.1], [0.2, 0.1, 0.29]])
    assert decide(probs, multilabel=True, threshold=0.3) == [[0, 1], []]
    assert decide(probs, multilabel=False) == [[0], [2]]
    tp, fp, fn = f1_counts(multi_hot([[0, 1], []], 3), multi_hot([[0], [2]], 3))
    assert (tp, fp, fn) == ([1, 0, 0], [0, 1, 0], [0, 0, 1])


def test_f1_metrics_match_sklearn():
    from sklearn.metrics import f1_score

    from parlai_empathy.agents.emotion_classifier import F1Metric

    gen = torch.Generator().manual_seed(0)
    gold = (torch.rand(200, 6, generator=gen) < 0.3).float()
    pred = (torch.rand(200, 6, generator=gen) < 0.3).float()
    pred[:, 5] = 0  # a class never predicted
    macro = micro = None
    for start in range(0, 200, 64):  # accumulated batch by batch, as in ParlAI
        tp, fp, fn = f1_counts(pred[start : start + 64], gold[start : start + 64])
        macro = F1Metric(tp, fp, fn, macro=True) + macro
        micro = F1Metric(tp, fp, fn, macro=False) + micro
    assert macro.value() == pytest.approx(f1_score(gold, pred, average='macro', zero_division=0))
    assert micro.value() == pytest.approx(f1_score(gold, pred, average='micro', zero_division=0))


def _eval_report(run_parlai, tmp_path, *args, env=None):
    """Run ``parlai eval_model`` and return its JSON report (``--report-filename``)."""
    path = tmp_path / 'report.json'
    done = run_parlai('eval_model', *args, '--report-filename', path, env=env)
    with open(path) as f:
        return json.load(f)['report'], done.stdout + done.stderr


def test_train_and_eval_goemotions_end_to_end(run_parlai, tiny_bert, goemotions_dir, tmp_path):
    env = {'PARLAI_EMPATHY_GOEMOTIONS_DIR': goemotions_dir}
    mf = tmp_path / 'goemo' / 'model'
    done = run_parlai(
        'train_model',
        '-t',
        'empathy_goemotions',
        '-m',
        'empathy/emotion_classifier',
        '--encoder',
        tiny_bert,
        '-mf',
        mf,
        '-bs',
        16,
        '--max-train-steps',
        6,
        '-vstep',
        3,
        '--validation-max-exs',
        48,
        '--short-final-eval',
        'true',
        '--learningrate',
        1e-3,
        '--max-length',
        24,
        env=env,
    )
    assert 'macro_f1' in done.stdout + done.stderr
    assert (
        os.path.isfile(mf)
        and os.path.isfile(str(mf) + '.hf/config.json')
        and os.path.isfile(str(mf) + '.hf/tokenizer.json')
    )
    # the trained model reloads from its own files, without the encoder directory
    report, printed = _eval_report(
        run_parlai, tmp_path, '-t', 'empathy_goemotions', '-mf', mf, '-dt', 'test', '-ne', 64, '-bs', 32, env=env
    )
    assert report['exs'] == 64
    assert 0.0 <= report['macro_f1'] <= 1.0 and 0.0 <= report['micro_f1'] <= 1.0
    assert 'macro_f1' in printed and 'micro_f1' in printed


def test_single_label_ed_situation_classifier(run_parlai, tiny_bert, tmp_path):
    mf = tmp_path / 'ed' / 'model'
    run_parlai(
        'train_model',
        '-t',
        'empathy_ed_emotion',
        '--ed-datapath',
        'sample',
        '-m',
        'empathy/emotion_classifier',
        '--encoder',
        tiny_bert,
        '-mf',
        mf,
        '-bs',
        8,
        '--max-train-steps',
        4,
        '-vstep',
        2,
        '--validation-max-exs',
        16,
        '--short-final-eval',
        'true',
        '--learningrate',
        1e-3,
    )
    report, _ = _eval_report(
        run_parlai, tmp_path, '-t', 'empathy_ed_emotion', '--ed-datapath', 'sample', '-mf', mf, '-dt', 'valid'
    )
    assert report['exs'] > 0 and 0.0 <= report['accuracy'] <= 1.0
    # single-label: micro F1 is the accuracy
    assert report['micro_f1'] == pytest.approx(report['accuracy'], abs=1e-6)
    assert 'macro_f1' in report and 'weighted_f1' in report


def test_label_set_mismatch_is_a_clear_error(run_parlai, tiny_bert, goemotions_dir, tmp_path):
    """A GoEmotions classifier evaluated on the ED 32-way task names the problem and the fix."""
    env = {'PARLAI_EMPATHY_GOEMOTIONS_DIR': goemotions_dir}
    mf = tmp_path / 'goemo' / 'model'
    run_parlai(
        'train_model',
        '-t',
        'empathy_goemotions',
        '-m',
        'empathy/emotion_classifier',
        '--encoder',
        tiny_bert,
        '-mf',
        mf,
        '-bs',
        16,
        '--max-train-steps',
        1,
        '--validation-max-exs',
        16,
        '--short-final-eval',
        'true',
        env=env,
    )
    done = run_parlai(
        'eval_model', '-t', 'empathy_ed_emotion', '--ed-datapath', 'sample', '-mf', mf, '-ne', 8, check=False, env=env
    )
    assert done.returncode != 0
    assert 'LabelSetError' in done.stderr and 'train a classifier on this label set' in done.stderr


def test_a_killed_classifier_run_resumes_from_its_checkpoint(run_parlai, tiny_bert, tmp_path):
    """A killed run may leave only ``model.checkpoint*`` (here: after the validation at the end of a
    2-update run, its model files deleted). Resuming it initialises from that checkpoint, whose
    ``.opt`` holds ``--classes`` (filled from the teacher when the agent is built, after ParlAI
    compares the options). ParlAI's comparison raises TypeError on a saved list whose current
    value is None, so "not given" is an empty list."""
    mf = tmp_path / 'ed' / 'model'

    def train(steps):
        return run_parlai(
            'train_model',
            '-t',
            'empathy_ed_emotion',
            '--ed-datapath',
            'sample',
            '-m',
            'empathy/emotion_classifier',
            '--encoder',
            tiny_bert,
            '-mf',
            mf,
            '-bs',
            8,
            '--max-train-steps',
            steps,
            '-vstep',
            3,
            '--validation-max-exs',
            16,
            '--save-every-n-secs',
            1e-6,
            '--short-final-eval',
            'true',
            '--learningrate',
            1e-3,
        )

    train(2)
    for name in os.listdir(mf.parent):  # what a kill before the model file was written leaves
        if '.checkpoint' not in name:
            path = mf.parent / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    with open(str(mf) + '.checkpoint.opt') as f:
        assert len(json.load(f)['classes']) == 32
    done = train(4)
    assert 'Loading existing model parameters from' in done.stdout + done.stderr
    with open(str(mf) + '.trainstats') as f:  # the end of each schedule (2, 4) is validated too
        assert [v['train_steps'] for v in json.load(f)['valid_reports']] == [2, 3, 4]
