"""The start-up hook (``parlai_empathy_compat.pth``): nothing happens until ParlAI is imported.

Python runs the ``.pth`` line in every process of the environment, so at start-up this module
only puts one finder on ``sys.meta_path`` that answers no import itself. The first time a process
imports ``parlai``, the finder calls :func:`arm`, before any ParlAI module loads, and from then on
only compares one name. A process that never imports ParlAI imports nothing more than this module.

:func:`arm` is the whole list of what the package changes in ParlAI, and each item changes ParlAI
only where ParlAI 1.7.2 cannot work as it is on this stack:

* :func:`parlai_empathy.integration.compat.install`: the version shims (torch 2.13, numpy 2, setuptools>=81);
* :func:`parlai_empathy.integration.cpu_distributed.install`: ``multiprocessing_train`` on a machine without
  CUDA (gloo on 127.0.0.1; nothing changes where CUDA is available);
* :func:`parlai_empathy.integration.safe_loading.install`: an ``.opt`` file is read as JSON and never
  unpickled, only from a regular file within the caps of :mod:`parlai_empathy.files` (a refusal
  ends the command with one line), and a command of ours checks which agent a model folder names
  before importing it.

The training behaviour of the project's agents (seeding before the model is built, validating the
end of a schedule, resuming on the validation grid, ...) is not here: it is a subclass of ParlAI's
``TrainLoop`` that our agents name and ``parlai train_model`` builds for them only
(:mod:`parlai_empathy.agents.training_loop`), so a stock agent trains as upstream ParlAI does.
"""

import sys


def arm() -> None:
    """Install every change the package makes in ParlAI (idempotent)."""
    from parlai_empathy.integration import compat, cpu_distributed, safe_loading

    compat.install()
    cpu_distributed.install()
    safe_loading.install()


class _ArmOnParlAI:
    """A meta-path finder that finds nothing: it calls :func:`arm` on the first ``import parlai``
    and lets the normal finders load ParlAI."""

    armed = False

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname == 'parlai' and not cls.armed:
            cls.armed = True
            _arm_safely()
        return None


def _arm_safely():
    try:
        arm()
    except Exception as err:  # pragma: no cover - defensive: never break an interpreter's start-up
        sys.stderr.write(f'parlai_empathy.integration.startup: repairs of ParlAI not installed ({err!r})\n')


def install() -> None:
    """Called by the ``.pth`` line at interpreter start-up; idempotent."""
    if 'parlai' in sys.modules:  # too late to intercept: arm now
        _arm_safely()
    elif _ArmOnParlAI not in sys.meta_path:
        sys.meta_path.insert(0, _ArmOnParlAI)
