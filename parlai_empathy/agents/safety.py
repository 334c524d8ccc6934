"""What every agent of the project shares: safe to open, safe at the prompt, our training loop.

:class:`SafeAgentMixin` goes first in an agent's bases (``class MimeAgent(SafeAgentMixin, ...)``):

* ``load`` reads model files (``-mf``, ``--init-model``, checkpoints) with
  :func:`parlai_empathy.integration.safe_loading.load_checkpoint`: ``torch.load(weights_only=True)``, a
  clear refusal for a file that needs arbitrary unpickling, a clear error naming the file for a
  truncated, foreign or mismatched one;
* option values ``model_dir:<relative path>`` (written by ``parlai empathy_package_model`` for
  the files it packs beside the weights: candidate pool, encoder, classifier) are resolved
  against the model file's folder, so a packaged model works wherever it is unpacked;
* a message holding undecodable bytes as Python's stdin delivers them under the C.UTF-8 locale
  or UTF-8 mode (``parlai interactive``: lone surrogates, which HuggingFace tokenizers refuse with
  a TypeError) is observed with U+FFFD in their place (:func:`undecodable_as_replacement`);
* in chat (``interactive_mode``: ``parlai interactive``, ``parlai empathy_chat``), an empty or
  blank message is answered with :data:`EMPTY_INPUT_REPLY` without running the model, and leaves
  no trace in the dialogue history (a message with a label, as in evaluation, is scored as usual);
* ``parlai interactive``, ``eval_model -d`` and ``display_model`` show the emotion fields of the
  replies (``display_fields``: ``--display-add-fields`` by default; a given value replaces it);
* ``save`` writes the weights, the options and the dictionary each to a temporary file renamed
  over the old one: ParlAI writes the ``.opt`` and ``.dict`` in place, so a run killed in the
  middle of a checkpoint left an empty ``model.checkpoint.opt`` (or a half dictionary) and could
  not resume; the temporary file such a kill leaves is removed by the next save;
* ``parlai train_model`` trains it with the loop its class names (:meth:`SafeAgentMixin.train_loop`:
  :class:`~parlai_empathy.agents.training_loop.EmpathyTrainLoop`; a stock agent trains with
  ParlAI's own loop).
"""

import os
import re

from parlai_empathy.files.cache_lock import atomic_save_as, remove_dead_temporaries
from parlai_empathy.integration.safe_loading import ModelFileError, ModelFileExit, describe_mismatch, load_checkpoint

MODEL_DIR_PREFIX = 'model_dir:'
EMPTY_INPUT_REPLY = "I didn't get any text there. Could you tell me what's on your mind?"


def resolve_model_dir_paths(opt) -> None:
    """Turn every ``model_dir:REL`` option value into a path beside ``opt['model_file']``."""
    model_file = opt.get('model_file')
    for key, value in list(opt.items()):
        if isinstance(value, str) and value.startswith(MODEL_DIR_PREFIX):
            if not model_file:
                raise ModelFileError(
                    f'option {key}={value!r} is relative to the model file, but no model file (-mf) is given'
                )
            opt[key] = os.path.join(os.path.dirname(os.path.abspath(model_file)), value[len(MODEL_DIR_PREFIX) :])


_SURROGATE = re.compile('[\ud800-\udfff]')


def undecodable_as_replacement(text: str) -> str:
    """``text`` with U+FFFD where it holds undecodable bytes as lone surrogates: one per invalid
    sequence of the bytes that Python's ``surrogateescape`` (stdin under the C.UTF-8 locale or in
    UTF-8 mode) turned into surrogates, as decoding with ``errors='replace'`` gives, and one for any
    other lone surrogate. HuggingFace tokenizers refuse lone surrogates (a TypeError)."""
    if not _SURROGATE.search(text):
        return text
    try:
        return text.encode('utf-8', 'surrogateescape').decode('utf-8', 'replace')
    except UnicodeEncodeError:  # a surrogate that no byte became
        return _SURROGATE.sub('\ufffd', text)


def is_blank_chat_message(opt, observation) -> bool:
    """A chat message (interactive mode, no label) whose text is empty or only white space."""
    if not opt.get('interactive_mode') or observation is None or 'text' not in observation:
        return False
    if 'labels' in observation or 'eval_labels' in observation:
        return False
    return not str(observation.get('text') or '').strip()


def check_dictionary(opt) -> None:
    """The dictionary beside a model, checked before ParlAI reads it line by line into memory: a
    regular file within ``dict_bytes`` (a FIFO would hang the load, a sparse or device file
    exhaust memory). A refusal ends the command with its one line."""
    from parlai_empathy.files.bounded import FileRefused, check_file

    model_file = opt.get('model_file')
    for path in {opt.get('dict_file'), model_file + '.dict' if model_file else None} - {None}:
        if os.path.lexists(path):
            try:
                check_file(path, 'a dictionary', 'dict_bytes')
            except FileRefused as err:
                raise ModelFileExit(ModelFileError(str(err))) from None


