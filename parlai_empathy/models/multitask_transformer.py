"""Multi-TR: MIME's baseline and Rashkin et al.'s "Multitask" transformer.

A transformer encoder-decoder whose encoder also classifies the user's emotion from its CTX
state (c = H_0). Built from the same blocks as MIME (embeddings, transformer_blocks), so the two
differ only in what sits between the context encoder and the decoder.

Loss, as MoEL's multitask transformer (the MIME reference's ``trs`` model with ``--multitask``):
response_weight * label-smoothed response loss summed over tokens + emotion_loss_weight * the batch-mean
emotion cross-entropy.
"""

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from parlai_empathy.data.emotions import NUM_EMOTIONS
from parlai_empathy.models.embeddings import DialogueEmbedding, WordEmbedding
from parlai_empathy.models.generator_interface import (
    EmotionReadout,
    EmotionTransformerConfig,
    EncoderStates,
    GeneratorModel,
    build_response_side,
)


@dataclass(frozen=True, kw_only=True)
class MultitaskConfig(EmotionTransformerConfig):
    """Multi-TR's settings: the shared ones alone (MIME's layer sizes, MoEL's loss weights)."""


class MultitaskEncoder(nn.Module):
    """Context -> H, plus the emotion logits from c = H_0 (an :class:`EmotionReadout` as ``aux``)."""

    def __init__(self, words, size, padding_idx=0, n_speakers=2, n_emotions=NUM_EMOTIONS, reference_tags=True):
        super().__init__()
        self.embedding = DialogueEmbedding(
            words, padding_idx, n_speakers, prepend_ctx=True, dropout=size.dropout, reference_tags=reference_tags
        )
        self.context_encoder = size.encoder(input_dim=words.d_model)
        self.classifier = nn.Linear(size.embedding_size, n_emotions)

    def forward(
        self, tokens: torch.Tensor, speakers: Optional[torch.Tensor] = None, emotion: Optional[torch.Tensor] = None
    ) -> EncoderStates:
        """``tokens``/``speakers`` ``[B, S]``; ``emotion`` (gold ids) is not read: the signature is
        MIME's, so that one agent drives both."""
        x, keep = self.embedding(tokens, speakers)
        hidden = self.context_encoder(x, keep)
        logits = self.classifier(hidden[:, 0])
        return EncoderStates(hidden, keep, EmotionReadout(emotion_logits=logits))


class MultitaskTransformer(GeneratorModel):
    """Encoder-decoder + emotion classifier; ParlAI TorchGeneratorModel interface."""

    def __init__(
        self, vocab_size, config: MultitaskConfig = MultitaskConfig(), words=None, padding_idx=0, start_idx=1, end_idx=2
    ):
        super().__init__(padding_idx, start_idx, end_idx)
        self.config = config
        size = config.size
        words = words or WordEmbedding(vocab_size, size.embedding_size, padding_idx)
        self.encoder = MultitaskEncoder(
            words, size, padding_idx, config.n_speakers, reference_tags=config.reference_tags
        )
        self.decoder, self.output = build_response_side(words, vocab_size, size)
        self.cls_weight = config.emotion_loss_weight
        self.response_weight = config.response_weight
        self.init_weights(keep=[words] + self.encoder.embedding.initialised_tags())

    def extra_losses(self, encoder_states: EncoderStates, emotion: torch.Tensor):
        cls = F.cross_entropy(encoder_states.aux.emotion_logits, emotion)
        return self.cls_weight * cls, {'cls': cls.detach()}
