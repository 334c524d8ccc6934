"""The project's training behaviour applies to a loop that trains one of our agents, and only there.

``parlai_empathy.agents.training_loop`` gives the ``TrainLoop`` that builds one of our agents its
own ``validate``, ``_get_time`` and ``train_steps``; ParlAI's ``TrainLoop`` class is never changed,
so a stock agent trains as upstream ParlAI 1.7.2 does with the package installed.
"""
import json
import os
import subprocess
import sys
import textwrap

import torch

from parlai_empathy.agents.training_loop import replay_validations

SITE = os.path.dirname(os.path.dirname(torch.__file__))  # the venv's site-packages

# a stock agent on a stock teacher (its data is generated in code: nothing of ours is involved)
STOCK_RUN = ['train_model', '-t', 'integration_tests:nocandidate', '-m', 'transformer/generator',
             '--n-layers', '1', '--embedding-size', '16', '--ffn-size', '16', '--n-heads', '2',
             '-bs', '4', '--max-train-steps', '5', '-vstep', '2', '-vmt', 'ppl', '-vmm', 'min',
             '--validation-max-exs', '8', '--short-final-eval', 'true', '--skip-generation', 'true',
             '--seed', '0']

# seeded before anything is built, identically in both processes, so the weights can be compared
TRAIN = '''
import sys
{prelude}
import random
import numpy, torch
random.seed(0); numpy.random.seed(0); torch.manual_seed(0); torch.set_num_threads(1)
from parlai.core.script import superscript_main
superscript_main({args!r})
'''

# ParlAI alone: the interpreter starts without site-packages' .pth files (no start-up hook of
# ours); only the version shims ParlAI 1.7.2 cannot run without on this stack are installed
PARLAI_ALONE = f'''
sys.path[:0] = [{SITE!r}]
from parlai_empathy.integration import compat
compat.install()
'''

# the package installed, its agents and teachers imported too
WITH_PACKAGE = '''
import parlai_empathy.agents.mime, parlai_empathy.agents.bert_ranker, parlai_empathy.tasks.ed
'''


def _train(tmp_path, name, isolated):
    model_file = tmp_path / name / 'model'
    code = TRAIN.format(prelude=PARLAI_ALONE if isolated else WITH_PACKAGE,
                        args=STOCK_RUN + ['-mf', str(model_file), '-dp', str(tmp_path / 'data')])
    command = [sys.executable] + (['-S'] if isolated else []) + ['-c', textwrap.dedent(code)]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS='1', HF_HUB_OFFLINE='1'))
    assert done.returncode == 0, done.stderr[-4000:]
    with open(str(model_file) + '.trainstats') as f:
        stats = json.load(f)
    weights = torch.load(str(model_file), map_location='cpu', weights_only=True)['model']
    return stats, weights, done.stdout + done.stderr


def test_a_stock_agent_trains_as_with_parlai_alone(tmp_path):
    alone, alone_weights, alone_log = _train(tmp_path, 'alone', isolated=True)
    ours, our_weights, our_log = _train(tmp_path, 'installed', isolated=False)
    # ParlAI 1.7.2's own schedule: validations at 2 and 4 updates; the last stretch (to 5) is not
    # validated (the project's loop would validate it), and nothing of ours is logged
    assert [r['train_steps'] for r in alone['valid_reports']] == [2, 4]
    assert [r['train_steps'] for r in ours['valid_reports']] == [2, 4]
    for key in ('train_steps', 'parleys', 'best_valid', 'impatience'):
        assert ours[key] == alone[key], key
    assert [r['ppl'] for r in ours['valid_reports']] == [r['ppl'] for r in alone['valid_reports']]
    # the same best model file, bit for bit
    assert our_weights.keys() == alone_weights.keys()
    assert all(torch.equal(our_weights[k], alone_weights[k]) for k in our_weights)
    assert 'validating its last weights' not in our_log


def test_parlai_train_loop_class_is_never_changed():
    code = '''
    import parlai_empathy.agents.mime, parlai_empathy.agents.ethreed, parlai_empathy.agents.emotion_classifier
    from parlai.scripts import train_model
    from parlai.core import agents
    from parlai_empathy.integration import startup
    startup.arm()
    loop = train_model.TrainLoop
    print(all(getattr(loop, name).__module__ == 'parlai.scripts.train_model'
              for name in ('__init__', 'validate', '_get_time', 'train_steps', 'train')),
          agents.compare_init_model_opts.__module__)
    '''
    done = subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ['True', 'parlai.core.agents']


