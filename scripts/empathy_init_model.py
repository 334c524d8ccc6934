"""``parlai empathy_init_model -m AGENT -mf FILE ...``: a model file without any training.

The zero-shot rows of the tables (Rashkin's "pretrained only" bi-encoder) evaluate a pretrained
encoder as it is; ``eval_model`` and the leaderboard need a model file for it, and this writes one
with the options given, exactly as ``train_model`` would have before its first update.
"""

import os

from parlai.core.agents import create_agent
from parlai.core.params import ParlaiParser
from parlai.core.script import register_script

from parlai_empathy.integration.commands import EmpathyScript
from parlai_empathy.integration.safe_loading import TRUST_FLAG, add_trust_flag, decide_agent, empathy_agents


@register_script('empathy_init_model')
class EmpathyInitModel(EmpathyScript):
    @classmethod
    def setup_args(cls):
        return add_trust_flag(ParlaiParser(True, True, 'Save a model file without training (zero-shot baselines)'))

    def run(self):
        model_file = self.opt.get('model_file')
        if not model_file:
            raise ValueError('pass -mf FILE: where to write the untrained model')
        for existing in (model_file, model_file + '.opt'):  # (an .opt alone would choose the agent)
            if os.path.exists(existing):
                raise FileExistsError(f'{existing} exists; empathy_init_model never overwrites a model')
        init_model, model = self.opt.get('init_model'), self.opt.get('model')
        if init_model and not decide_agent(model, self.opt.get('trust_model_file')).trusted:
            # the agent -m names opens --init-model: a stock ParlAI agent unpickles all of it
            raise SystemExit(
                f'--init-model {init_model} was not opened: -m {model!r} is not an agent of parlai-empathy '
                f'({", ".join(empathy_agents())}), and a stock ParlAI agent unpickles the whole checkpoint, which '
                f'can run code from the file. If you trust the file, pass {TRUST_FLAG} to open it anyway.'
            )
        os.makedirs(os.path.dirname(os.path.abspath(model_file)), exist_ok=True)
        agent = create_agent(self.opt, requireModelExists=False)
        agent.save(model_file)
        print(f'saved an untrained {self.opt["model"]} to {model_file}')
        return model_file


if __name__ == '__main__':
    EmpathyInitModel.main()
