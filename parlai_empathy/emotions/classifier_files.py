"""Loading a trained ``empathy/emotion_classifier`` for batch inference, without ParlAI.

The agent saves ``<model_file>`` (ParlAI's torch state: ``model`` holds the weights),
``<model_file>.opt`` (JSON: classes, mode, threshold, max length, pooling) and
``<model_file>.hf/`` (tokenizer and encoder config). That is all tagging needs.
"""

import hashlib
import json
import os
from dataclasses import dataclass
from typing import List

import torch

from parlai_empathy.data.file_errors import DataFileError, DataSourceError, decode_line, read_lines
from parlai_empathy.files.bounded import open_regular
from parlai_empathy.integration.safe_loading import ModelFileError, parse_opt_text
from parlai_empathy.models.bi_encoder import load_tokenizer
from parlai_empathy.models.emotion_classifier import DEFAULT_THRESHOLD, EmotionClassifier


def decision_threshold(opt: dict):
    """The tuned per-class thresholds (``parlai empathy_tune_thresholds``) under the default
    ``threshold_scheme`` 'tuned', else the single ``multilabel_threshold``."""
    tuned = opt.get('multilabel_thresholds')
    if tuned and opt.get('threshold_scheme', 'tuned') == 'tuned':
        return [float(t) for t in tuned]
    return float(opt.get('multilabel_threshold', DEFAULT_THRESHOLD))


class ClassifierFilesError(DataSourceError, FileNotFoundError):
    """A path that is not a trained emotion classifier."""


@dataclass
class LoadedClassifier:
    model: EmotionClassifier
    tokenizer: object
    classes: List[str]
    multilabel: bool
    threshold: object  # one float, or one float per class (tuned on dev)
    max_length: int
    key: str  # sha256 of the weights file and the decision settings

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id


def classifier_key(model_file: str, classes, multilabel: bool, threshold: float, max_length: int) -> str:
    digest = hashlib.sha256()
    with open_regular(model_file, 'a checkpoint', 'checkpoint_bytes') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            digest.update(chunk)
    digest.update(json.dumps([list(classes), multilabel, threshold, max_length]).encode('utf-8'))
    return digest.hexdigest()


def _read_opt(path: str, hint: str) -> dict:
    """A ``.opt`` file's options; one that is not UTF-8 JSON of an object names file and line."""
    try:
        text = ''.join(decode_line(raw, path, n) for n, raw in read_lines(path, 'ParlAI .opt (JSON)'))
    except DataFileError as err:
        raise ClassifierFilesError(f'{err}; not a ParlAI .opt file ({hint})') from None
    if not text.strip():
        raise ClassifierFilesError(f'{path}: empty file; not a ParlAI .opt file ({hint})')
    try:
        return parse_opt_text(text, path)
    except ModelFileError as err:
        raise ClassifierFilesError(f'{err} ({hint})') from None


def read_settings(model_file: str) -> dict:
    """Classes and decision settings of a trained classifier, from its ``.opt`` file."""
    hint = 'train one with `parlai train_model -t empathy_goemotions -m empathy/emotion_classifier -mf FILE`'
    for needed in (model_file, model_file + '.opt', os.path.join(model_file + '.hf', 'config.json')):
        if not os.path.exists(needed):
            raise ClassifierFilesError(
                f'{needed} is missing: {model_file!r} is not a trained emotion classifier ({hint})'
            )
    opt = _read_opt(model_file + '.opt', hint)
    if not opt.get('classes'):
        raise ClassifierFilesError(f'{model_file}.opt has no "classes": not an emotion classifier ({hint})')
    settings = dict(
        classes=list(opt['classes']),
        multilabel=bool(opt.get('multilabel')),
        threshold=decision_threshold(opt),
        max_length=int(opt.get('max_length', 50)),
        pooling=opt.get('pooling', 'cls'),
    )
    settings['key'] = classifier_key(
        model_file, settings['classes'], settings['multilabel'], settings['threshold'], settings['max_length']
    )
    return settings


def default_device() -> str:
    """Where batch inference runs by default: the GPU when there is one (tagging all of ED takes
    seconds there, minutes on CPU cores)."""
    return 'cuda' if torch.cuda.is_available() else 'cpu'


def load_classifier(model_file: str, device: str = 'cpu') -> LoadedClassifier:
    from transformers import AutoConfig

    settings = read_settings(model_file)
    classes, multilabel = settings['classes'], settings['multilabel']
    model = EmotionClassifier.from_config(
        AutoConfig.from_pretrained(model_file + '.hf'), len(classes), multilabel, settings['pooling']
    )
    try:
        states = torch.load(model_file, map_location='cpu', weights_only=True)
        weights = states['model']
    except Exception as err:  # a truncated, foreign or garbage file: name it, not torch's internals
        raise ClassifierFilesError(
            f'{model_file}: not the weights of a trained emotion classifier ({type(err).__name__}: {str(err)[:200]})'
        ) from None
    model.load_state_dict(weights)
    model.to(device).eval()
    return LoadedClassifier(
        model=model,
        tokenizer=load_tokenizer(model_file + '.hf'),
        classes=classes,
        multilabel=multilabel,
        threshold=settings['threshold'],
        max_length=settings['max_length'],
        key=settings['key'],
    )
