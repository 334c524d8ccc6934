"""The project's training behaviour applies to a loop that trains one of our agents, and only there.

``parlai train_model`` builds the loop the agent's class names: for our agents
``parlai_empathy.agents.training_loop.EmpathyTrainLoop`` (a subclass of ParlAI's ``TrainLoop``),
for a stock agent ParlAI's ``TrainLoop`` itself. No class of ParlAI changes, so a stock agent
trains as upstream ParlAI 1.7.2 does with the package installed. Each change of the loop has its
own test where its agent is tested (``tests/test_agents_mime.py``) or below.
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
STOCK_RUN = [
    'train_model',
    '-t',
    'integration_tests:nocandidate',
    '-m',
    'transformer/generator',
    '--n-layers',
    '1',
    '--embedding-size',
    '16',
    '--ffn-size',
    '16',
    '--n-heads',
    '2',
    '-bs',
    '4',
    '--max-train-steps',
    '5',
    '-vstep',
    '2',
    '-vmt',
    'ppl',
    '-vmm',
    'min',
    '--validation-max-exs',
    '8',
    '--short-final-eval',
    'true',
    '--skip-generation',
    'true',
    '--seed',
    '0',
]

# seeded before anything is built, identically in both processes, so the weights can be compared
TRAIN = """
import sys
{prelude}
import random
import numpy, torch
random.seed(0); numpy.random.seed(0); torch.manual_seed(0); torch.set_num_threads(1)
from parlai.core.script import superscript_main
superscript_main({args!r})
"""

# ParlAI alone: the interpreter starts without site-packages' .pth files (no start-up hook of
# ours); only the version shims ParlAI 1.7.2 cannot run without on this stack are installed
PARLAI_ALONE = f"""
sys.path[:0] = [{SITE!r}]
from parlai_empathy.integration import compat
compat.install()
"""

# the package installed, its agents and teachers imported too
WITH_PACKAGE = """
import parlai_empathy.agents.mime, parlai_empathy.agents.bert_ranker, parlai_empathy.tasks.ed
"""


def _train(tmp_path, name, isolated):
    model_file = tmp_path / name / 'model'
    code = TRAIN.format(
        prelude=PARLAI_ALONE if isolated else WITH_PACKAGE,
        args=STOCK_RUN + ['-mf', str(model_file), '-dp', str(tmp_path / 'data')],
    )
    command = [sys.executable] + (['-S'] if isolated else []) + ['-c', textwrap.dedent(code)]
    done = subprocess.run(
        command,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, OMP_NUM_THREADS='1', HF_HUB_OFFLINE='1'),
    )
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


# a tiny MIME on the embedded sample: the command every run of ours here starts with
TINY_MIME = [
    'train_model',
    '-t',
    'empathy_ed_clean',
    '--ed-datapath',
    'sample',
    '-m',
    'empathy/mime',
    '--embedding-size',
    '16',
    '--attention-size',
    '8',
    '--ffn-size',
    '16',
    '--latent-size',
    '8',
    '--n-heads',
    '2',
    '--glove-init',
    'false',
    '-bs',
    '4',
]

# a tiny MIME on the embedded sample, two validations and the end of its schedule
OUR_RUN = [
    *TINY_MIME,
    '--max-train-steps',
    '5',
    '-vstep',
    '2',
    '-vmt',
    'ppl',
    '-vmm',
    'min',
    '-vme',
    '8',
    '--short-final-eval',
    'true',
    '--skip-generation',
    'true',
    '--seed',
    '0',
]

# Runs ``train_model`` commands in this process as the ``parlai`` command does (the class ParlAI's
# script registry holds for it) and prints what ParlAI's classes and the runs' objects are after each
STATE_AFTER_RUNS = '''
import inspect, json, sys, types
{prelude}
import parlai.core.agents, parlai.core.torch_agent, parlai.core.torch_generator_agent, parlai.core.worlds
import parlai.scripts.train_model, parlai.utils.fsdp, parlai.utils.logging
from parlai.core.script import SCRIPT_REGISTRY, setup_script_registry
MODULES = [parlai.core.agents, parlai.core.torch_agent, parlai.core.torch_generator_agent, parlai.core.worlds,
           parlai.scripts.train_model, parlai.utils.fsdp, parlai.utils.logging]

def code(value):
    return value.__func__ if isinstance(value, (classmethod, staticmethod)) else value

def snapshot():
    """Every function and class of those modules, and every method of each class (the object)."""
    found = {{}}
    for module in MODULES:
        for name, value in vars(module).items():
            if inspect.isfunction(value) or isinstance(value, type):
                found[f'{{module.__name__}}.{{name}}'] = value
            if isinstance(value, type) and value.__module__ == module.__name__:
                for attr, member in vars(value).items():
                    if callable(code(member)) or isinstance(member, property):
                        found[f'{{module.__name__}}.{{name}}.{{attr}}'] = code(member)
    return found

def run(args):
    if {registry}:  # what the parlai command runs; ParlAI alone: its TrainModel
        setup_script_registry()
    command = SCRIPT_REGISTRY['train_model'].klass if {registry} else parlai.scripts.train_model.TrainModel
    parser = command.setup_args()
    script = command(parser.parse_args(args[1:]))  # after the command's name
    script.parser = parser
    script.run()
    return script.train_loop

def own_methods(obj):
    """Functions and bound methods set on the instance (a module it holds, such as the model, is none)."""
    return sorted(name for name, value in vars(obj).items()
                  if isinstance(value, (types.FunctionType, types.MethodType, types.BuiltinMethodType)))

before = snapshot()
runs = {{}}
for name, args in {runs!r}:
    loop = run(args)
    now = snapshot()
    runs[name] = {{
        'changed': sorted(key for key in before if now.get(key) is not before[key]),
        'added': sorted(set(now) - set(before)),
        'loop': type(loop).__module__ + '.' + type(loop).__qualname__,
        'loop_own_methods': own_methods(loop),
        'loop_attributes': sorted(vars(loop)),
        'agent_own_methods': own_methods(loop.agent),
        'agent_attributes': sorted(vars(loop.agent)),
        'logger_filters': len(parlai.utils.logging.logger.filters),
    }}
print('STATE', json.dumps(runs))
'''


def _state_after_runs(tmp_path, runs, isolated):
    tmp_path.mkdir(exist_ok=True)
    code = STATE_AFTER_RUNS.format(
        prelude=PARLAI_ALONE if isolated else '',
        registry=not isolated,
        runs=[
            (name, args + ['-mf', str(tmp_path / name / 'model'), '-dp', str(tmp_path / 'data')]) for name, args in runs
        ],
    )
    command = [sys.executable] + (['-S'] if isolated else []) + ['-c', textwrap.dedent(code)]
    done = subprocess.run(
        command,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, OMP_NUM_THREADS='1', HF_HUB_OFFLINE='1'),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith('STATE ')]
    return json.loads(line[len('STATE ') :])


def test_parlai_is_as_upstream_left_it_after_our_run_and_a_stock_run(tmp_path):
    """One process trains a tiny MIME with ``parlai train_model``, then a stock agent. After each,
    every function and class of ParlAI's agent, world, training and logging modules, and every
    method of those classes, is the object it was before the first run (nothing replaced, nothing
    added), and ParlAI's logger holds no filter. No loop or agent holds a method of its own on the
    instance: our loop's changes are methods of its class. The stock run's loop and agent are
    ParlAI's and hold exactly the attributes they hold when ParlAI alone runs the same command."""
    state = _state_after_runs(tmp_path, [('ours', OUR_RUN), ('stock', STOCK_RUN)], isolated=False)
    alone = _state_after_runs(tmp_path / 'alone', [('stock', STOCK_RUN)], isolated=True)['stock']
    for name in ('ours', 'stock'):
        run = state[name]
        assert run['changed'] == [] and run['added'] == [], (name, run['changed'], run['added'])
        assert run['logger_filters'] == 0, name
        assert run['loop_own_methods'] == [] and run['agent_own_methods'] == [], name
    assert state['ours']['loop'] == 'parlai_empathy.agents.training_loop.EmpathyTrainLoop'
    assert state['stock']['loop'] == alone['loop'] == 'parlai.scripts.train_model.TrainLoop'
    assert state['stock']['loop_attributes'] == alone['loop_attributes']
    assert state['stock']['agent_attributes'] == alone['agent_attributes']


