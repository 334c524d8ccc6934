"""What the project's generators (MIME and Multi-TR, ETHREED) share in their ParlAI agents.

MIME's agent (through :mod:`emotion_generator`, its base with Multi-TR's) and ETHREED's import
these from here, so neither agent module imports the other's: the MoEL dictionary, the response
metrics every generator records, and the start-up warning about a word table that is not the
paper's.
"""

from parlai.core.dict import DictionaryAgent
from parlai.core.metrics import AverageMetric
from parlai.core.torch_generator_agent import PPLMetric
from parlai.utils.misc import warn_once

from parlai_empathy.data.moel_text import moel_tokens
from parlai_empathy.files.cache_lock import atomic_save_as
from parlai_empathy.models import glove

PAPER_GLOVE_DIM = 300


def warn_unless_papers_word_table(model, paper_file, glove_path, glove_dim, d_model, glove_fit='pad'):
    """One start-up warning when a fresh word table starts from other vectors than the paper's
    (GloVe of ``paper_file``, 300-d): which file, its width against the embedding size, and the
    option that gives the paper's. The offline default (6B 50d, padded to 300 with random
    columns) trains, but is not "the paper's settings" however every other option is set."""
    if glove.is_word_table(glove_path):
        warn_once(
            f"{model}: the word table is not the paper's. The paper starts from {PAPER_GLOVE_DIM}-d GloVe "
            f'({paper_file}); this run from {glove.source_name(glove_path)}, a substitute built offline.'
        )
        return
    if glove_dim == PAPER_GLOVE_DIM:
        return
    if glove_fit == 'project':
        fit = f'mapped to the {d_model}-d embedding by a learned projection'
    elif glove_dim < d_model:
        fit = f'padded to the {d_model}-d embedding: {d_model - glove_dim} of its {d_model} columns start random'
    elif glove_dim > d_model:
        fit = f'cut to the {d_model}-d embedding'
    else:
        fit = f'as wide as the {d_model}-d embedding'
    warn_once(
        f"{model}: the word table is not the paper's. The paper starts from {PAPER_GLOVE_DIM}-d GloVe "
        f'({paper_file}); this run from {glove.source_name(glove_path)}: {glove_dim}-d vectors, '
        f"{fit}. For the paper's word table pass --glove-path /path/to/{paper_file} (any "
        f'{PAPER_GLOVE_DIM}-d GloVe text file, with --embedding-size {PAPER_GLOVE_DIM}).'
    )


class MoelDictionaryAgent(DictionaryAgent):
    """ParlAI's dictionary with ``--dict-tokenizer moel``: MoEL's tokens (see ``moel_text``)."""

    @staticmethod
    def moel_tokenize(text):
        return moel_tokens(text)

    def save(self, filename=None, append=False, sort=True):
        """ParlAI's save through temporary files: ParlAI writes the dictionary and its ``.opt`` in
        place, and a half-written dictionary left by a killed run counts as built from then on."""
        filename = self.opt['dict_file'] if filename is None else filename
        if append:
            return super().save(filename, append=True, sort=sort)
        parent = super()
        atomic_save_as(filename, lambda name: parent.save(name, sort=sort), sidecars=('.opt', '.codecs'))


def record_response_metrics(agent, response, suffix=''):
    """ParlAI's generator metrics (loss, ppl, token_acc, token_em) and ``ppl_ex`` from a
    :class:`~parlai_empathy.models.generator_interface.ResponseLoss`."""
    nll, tokens = response.nll.detach().float().cpu(), response.tokens.detach().float().cpu()
    correct = response.correct.detach().float().cpu()
    if not suffix:
        agent.record_local_metric('loss', AverageMetric.many(nll, tokens))
        agent.record_local_metric('token_acc', AverageMetric.many(correct, tokens))
        agent.record_local_metric('token_em', AverageMetric.many(correct == tokens))
    agent.record_local_metric('ppl' + suffix, PPLMetric.many(nll, tokens))
    agent.record_local_metric('ppl_ex' + suffix, PPLMetric.many(nll / tokens.clamp(min=1), [1] * len(nll)))
