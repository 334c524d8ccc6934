"""``--bf16 true|false|auto`` (``parlai_empathy.models.precision``) and its agents.

``auto`` must equal what the hardware multiplies natively, and an agent must save the resolved
boolean with its model, so that a model records the precision it ran in."""

import argparse
import json

import pytest
import torch

from parlai_empathy.models import precision


def test_the_option_reads_booleans_and_auto():
    for text, value in [
        ('true', True),
        ('True', True),
        ('1', True),
        ('false', False),
        ('0', False),
        ('auto', 'auto'),
        ('AUTO', 'auto'),
        (True, True),
        (False, False),
    ]:
        assert precision.bf16_option(text) == value
    with pytest.raises(argparse.ArgumentTypeError, match='true, false or auto'):
        precision.bf16_option('sometimes')


def test_auto_is_what_the_hardware_multiplies_natively():
    cpu = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert precision.native_bf16() == cpu
    assert precision.resolve_bf16('auto') == cpu
    assert precision.resolve_bf16('auto', use_cuda=True) == bool(
        torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    )
    assert precision.resolve_bf16('true') is True and precision.resolve_bf16(False) is False
    assert precision.resolve_bf16(None) is False


def test_classifier_saves_the_resolved_precision(run_parlai, tmp_path, goemotions_dir):
    model_file = tmp_path / 'model'
    run_parlai(
        'train_model',
        '-t',
        'empathy_goemotions',
        '--goemotions-datapath',
        goemotions_dir,
        '-m',
        'empathy/emotion_classifier',
        '--encoder',
        'offline-minilm',
        '--bf16',
        'auto',
        '-mf',
        model_file,
        '--max-train-steps',
        1,
        '-bs',
        4,
        '-vme',
        8,
        '--short-final-eval',
        'true',
        timeout=900,
    )
    saved = json.loads((tmp_path / 'model.opt').read_text())
    assert saved['bf16'] is precision.native_bf16()
