"""``-m empathy/hf_lm``: any Hugging Face causal LM as a listener (``parlai_empathy.models.hf_lm``).

It needs no training: ``parlai empathy_init_model -m empathy/hf_lm --hf-model NAME [--hf-system-prompt
TEXT] -mf FILE`` writes a model file (FILE.opt with the options and the chat template in use, and
FILE, a small JSON note: the weights stay where ``--hf-model`` names them), which ``eval_model``
and ``parlai empathy_leaderboard`` evaluate like any generator; ``-m empathy/hf_lm`` without a model
file works too.

The conversation comes from each ED example's ``context_utterances``/``context_roles`` (the
teacher's full context, so every example stands alone and batch copies keep no history): the
side whose reply is predicted is the ``assistant``, the other the ``user``. For other tasks the
example's text is one user turn. Per reply it records ParlAI's ``loss``/``ppl`` over the gold
reply's tokens and the end-of-turn token (``llen`` of them), the end token's NLL (``nll_end``)
and ``ppl_word``: the gold reply's NLL without the end token per word of the gold
(``metrics.bootstrap.words``), the board's per-word perplexity. ``--skip-generation true``
scores the gold replies only.
"""

import json
import os
from typing import Dict, List, Optional, Tuple

from parlai.core.agents import Agent
from parlai.core.message import Message
from parlai.core.metrics import AverageMetric
from parlai.core.opt import Opt
from parlai.core.torch_generator_agent import PPLMetric

from parlai_empathy.agents.config_options import add_config_options, config_from_opt
from parlai_empathy.models.hf_lm import HfLm, HfLmConfig

# the leaderboard evaluates this agent as a response generator (it is no TorchGeneratorAgent)
LEADERBOARD_KIND = 'generator'


def conversation(obs) -> List[Tuple[str, str]]:
    """``[(role, text)]`` before the reply ``obs`` asks for: the replying side is the assistant."""
    utterances, roles = obs.get('context_utterances'), obs.get('context_roles')
    if utterances and roles and len(utterances) == len(roles):
        # without a label_role, the reply answers the last turn: it is the other side's
        side = obs.get('label_role') or next((r for r in roles if r != roles[-1]), None)
        return [('assistant' if role == side else 'user', text) for role, text in zip(roles, utterances)]
    return [('user', obs.get('text', ''))]


class HfLmAgent(Agent):
    leaderboard_kind = LEADERBOARD_KIND

    @classmethod
    def add_cmdline_args(cls, parser, partial_opt=None):
        group = parser.add_argument_group('Hugging Face causal LM (parlai-empathy)')
        add_config_options(group, HfLmConfig)
        group.add_argument(
            '--skip-generation', type='bool', default=False, help='score the gold replies only, generating nothing'
        )
        return parser

    def __init__(self, opt, shared=None):
        super().__init__(opt, shared)
        self.id = 'HfLm'
        self.config = config_from_opt(HfLmConfig, opt)
        self.lm: HfLm = shared['lm'] if shared else HfLm.load(self.config)

    def share(self):
        shared = super().share()
        shared['lm'] = self.lm
        return shared

    def act(self):
        return self.batch_act([self.observation])[0]

    def batch_act(self, observations):
        from parlai_empathy.metrics.bootstrap import words

        live = [i for i, obs in enumerate(observations) if obs is not None and 'text' in obs]
        replies = [Message({'id': self.getID(), 'episode_done': False}) for _ in observations]
        if not live:
            return replies
        golds: List[Optional[str]] = []
        for i in live:
            labels = observations[i].get('labels') or observations[i].get('eval_labels')
            golds.append(labels[0] if labels else None)
        results = self.lm.run(
            [conversation(observations[i]) for i in live], golds, generate=not self.opt.get('skip_generation')
        )
        for i, gold, result in zip(live, golds, results):
            reply = replies[i]
            if result.reply is not None:
                reply['text'] = result.reply
            reply['hf_prompt'] = result.prompt
            metrics: Dict[str, object] = {}
            if result.nll_reply is not None:
                tokens = result.reply_tokens + 1  # the end-of-turn token
                nll = result.nll_reply + result.nll_end
                metrics.update(
                    loss=AverageMetric(nll, tokens),
                    ppl=PPLMetric(nll, tokens),
                    llen=AverageMetric(tokens),
                    nll_end=AverageMetric(result.nll_end),
                )
                count = words(gold)
                if count:
                    metrics['ppl_word'] = PPLMetric(result.nll_reply, count)
            if result.truncated_turns:
                metrics['hf_dropped_turns'] = AverageMetric(result.truncated_turns)
            if metrics:
                reply['metrics'] = metrics
        return replies

    def save(self, path: Optional[str] = None):
        """FILE.opt with every option (the chat template in use filled in) and FILE, a JSON note."""
        path = path or self.opt.get('model_file')
        if not path:
            return
        os.makedirs(os.path.dirname(os.path.abspath(path)) or '.', exist_ok=True)
        opt = Opt(self.opt)
        opt['hf_chat_template'] = self.lm.chat_template
        opt.save(path + '.opt')
        with open(path, 'w') as f:
            json.dump(
                {
                    'agent': 'empathy/hf_lm',
                    'hf_model': self.config.hf_model,
                    'note': 'no weights here: the model is loaded from --hf-model (see FILE.opt)',
                },
                f,
                indent=1,
            )
            f.write('\n')
