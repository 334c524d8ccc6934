"""An emotion classifier: a pretrained transformer encoder with one linear head.

It follows the GoEmotions paper's BERT baseline (Demszky et al., 2020, Sec. 5): the pooled
encoding, dropout 0.1 and a dense layer with one logit per emotion. Multi-label tasks
(GoEmotions) use a sigmoid per label and binary cross-entropy, and predict every label whose
probability passes a threshold (0.3 in the paper); single-label tasks (the ED 32-way emotion)
use a softmax and cross-entropy. Encoder loading and pooling are shared with the bi-encoder.

Nothing here imports ParlAI.
"""

from typing import List, Sequence

import torch
from torch import nn

from parlai_empathy.models.bi_encoder import PooledEncoder, load_encoder

DEFAULT_THRESHOLD = 0.3


class EmotionClassifier(nn.Module):
    def __init__(
        self, transformer: nn.Module, num_classes: int, multilabel: bool, pooling: str = 'cls', dropout: float = 0.1
    ):
        super().__init__()
        if getattr(transformer, 'pooler', None) is not None:
            # BERT's pooler is unused (we pool ourselves); dropping it keeps the saved state
            # identical whether the encoder came from pretrained weights or from a config.
            transformer.pooler = None
        self.encoder = PooledEncoder(transformer, pooling)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(self.encoder.output_dim, num_classes)
        self.multilabel = multilabel

    @classmethod
    def from_pretrained(
        cls, name_or_dir: str, num_classes: int, multilabel: bool, pooling: str = 'cls'
    ) -> 'EmotionClassifier':
        return cls(load_encoder(name_or_dir), num_classes, multilabel, pooling)

    @classmethod
    def from_config(cls, config, num_classes: int, multilabel: bool, pooling: str = 'cls') -> 'EmotionClassifier':
        """Randomly initialised weights of the right shapes, to load a trained state dict into."""
        from transformers import AutoModel

        return cls(AutoModel.from_config(config), num_classes, multilabel, pooling)

    @property
    def config(self):
        return self.encoder.transformer.config

    def forward(self, token_ids: torch.LongTensor, mask: torch.Tensor) -> torch.Tensor:
        """Logits ``[batch, num_classes]``."""
        return self.head(self.dropout(self.encoder(token_ids, mask)))

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-example loss: BCE averaged over labels (multi-hot targets) or CE (class ids)."""
        if self.multilabel:
            return nn.functional.binary_cross_entropy_with_logits(logits, targets.float(), reduction='none').mean(1)
        return nn.functional.cross_entropy(logits, targets, reduction='none')

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(logits) if self.multilabel else torch.softmax(logits, dim=-1)


def multi_hot(label_lists: Sequence[Sequence[int]], num_classes: int) -> torch.Tensor:
    targets = torch.zeros(len(label_lists), num_classes)
    for row, ids in enumerate(label_lists):
        targets[row, list(ids)] = 1.0
    return targets


def decide(probs: torch.Tensor, multilabel: bool, threshold: float = DEFAULT_THRESHOLD) -> List[List[int]]:
    """Predicted class ids per row: all labels over ``threshold`` (multi-label), else the argmax.

    A multi-label row with nothing over the threshold gets no labels, as in the paper's
    evaluation; callers that need a label can fall back to the argmax themselves.
    """
    if not multilabel:
        return [[i] for i in probs.argmax(-1).tolist()]
    return [row.nonzero().flatten().tolist() for row in probs >= threshold]


def f1_counts(predicted: torch.Tensor, gold: torch.Tensor):
    """Per-class true-positive, false-positive and false-negative counts of two multi-hot tensors."""
    predicted, gold = predicted.bool(), gold.bool()
    tp = (predicted & gold).sum(0)
    fp = (predicted & ~gold).sum(0)
    fn = (~predicted & gold).sum(0)
    return tp.tolist(), fp.tolist(), fn.tolist()
