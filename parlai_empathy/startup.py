"""The start-up hook (``parlai_empathy_compat.pth``): nothing happens until ParlAI is imported.

Python runs the ``.pth`` line in every process of the environment, so at start-up this module
only puts one finder on ``sys.meta_path`` that answers no import itself. The first time a process
imports ``parlai``, the finder imports :mod:`parlai_empathy.compat` -- which arms the repairs of
ParlAI's modules (and ``pkg_resources``) before any of them loads -- and from then on only
compares one name. A process that never imports ParlAI imports nothing more than this module.
"""
import sys


class _ArmCompatOnParlAI:
    """A meta-path finder that finds nothing: it arms ``parlai_empathy.compat`` on the first
    ``import parlai`` and lets the normal finders load ParlAI."""

    armed = False

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname == 'parlai' and not cls.armed:
            cls.armed = True
            import parlai_empathy.compat  # noqa: F401  (installs the repairing import hook)
        return None


def install() -> None:
    """Called by the ``.pth`` line at interpreter start-up; idempotent."""
    if 'parlai' in sys.modules:  # too late to intercept: arm now
        import parlai_empathy.compat  # noqa: F401
    elif _ArmCompatOnParlAI not in sys.meta_path:
        sys.meta_path.insert(0, _ArmCompatOnParlAI)
