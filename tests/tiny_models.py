"""Tiny trained models of every agent, made through the real ``parlai train_model`` command.

The chat, prompt and zoo tests talk to real model files (weights, optimizer state, ``.opt``,
dictionary) as users' training runs leave them, only tiny: a few updates on the embedded ED sample,
tiny sizes, a tiny random BERT for the BERT-based agents. Each is trained once per test session.
"""

import os
import pathlib
import subprocess
import sys

from parlai_empathy.files.cache_lock import build_lock

PARLAI = os.path.join(os.path.dirname(sys.executable), 'parlai')
AGENTS = ('bert_ranker', 'mime', 'multitask_transformer', 'moel', 'ethreed', 'emotion_classifier')

COMMON = [
    '--ed-datapath',
    'sample',
    '-bs',
    8,
    '--max-train-steps',
    3,
    '--validation-max-exs',
    16,
    '--short-final-eval',
    'true',
    '-vme',
    10_000,
]
GENERATOR = [
    '-t',
    'empathy_ed_clean',
    '-vmt',
    'ppl',
    '-vmm',
    'min',
    '--skip-generation',
    'true',
    '--dict-maxtokens',
    1500,
    '--glove-init',
    'false',
    '--dropout',
    0,
]
TRANSFORMER = ['--embedding-size', 32, '--attention-size', 16, '--ffn-size', 32, '--n-heads', 2]


def train_args(agent: str, model_file: str, tiny_bert: str = None):
    """``parlai train_model`` arguments for a tiny ``empathy/<agent>``."""
    args = ['train_model', '-m', f'empathy/{agent}', '-mf', model_file] + COMMON
    if agent == 'mime':
        return args + GENERATOR + TRANSFORMER + ['--latent-size', 16]
    if agent in ('multitask_transformer', 'moel'):
        return args + GENERATOR + TRANSFORMER
    if agent == 'ethreed':
        return args + GENERATOR + ['--hidden-size', 16, '--embedding-size', 16, '--listener-emotions', 'none']
    if agent == 'bert_ranker':
        return args + [
            '-t',
            'empathy_ed_clean',
            '--bert-model',
            tiny_bert,
            '--pooling',
            'mean',
            '-vmt',
            'loss',
            '-vmm',
            'min',
            '--eval-candidates',
            'batch',
            '--pool-ed-datapath',
            'sample',
        ]
    if agent == 'emotion_classifier':
        return args + ['-t', 'empathy_ed_emotion', '--encoder', tiny_bert, '--max-length', 32]
    raise ValueError(f'no tiny recipe for {agent!r}; known: {AGENTS}')


def train_tiny(agent: str, folder: str, tiny_bert: str = None) -> str:
    """Train a tiny ``empathy/<agent>`` into ``folder/model``; returns the model file."""
    model_file = os.path.join(folder, 'model')
    done = subprocess.run(
        [PARLAI] + [str(a) for a in train_args(agent, model_file, tiny_bert)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=3600,
        env=dict(os.environ, HF_HUB_OFFLINE='1'),
    )
    assert done.returncode == 0, f'training a tiny {agent} failed:\n{done.stderr[-4000:]}'
    return model_file


def cached_tiny_model(tmp_path_factory, agent: str) -> str:
    """``train_tiny`` once per pytest session (shared by every test file that asks), or once for
    good in ``$PARLAI_EMPATHY_TINY_MODELS`` when that is set (quicker reruns while developing)."""
    keep = os.environ.get('PARLAI_EMPATHY_TINY_MODELS')
    root = pathlib.Path(keep) if keep else tmp_path_factory.getbasetemp() / 'tiny_models'
    folder = root / agent
    # one builder at a time: the xdist workers share $PARLAI_EMPATHY_TINY_MODELS (each has its own
    # basetemp otherwise), and two trainings into one folder would mix their files
    with build_lock(str(folder), f'the tiny {agent} model in {root}'):
        if not (folder / 'done').exists():
            folder.mkdir(parents=True, exist_ok=True)
            tiny_bert = None
            if agent in ('bert_ranker', 'emotion_classifier'):
                from test_emotions_support import make_tiny_bert

                tiny_bert = str(root / 'tiny_bert')
                with build_lock(tiny_bert, f'the tiny BERT in {root}'):
                    if not os.path.isfile(os.path.join(tiny_bert, 'config.json')):
                        make_tiny_bert(tiny_bert)
            train_tiny(agent, str(folder), tiny_bert)
            (folder / 'done').write_text('ok')
    return str(folder / 'model')


STOCK_GENERATOR = [
    '-m',
    'transformer/generator',
    '--n-layers',
    1,
    '--embedding-size',
    16,
    '--ffn-size',
    32,
    '--n-heads',
    2,
    '-t',
    'empathy_ed_clean',
]


class MakesMarker:
    """Unpickling this calls os.mkdir(marker): proof that code from the file ran."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def hostile_stock_model(folder, marker) -> str:
    """A stock ParlAI ``transformer/generator`` folder (its ``.opt`` as ParlAI writes one) whose
    checkpoint, once unpickled as ParlAI's ``TorchAgent.load`` does, creates the folder ``marker``;
    returns its model file."""
    import torch
    from parlai.core.opt import Opt
    from parlai.core.params import ParlaiParser

    os.makedirs(folder, exist_ok=True)
    model_file = os.path.join(str(folder), 'model')
    opt = ParlaiParser(True, True).parse_args([str(a) for a in STOCK_GENERATOR] + ['-mf', model_file])
    machine = ('override', 'parlai_home', 'datapath', 'download_path', 'starttime')
    Opt({k: v for k, v in opt.items() if k not in machine}).save(model_file + '.opt')
    torch.save({'model': {}, 'hook': MakesMarker(str(marker))}, model_file)
    return model_file