class SafeAgentMixin:
    """Mixed into every ParlAI agent of the project, before its ParlAI base class."""

    # the reply fields shown by default; an agent whose replies carry others names them
    display_fields = ('predicted_emotion',)

    @classmethod
    def add_cmdline_args(cls, parser, partial_opt=None):
        result = super().add_cmdline_args(parser, partial_opt=partial_opt)
        # one default for every agent of ours: replies show what the model read (a field a reply
        # lacks is not shown, so a ranker without an emotion classifier shows its text alone)
        parser.set_defaults(display_add_fields=','.join(cls.display_fields))
        return result if result is not None else parser

    def __new__(cls, opt, shared=None):
        # before any __init__ of the agent's classes, which may open those files already
        if shared is None:
            resolve_model_dir_paths(opt)
            check_dictionary(opt)
        return super().__new__(cls)

    @classmethod
    def train_loop(cls):
        """The loop ``parlai train_model`` trains the agent with (see
        :mod:`parlai_empathy.agents.training_loop`)."""
        from parlai_empathy.agents.training_loop import EmpathyTrainLoop

        return EmpathyTrainLoop

    @classmethod
    def upgrade_opt(cls, opt_from_disk):
        """ParlAI's upgrade of a saved model's options asserts and looks up keys it expects (a
        generator's ``.opt`` without ``inference`` must hold ``beam_size``), so a ``.opt`` that
        lacks one ended with a traceback: it is refused with one line naming the file instead."""
        try:
            return super().upgrade_opt(opt_from_disk)
        except (AssertionError, KeyError) as err:
            model_file = opt_from_disk.get('model_file')
            where = f'{model_file}.opt' if isinstance(model_file, str) else "the model's .opt"
            key = (
                err.args[0]
                if isinstance(err, KeyError) and err.args
                else ('beam_size' if 'inference' not in opt_from_disk and 'beam_size' not in opt_from_disk else None)
            )
            field = f'field "{key}": missing' if key else 'an option ParlAI expects is missing'
            raise ModelFileExit(
                ModelFileError(f'{where}: {field}; a .opt edited by hand or cut short? (ParlAI cannot upgrade it)')
            ) from None

    def observe(self, observation):
        text = observation.get('text') if observation is not None else None
        if isinstance(text, str) and _SURROGATE.search(text):
            from parlai.core.message import Message

            observation = Message(observation)
            observation.force_set('text', undecodable_as_replacement(text))
        if is_blank_chat_message(self.opt, observation):
            # kept out of the history: the model never sees the empty turn, nor its answer
            from parlai.core.message import Message

            self.observation = Message(observation)
            return self.observation
        return super().observe(observation)

    def act(self):
        observation = self.observation
        if not is_blank_chat_message(self.opt, observation):
            return super().act()
        if observation.get('episode_done'):  # [DONE] on an empty line still ends the episode
            self.history.reset()
        self.observation = None
        from parlai.core.message import Message

        return Message({'id': self.getID(), 'text': EMPTY_INPUT_REPLY, 'episode_done': False})

    def save(self, path=None):
        """ParlAI's ``TorchAgent.save``, each file complete at its name at every moment (the
        weights already were: ParlAI's ``atomic_save``)."""
        path = self.opt.get('model_file') if path is None else path
        if not path:
            return
        if hasattr(self, 'dict') and not os.path.exists(path + '.dict'):
            self.dict.save(path + '.dict', sort=False)  # our dictionaries save atomically themselves
        states = self.state_dict()
        if states:
            from parlai.utils.torch import atomic_save

            atomic_save(states, path)
            atomic_save_as(path + '.opt', self.opt.save)
        # what a run killed while saving left beside this model: its files are complete again
        remove_dead_temporaries(path)

    def load(self, path):
        """ParlAI's ``TorchAgent.load``, without unpickling anything but weights. A refusal ends
        the command with its one line (:class:`ModelFileExit`), stock ``parlai`` commands included,
        where any other exception is shown as a traceback."""
        try:
            states = load_checkpoint(path)
        except ModelFileError as err:
            raise ModelFileExit(err) from None
        try:
            self.load_state_dict(states['model'])
        except RuntimeError as err:
            raise ModelFileExit(describe_mismatch(path, self.opt.get('model', type(self).__name__), err)) from None
        if 'optimizer' in states and hasattr(self, 'optimizer'):
            self.optimizer.load_state_dict(states['optimizer'])
        return states
