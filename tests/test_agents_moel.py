"""``-m empathy/moel`` through the real ``parlai`` CLI: the paper's setup by default, a tiny
model trained, evaluated and chatted with, the oracle schedule, and hostile model folders.

Needs the package installed non-editably (``make reinstall``). Tiny models, the embedded ED
sample, a few steps each.
"""

import json
import os
import pickle
import shutil

import pytest

TINY = ['--embedding-size', 32, '--attention-size', 16, '--ffn-size', 32]


@pytest.fixture(scope='module')
def tiny(tmp_path_factory, ed_dir):
    """A tiny MoEL trained for 6 updates, its training log."""
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp('moel')
    model_file = folder / 'model'
    parlai = os.path.join(os.path.dirname(sys.executable), 'parlai')
    done = subprocess.run(
        [
            parlai,
            'train_model',
            '-t',
            'empathy_ed_clean',
            '--ed-datapath',
            'sample',
            '-m',
            'empathy/moel',
            '-mf',
            str(model_file),
            '--max-train-steps',
            '6',
            '-vstep',
            '6',
            '-bs',
            '8',
            '--dict-maxtokens',
            '2000',
            '-lstep',
            '1',
            '--oracle-schedule',
            '1e9',
            *map(str, TINY),
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, PARLAI_EMPATHY_ED_DIR=ed_dir, HF_HUB_OFFLINE='1'),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return str(model_file), done.stdout + done.stderr


def test_plain_agent_trains_with_the_references_setup(run_parlai, tmp_path):
    model_file = tmp_path / 'model'
    run_parlai(
        'train_model',
        '-t',
        'empathy_ed_clean',
        '-m',
        'empathy/moel',
        '-mf',
        model_file,
        '--ed-datapath',
        'sample',
        '--max-train-steps',
        2,
        '-vme',
        16,
        '--short-final-eval',
        'true',
        timeout=900,
    )
    saved = json.loads((tmp_path / 'model.opt').read_text())
    expected = {
        'embedding_size': 300,
        'n_layers': 1,
        'n_heads': 2,
        'attention_size': 40,
        'ffn_size': 50,
        'ffn_kernel': 3,
        'top_k': 5,
        'shared_listener': True,
        'oracle_schedule': 10000.0,
        'emotion_loss_weight': 1.0,
        'label_smoothing': 0.1,
        'dict_tokenizer': 'moel',
        'optimizer': 'adam',
        'amsgrad': False,
        'betas': [0.9, 0.98],
        'adam_eps': 1e-9,
        'lr_scheduler': 'invsqrt',
        'warmup_updates': 8000,
        'invsqrt_lr_decay_gamma': 8000,
        'gradient_clip': -1,
        'batchsize': 16,
        'train_experiencer_only': True,
        'validation_every_n_steps': 2000,
        'count_validations_after': 13000,
        'validation_patience': 3,
        'validation_metric': 'ppl',
        'validation_metric_mode': 'min',
        'inference': 'beam',
        'beam_size': 5,
        'beam_stop': 'top',
        'beam_length_penalty': 0.0,
        'max_response_length': 50,
        'embeddings_scale': True,
        'ffn_final_relu': True,
        'reference_tags': True,
        'glove_init': True,
        'save_after_valid': True,
    }
    for key, value in expected.items():
        assert saved[key] == (pytest.approx(value) if isinstance(value, float) else value), (key, saved[key])
    assert saved['learningrate'] == pytest.approx(300**-0.5 * 8000**-0.5)
    assert not saved.get('init_opt'), 'no preset was used'


def test_training_logs_the_oracle_and_the_emotion_loss(tiny):
    _, log = tiny
    assert 'loss_cls' in log and 'emo_acc@5' in log
    # --oracle-schedule 1e9, a report per update: the first batch never has the oracle (the coin is
    # thrown after an update), every later one has it
    lines = log.splitlines()
    shares = [
        float(lines[i + 1].split()[line.split().index('oracle')])
        for i, line in enumerate(lines)
        if 'oracle' in line.split()
    ]
    assert shares[:3] == [0.0, 1.0, 1.0], log[-3000:]


def test_eval_model_and_interactive_show_the_emotion_and_the_listeners(tiny, run_parlai):
    from parlai_empathy.data.emotions import ED_EMOTIONS

    model_file, _ = tiny
    done = run_parlai(
        'eval_model',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-mf',
        model_file,
        '-dt',
        'valid',
        '--num-examples',
        16,
        '--skip-generation',
        'false',
        '--beam-size',
        2,
    )
    assert 'ppl_ex' in done.stdout and 'emo_acc' in done.stdout and 'Traceback' not in done.stderr
    done = run_parlai(
        'interactive',
        '-mf',
        model_file,
        '--skip-generation',
        'false',
        input='My dog died last week and the house is so quiet.\n[EXIT]\n',
    )
    assert 'Traceback' not in done.stderr
    emotions = [
        line.split('[predicted_emotion]:')[1].strip()
        for line in done.stdout.splitlines()
        if '[predicted_emotion]:' in line
    ]
    listeners = [
        line.split('[top_listeners]:')[1].strip() for line in done.stdout.splitlines() if '[top_listeners]:' in line
    ]
    assert len(emotions) == len(listeners) == 1, done.stdout[-3000:]
    assert emotions[0] in ED_EMOTIONS
    ranked = [item.rsplit(' ', 1) for item in listeners[0].split(', ')]
    assert len(ranked) == 5 and {name for name, _ in ranked} <= set(ED_EMOTIONS)  # the top 5, heaviest first
    weights = [float(w) for _, w in ranked]
    assert weights == sorted(weights, reverse=True) and abs(sum(weights) - 1) < 0.03
    assert ranked[0][0] == emotions[0]  # the heaviest listener is the predicted emotion's


def _copy(model_file, folder):
    shutil.copytree(os.path.dirname(model_file), folder)
    return os.path.join(folder, 'model')


def _open(model_file):
    from parlai.core.agents import create_agent_from_model_file

    return create_agent_from_model_file(model_file, {'interactive_mode': True})


def test_a_truncated_opt_file_names_the_file_and_line(tiny, tmp_path):
    from parlai_empathy.integration.safe_loading import ModelFileExit

    model_file = _copy(tiny[0], tmp_path / 'broken')
    text = open(model_file + '.opt').read()
    with open(model_file + '.opt', 'w') as handle:
        handle.write(text[: len(text) // 2])
    with pytest.raises(ModelFileExit) as err:  # a SystemExit: the command ends with the one line
        _open(model_file)
    assert str(err.value).startswith(model_file + '.opt, line ') and 'column' in str(err.value)


def test_pickled_opt_or_weights_are_refused_and_never_run(tiny, tmp_path):
    from parlai_empathy.integration.safe_loading import ModelFileExit, UnsafeModelFile
    from tiny_models import MakesMarker

    marker = str(tmp_path / 'code-ran')
    model_file = _copy(tiny[0], tmp_path / 'pickled_opt')
    with open(model_file + '.opt', 'wb') as handle:
        pickle.dump({'model': 'empathy/moel', 'hook': MakesMarker(marker)}, handle)
    with pytest.raises(ModelFileExit) as err:
        _open(model_file)
    assert isinstance(err.value.error, UnsafeModelFile) and model_file + '.opt' in str(err.value)
    model_file = _copy(tiny[0], tmp_path / 'pickled_weights')
    with open(model_file, 'wb') as handle:
        pickle.dump({'model': MakesMarker(marker)}, handle)
    with pytest.raises(ModelFileExit, match='plain pickle') as err:
        _open(model_file)
    assert isinstance(err.value.error, UnsafeModelFile)
    assert not os.path.exists(marker)


def test_weights_that_do_not_fit_name_the_file(tiny, tmp_path):
    import torch

    from parlai_empathy.integration.safe_loading import ModelFileExit, load_checkpoint

    model_file = _copy(tiny[0], tmp_path / 'foreign')
    states = load_checkpoint(model_file)
    states['model'] = {k: v for k, v in states['model'].items() if '.listeners.3.' not in k}
    torch.save(states, model_file)
    with pytest.raises(ModelFileExit) as err:  # ends the command with the one line
        _open(model_file)
    assert model_file in str(err.value) and 'do not fit the empathy/moel model' in str(err.value)


@pytest.mark.parametrize('field', ['emotion_loss_weight', 'oracle_schedule', 'shared_listener'])
def test_an_opt_missing_a_model_option_ends_with_one_line_naming_file_and_field(tiny, tmp_path, field):
    import json

    from parlai_empathy.integration.safe_loading import ModelFileExit

    model_file = _copy(tiny[0], tmp_path / 'missing')
    opt = json.load(open(model_file + '.opt'))
    del opt[field]
    json.dump(opt, open(model_file + '.opt', 'w'))
    with pytest.raises(ModelFileExit) as err:  # was a KeyError traceback
        _open(model_file)
    assert str(err.value).startswith(f'{model_file}.opt: field "{field}": missing (option --'), str(err.value)
    assert '\n' not in str(err.value)


def test_an_opt_parlai_cannot_upgrade_or_a_huge_dictionary_ends_with_one_line(tiny, tmp_path):
    import json

    from parlai_empathy.integration.safe_loading import ModelFileExit

    model_file = _copy(tiny[0], tmp_path / 'no_beam')
    opt = json.load(open(model_file + '.opt'))
    for key in ('inference', 'beam_size'):  # ParlAI's upgrade_opt asserted beam_size: a traceback
        opt.pop(key, None)
    json.dump(opt, open(model_file + '.opt', 'w'))
    with pytest.raises(ModelFileExit) as err:
        _open(model_file)
    # named by the model_file the .opt records (stock commands override it with the path given)
    assert 'model.opt: field "beam_size": missing' in str(err.value) and '\n' not in str(err.value)
    model_file = _copy(tiny[0], tmp_path / 'sparse_dict')
    with open(model_file + '.dict', 'r+b') as handle:  # 20 GiB that take no disk
        handle.truncate(20 << 30)
    with pytest.raises(ModelFileExit) as err:
        _open(model_file)
    assert str(err.value).startswith(f'{model_file}.dict: 21,474,836,480 bytes, over the cap'), str(err.value)
