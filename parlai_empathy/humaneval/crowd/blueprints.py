"""What this package adds to Mephisto: ParlAI's ACUTE-Eval blueprint with our page, and the local
architect with a public address.

Imported only after :func:`parlai_empathy.integration.compat.prepare_crowd` (it imports Mephisto). ACUTE's
runner, agent state, arguments, onboarding and soft-blocking are ParlAI's own; what changes is
where the page comes from: ParlAI's ``AcuteEvalBuilder`` runs ``npm install`` in its ``webapp/``
folder, which the ParlAI wheel does not ship, so this builder copies our built bundle
(``blueprint.task_source``) instead. The turn-annotation task needs no class of ours: its
blueprint (a StaticReact blueprint) already takes a ``task_source``.
"""

import os
import shutil
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List

from mephisto.abstractions.architects.local_architect import LocalArchitect, LocalArchitectArgs
from mephisto.operations.registry import register_mephisto_abstraction
from omegaconf import MISSING
from parlai.crowdsourcing.tasks.acute_eval.acute_eval_blueprint import (
    AcuteEvalBlueprint,
    AcuteEvalBlueprintArgs,
)
from parlai.crowdsourcing.tasks.acute_eval.acute_eval_builder import AcuteEvalBuilder

# imported for its registration: Mephisto finds a run's blueprint by name when it reads the run
from parlai.crowdsourcing.tasks.turn_annotations_static import turn_annotations_blueprint  # noqa: F401

from parlai_empathy.humaneval.questions import ACUTE_DESCRIPTION

BLUEPRINT_TYPE = 'empathy_acute_eval'


@dataclass
class EmpathyAcuteArgs(AcuteEvalBlueprintArgs):
    _blueprint_type: str = BLUEPRINT_TYPE
    task_source: str = field(default=MISSING, metadata={'help': "our ACUTE page's built bundle"})


class EmpathyAcuteBuilder(AcuteEvalBuilder):
    """Copies the built page; builds nothing (``pages.build_pages`` did)."""

    def build_in_dir(self, build_dir: str):
        static = os.path.join(build_dir, 'static')
        os.makedirs(static, exist_ok=True)
        shutil.copy2(os.path.expanduser(self.args.blueprint.task_source), os.path.join(static, 'bundle.js'))
        with open(os.path.join(build_dir, self.BUILT_FILE), 'w') as f:
            f.write(self.BUILT_MESSAGE)


@register_mephisto_abstraction()
class EmpathyAcuteBlueprint(AcuteEvalBlueprint):
    ArgsClass = EmpathyAcuteArgs
    TaskBuilderClass = EmpathyAcuteBuilder
    BLUEPRINT_TYPE = BLUEPRINT_TYPE
    # ParlAI's list says "mock  # TODO update"; the page works behind any architect
    supported_architects: ClassVar[List[str]] = ['mock', 'local', 'heroku', 'ec2']

    def get_frontend_args(self) -> Dict[str, Any]:
        args = super().get_frontend_args()
        args['task_description'] = ACUTE_DESCRIPTION  # ParlAI's is a placeholder its page replaces
        return args


ARCHITECT_TYPE = 'empathy_local'


@dataclass
class EmpathyLocalArchitectArgs(LocalArchitectArgs):
    _architect_type: str = ARCHITECT_TYPE
    public_url: str = field(
        default='', metadata={'help': 'the https address workers open (a proxy in front of the local server)'}
    )


@register_mephisto_abstraction()
class EmpathyLocalArchitect(LocalArchitect):
    """Mephisto's local architect, whose task URL (what MTurk's HITs show) can be the address of
    the user's reverse proxy while Mephisto itself still talks to the router on 127.0.0.1: the
    stock one gives ``hostname:port``, the same address its own websocket dials."""

    ArgsClass = EmpathyLocalArchitectArgs
    ARCHITECT_TYPE = ARCHITECT_TYPE

    def deploy(self) -> str:
        local = super().deploy()
        return self.args_public_url or local

    def __init__(self, db, args, shared_state, task_run, build_dir_root):
        super().__init__(db, args, shared_state, task_run, build_dir_root)
        self.args_public_url = args.architect.get('public_url', '') or ''
