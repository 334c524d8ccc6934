#!/usr/bin/env python3
"""``parlai train_model`` (``tm``, ``train``): ParlAI's command, training with the loop the agent names.

ParlAI's script registry maps a command name to its class; this module registers
:class:`parlai_empathy.agents.training_loop.TrainModel` under ParlAI's names. It runs ParlAI's
``train_model`` with its options and help unchanged, and builds the loop the agent's class names
(every agent of this package: ``EmpathyTrainLoop``, see :mod:`parlai_empathy.agents.training_loop`),
ParlAI's own ``TrainLoop`` for any other agent.

    parlai train_model -t empathy_ed_clean -m empathy/mime -mf runs/mime/model
"""

import parlai.scripts.train_model  # noqa: F401  ParlAI's registration first: the one below replaces it
from parlai.core.script import register_script

from parlai_empathy.agents.training_loop import TrainModel

register_script('train_model', aliases=['tm', 'train'])(TrainModel)


if __name__ == '__main__':
    TrainModel.main()