def test_the_start_up_hook_repairs_only_the_listed_modules():
    code = '''
    import parlai.scripts.train_model, parlai.scripts.multiprocessing_train, parlai.core.torch_generator_agent
    from parlai_empathy.integration import compat
    print(' '.join(sorted(compat._REPAIRS)))
    '''
    done = subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == sorted([
        'parlai.core.dict', 'parlai.nn.lr_scheduler',  # version shims
        'parlai.utils.distributed', 'parlai.core.torch_ranker_agent', 'parlai.core.torch_generator_agent',  # CPU
        'parlai.core.opt', 'parlai.core.params',  # loading: JSON .opt, model trust check
    ])


def test_replay_validations_follows_train_loop_bookkeeping():
    reports = [{'train_steps': s, 'ppl': p, 'acc': a}
               for s, p, a in [(1000, 50.0, 0.1), (2000, 40.0, 0.3), (3000, 41.0, 0.2), (4000, 42.0, 0.25)]]
    assert replay_validations(reports, 'ppl', -1) == (40.0, 2)
    assert replay_validations(reports, 'acc', 1) == (0.3, 2)
    # --count-validations-after: validations at or before it start the bookkeeping afresh
    assert replay_validations(reports, 'ppl', -1, count_after=2000) == (41.0, 1)
    assert replay_validations(reports, 'ppl', -1, count_after=4000) == (None, 0)
    assert replay_validations(reports + [{'train_steps': 5000}], 'ppl', -1) is None


def test_seed_fixes_the_initial_weights_too(run_parlai, tmp_path):
    """``--seed`` is set before the model is built (ParlAI 1.7.2 seeds after), so two runs with
    the same seed train the same weights and another seed trains others."""
    from parlai_empathy.integration.safe_loading import load_checkpoint

    def weights(name, seed):
        model_file = tmp_path / name / 'model'
        run_parlai('train_model', '-t', 'empathy_ed_clean', '--ed-datapath', 'sample', '-m', 'empathy/mime',
                   '-mf', model_file, '--embedding-size', 16, '--attention-size', 8, '--ffn-size', 16,
                   '--latent-size', 8, '--n-heads', 2, '--glove-init', 'false', '-bs', 4, '--max-train-steps', 2,
                   '-vme', 8, '--short-final-eval', 'true', '--skip-generation', 'true', '--seed', seed)
        return load_checkpoint(str(model_file))['model']

    first, again, other = weights('a', 5), weights('b', 5), weights('c', 6)
    assert first.keys() == again.keys() == other.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)


def test_a_schedule_that_ends_by_its_linear_learning_rate_is_validated_at_its_end(run_parlai, tmp_path):
    """ParlAI's linear schedule ends training by an exception out of the world's parley, before the
    loop's budget check and its validation: the last stretch was trained and thrown away (the model
    stayed the last validated one). Its end is validated too, and a better end becomes the model."""
    model_file = tmp_path / 'model'
    done = run_parlai('train_model', '-t', 'empathy_ed_clean', '--ed-datapath', 'sample', '-m', 'empathy/mime',
                      '-mf', model_file, '--embedding-size', 16, '--attention-size', 8, '--ffn-size', 16,
                      '--latent-size', 8, '--n-heads', 2, '--glove-init', 'false', '-bs', 4, '-lr', 1e-3,
                      '--lr-scheduler', 'linear', '--warmup-updates', 0, '--max-train-steps', 6, '-vstep', 4,
                      '-vme', 8, '-vmt', 'ppl', '-vmm', 'min', '--short-final-eval', 'true',
                      '--skip-generation', 'true')
    log = done.stdout + done.stderr
    assert 'End of Linear LR Schedule' in log
    assert 'the training schedule ends at 6 updates: validating its last weights' in log
    stats = json.loads((tmp_path / 'model.trainstats').read_text())
    assert [report['total_train_updates'] for report in stats['valid_reports']] == [4, 6]
