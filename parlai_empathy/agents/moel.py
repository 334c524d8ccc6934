"""``-m empathy/moel``: MoEL (Lin et al., EMNLP 2019) as a ParlAI TorchGeneratorAgent.

The model is ``parlai_empathy.models.moel.Moel``; the shared agent plumbing (speaker ids, emotion
field, the reference's loss, perplexities, emo_acc, reply fields) is
``emotion_generator.EmotionGeneratorAgent``, whose defaults are the training setup MoEL's reference
shares with MIME's (plain Adam under the Noam schedule of ``NoamOpt(300, 1, 8000)``, peak lr
6.455e-4, batch 16, label smoothing 0.1, no gradient clipping, beam 5 with the reference's stopping
rule, at most 50 tokens). What MoEL's ``main.py`` does otherwise is set here:

* validation every 2,000 updates (its ``check_iter``), and none counted for the best figure or the
  patience before 14,000 (``if config.model == "experts" and n_iter < 13000: continue``, n_iter
  0-based: ``--count-validations-after 13000``); patience 3 (it stops when ``patient > 2``);
* the early-stopping figure is ParlAI's token-weighted ``ppl``: the reference's validation
  perplexity is exp of the mean over batches of 16 of each batch's token-mean NLL, which is the
  token-weighted figure up to how the batches fall (``ppl_ex``, the mean over single examples, is
  what its test pass prints, at batch size 1);
* the scheduled oracle (``--oracle-schedule``, ``MoelConfig``): the coin for the batch after
  update n comes up with ``oracle_probability(n)``; ``oracle`` (logged) is the share of training
  batches decoded with the gold emotion's listener. Evaluation never uses it (a deviation: see
  the model's module).

Every reply carries ``predicted_emotion`` (the argmax of the emotion logits), ``emotion_polarity``
(its polarity) and ``top_listeners``: the listeners the meta listener weighs for this reply,
heaviest first (``sad 0.62, lonely 0.21, ...``); ``parlai interactive`` shows the emotion and the
listeners by default.
"""

import random

from parlai.core.loader import register_agent
from parlai.core.metrics import AverageMetric

from parlai_empathy.agents.config_options import add_config_options
from parlai_empathy.agents.emotion_generator import EmotionGeneratorAgent
from parlai_empathy.data.emotions import ED_EMOTIONS
from parlai_empathy.models.generator_interface import EmotionTransformerConfig
from parlai_empathy.models.moel import Moel, MoelConfig, oracle_probability


def top_listeners(weights) -> str:
    """``'sad 0.62, lonely 0.21'``: the listeners of nonzero weight (one row of p), heaviest first."""
    ranked = sorted(((w, i) for i, w in enumerate(weights) if w > 0), reverse=True)
    return ', '.join(f'{ED_EMOTIONS[i]} {w:.2f}' for w, i in ranked)


@register_agent('empathy/moel')
class MoelAgent(EmotionGeneratorAgent):
    display_fields = ('predicted_emotion', 'top_listeners')  # shown by parlai interactive
    OPT_MIGRATIONS = {}  # every MoEL model was saved with the options the base table fills for MIME's

    @classmethod
    def add_cmdline_args(cls, parser, partial_opt=None):
        super().add_cmdline_args(parser, partial_opt=partial_opt)
        group = parser.add_argument_group('MoEL')
        # MoelConfig's own fields (the shared ones are the base agent's options)
        add_config_options(group, MoelConfig, inherited=EmotionTransformerConfig)
        parser.set_defaults(validation_every_n_steps=2000, count_validations_after=13000, validation_metric='ppl')
        return parser

    def __init__(self, opt, shared=None):
        super().__init__(opt, shared)
        self.id = 'Moel'

    def build_model(self):
        return self.build_generator(Moel, self.model_config(MoelConfig))

    def _model_input(self, batch):
        tokens, speakers, gold = super()._model_input(batch)
        return tokens, speakers, gold, self._oracle_coin(gold)

    def _oracle_coin(self, gold):
        """The reference's coin for this training batch: thrown after the previous update, with
        that update's :func:`oracle_probability` (never before the first update)."""
        if gold is None or not self.model.training:
            return False
        updates = self._number_training_updates
        chance = oracle_probability(updates - 1, self.opt['oracle_schedule']) if updates else 0.0
        oracle = random.random() < chance
        self.record_local_metric('oracle', AverageMetric.many([float(oracle)] * len(gold)))
        return oracle

    def add_readout_fields(self, output, readout):
        super().add_readout_fields(output, readout)
        output['top_listeners'] = [top_listeners(row) for row in readout.listener_weights.tolist()]
