"""``-m empathy/multitask_transformer``: Multi-TR, MIME's baseline (Rashkin et al.'s Multitask).

A transformer encoder-decoder that also classifies the user emotion from its encoder; same
blocks and agent plumbing as MIME (``emotion_generator.EmotionGeneratorAgent``), whose defaults
are the paper's training setup (``-o empathy/multitask_transformer`` only names the model).
"""

from parlai.core.loader import register_agent

from parlai_empathy.agents.emotion_generator import EmotionGeneratorAgent
from parlai_empathy.models.multitask_transformer import MultitaskConfig, MultitaskTransformer


@register_agent('empathy/multitask_transformer')
class MultitaskTransformerAgent(EmotionGeneratorAgent):
    def __init__(self, opt, shared=None):
        super().__init__(opt, shared)
        self.id = 'MultitaskTransformer'

    def build_model(self):
        return self.build_generator(MultitaskTransformer, self.model_config(MultitaskConfig))