def test_the_start_up_hook_repairs_only_the_listed_modules():
    code = """
    import parlai.scripts.train_model, parlai.scripts.multiprocessing_train, parlai.core.torch_generator_agent
    from parlai_empathy.integration import compat
    print(' '.join(sorted(compat._REPAIRS)))
    """
    done = subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == sorted(
        [
            'parlai.core.dict',
            'parlai.nn.lr_scheduler',  # version shims
            'parlai.utils.distributed',
            'parlai.core.torch_ranker_agent',
            'parlai.core.torch_generator_agent',  # CPU
            'parlai.core.opt',
            'parlai.core.params',  # loading: JSON .opt, model trust check
        ]
    )


def test_replay_validations_follows_train_loop_bookkeeping():
    reports = [
        {'train_steps': s, 'ppl': p, 'acc': a}
        for s, p, a in [(1000, 50.0, 0.1), (2000, 40.0, 0.3), (3000, 41.0, 0.2), (4000, 42.0, 0.25)]
    ]
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
        run_parlai(
            *TINY_MIME,
            '-mf',
            model_file,
            '--max-train-steps',
            2,
            '-vme',
            8,
            '--short-final-eval',
            'true',
            '--skip-generation',
            'true',
            '--seed',
            seed,
        )
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
    done = run_parlai(
        *TINY_MIME,
        '-mf',
        model_file,
        '-lr',
        1e-3,
        '--lr-scheduler',
        'linear',
        '--warmup-updates',
        0,
        '--max-train-steps',
        6,
        '-vstep',
        4,
        '-vme',
        8,
        '-vmt',
        'ppl',
        '-vmm',
        'min',
        '--short-final-eval',
        'true',
        '--skip-generation',
        'true',
    )
    log = done.stdout + done.stderr
    assert 'End of Linear LR Schedule' in log
    assert 'the training schedule ends at 6 updates: validating its last weights' in log
    stats = json.loads((tmp_path / 'model.trainstats').read_text())
    assert [report['total_train_updates'] for report in stats['valid_reports']] == [4, 6]
