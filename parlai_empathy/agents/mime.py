"""``-m empathy/mime``: MIME (Majumder et al., EMNLP 2020) as a ParlAI TorchGeneratorAgent.

The model is ``parlai_empathy.models.mime.Mime``; the shared agent plumbing (speaker ids,
emotion field, the reference's loss, perplexities, emo_acc, reply fields) is
``emotion_generator.EmotionGeneratorAgent``. Plain ``-m empathy/mime`` trains with the paper's
setup (Adam under the Noam schedule, peak lr 6.455e-4, batch 16, beam 5): see that module.
"""

from parlai.core.loader import register_agent

from parlai_empathy.agents.config_options import add_config_options
from parlai_empathy.agents.emotion_generator import EmotionGeneratorAgent
from parlai_empathy.agents.generator_common import record_response_metrics
from parlai_empathy.models.generator_interface import EmotionTransformerConfig
from parlai_empathy.models.mime import Mime, MimeConfig


@register_agent('empathy/mime')
class MimeAgent(EmotionGeneratorAgent):
    @classmethod
    def add_cmdline_args(cls, parser, partial_opt=None):
        super().add_cmdline_args(parser, partial_opt=partial_opt)
        group = parser.add_argument_group('MIME')
        # MimeConfig's own fields (the shared ones are the base agent's options)
        add_config_options(group, MimeConfig, inherited=EmotionTransformerConfig)
        # the reference's main.py: `if config.model == "mimic" and n_iter < 10000: continue` before
        # its best-PPL / patience bookkeeping (so its first counted validation is after 11,000)
        # its early stopping reads the valid PPL of train_one_batch(train=False), which samples the
        # emotion groups with the gold label (batch['program_label']): our gold-polarity PPL
        parser.set_defaults(count_validations_after=10000, validation_metric='ppl_ex_gold')
        return parser

    def __init__(self, opt, shared=None):
        super().__init__(opt, shared)
        self.id = 'Mime'

    def record_extra_eval_metrics(self, batch, gold):
        """``ppl_gold``/``ppl_ex_gold``: the response scored with the gold user polarity, as the
        reference computes its perplexity (it generates with the predicted polarity, as here).
        Returns the predicted polarity's encoder states, read from the same context encoding."""
        gold_states, predicted_states = self.core_model.gold_and_predicted_states(
            batch.text_vec, batch.get('speaker_vec'), gold
        )
        response, _, _ = self.model(batch.text_vec, ys=batch.label_vec, prev_enc=gold_states, loss_smoothing=0.0)
        record_response_metrics(self, response, suffix='_gold')
        return predicted_states

    def build_model(self):
        return self.build_generator(Mime, self.model_config(MimeConfig))
