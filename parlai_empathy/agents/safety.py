"""What every agent of the project shares to be safe to open and safe at the prompt.

:class:`SafeAgentMixin` goes first in an agent's bases (``class MimeAgent(SafeAgentMixin, ...)``):

* ``load`` reads model files (``-mf``, ``--init-model``, checkpoints) with
  :func:`parlai_empathy.safe_loading.load_checkpoint`: ``torch.load(weights_only=True)``, a
  clear refusal for a file that needs arbitrary unpickling, a clear error naming the file for a
  truncated, foreign or mismatched one;
* option values ``model_dir:<relative path>`` (written by ``parlai empathy_package_model`` for
  the files it packs beside the weights: candidate pool, encoder, classifier) are resolved
  against the model file's folder, so a packaged model works wherever it is unpacked;
* in ``parlai interactive``, a line of invalid UTF-8 reaches the agent with U+FFFD in place of
  the bad bytes instead of crashing ParlAI's prompt.
"""
import os
import sys

from parlai_empathy.safe_loading import ModelFileError, describe_mismatch, load_checkpoint

MODEL_DIR_PREFIX = 'model_dir:'


def resolve_model_dir_paths(opt) -> None:
    """Turn every ``model_dir:REL`` option value into a path beside ``opt['model_file']``."""
    model_file = opt.get('model_file')
    for key, value in list(opt.items()):
        if isinstance(value, str) and value.startswith(MODEL_DIR_PREFIX):
            if not model_file:
                raise ModelFileError(f'option {key}={value!r} is relative to the model file, but no '
                                     'model file (-mf) is given')
            opt[key] = os.path.join(os.path.dirname(os.path.abspath(model_file)),
                                    value[len(MODEL_DIR_PREFIX):])


def tolerate_undecodable_stdin() -> None:
    """Interactive input with invalid UTF-8 must reach the agent (as U+FFFD), not crash input()."""
    stdin = sys.stdin
    if hasattr(stdin, 'reconfigure') and getattr(stdin, 'errors', 'strict') == 'strict':
        try:
            stdin.reconfigure(errors='replace')
        except (ValueError, OSError):  # pragma: no cover - detached or unusual stdin
            pass


class SafeAgentMixin:
    """Mixed into every ParlAI agent of the project, before its ParlAI base class."""

    def __new__(cls, opt, shared=None):
        # before any __init__ of the agent's classes, which may open those files already
        if shared is None:
            resolve_model_dir_paths(opt)
            if opt.get('interactive_mode'):
                tolerate_undecodable_stdin()
        return super().__new__(cls)

    def load(self, path):
        """ParlAI's ``TorchAgent.load``, without unpickling anything but weights."""
        states = load_checkpoint(path)
        try:
            self.load_state_dict(states['model'])
        except RuntimeError as err:
            raise describe_mismatch(path, self.opt.get('model', type(self).__name__), err) from None
        if 'optimizer' in states and hasattr(self, 'optimizer'):
            self.optimizer.load_state_dict(states['optimizer'])
        return states
