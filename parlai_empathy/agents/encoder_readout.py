"""The base of the project's generators: replies carry what the encoder predicted.

MIME, Multi-TR and ETHREED answer with the emotions their encoder read off the context (the
user's emotion, the mimicry polarity, the listener's planned emotion). Those come from the same
encoder pass that produced the reply: a forward hook keeps the encoder's ``aux`` outputs, so
evaluation and interactive chat never encode a batch twice.

Replies are plain text (:mod:`parlai_empathy.agents.detokenize`), as the rankers' are.
"""
from parlai_empathy import compat  # noqa: F401

compat.apply()

import torch  # noqa: E402
from parlai.core.torch_generator_agent import TorchGeneratorAgent  # noqa: E402

from parlai_empathy.agents.detokenize import detokenize  # noqa: E402
from parlai_empathy.agents.safety import SafeAgentMixin  # noqa: E402


class EncoderReadoutAgent(SafeAgentMixin, TorchGeneratorAgent):
    """``add_readout_fields(output, aux)`` is what a subclass writes into its replies."""

    def __init__(self, opt, shared=None):
        # one holder for an agent and its shared copies: they share the model, and its hook
        self._readout = shared['encoder_readout'] if shared is not None else {}
        super().__init__(opt, shared)
        if shared is None and self.model is not None:
            readout = self._readout
            self.core_model.encoder.register_forward_hook(
                lambda module, inputs, states: readout.__setitem__('aux', states.aux)
            )

    def share(self):
        shared = super().share()
        shared['encoder_readout'] = self._readout
        return shared

    @property
    def core_model(self):
        """The model itself, also when multiprocessing_train wraps it in DDP."""
        return getattr(self.model, 'module', self.model)

    def encoder_readout(self, batch):
        """The ``aux`` of the encoder pass just made on ``batch``; encoded now if none was."""
        aux = self._readout.pop('aux', None)
        sizes = {value.size(0) for value in (aux or {}).values() if torch.is_tensor(value) and value.dim()}
        if not aux or sizes != {batch.text_vec.size(0)}:
            with torch.no_grad():
                aux = self.core_model.encoder(*self._encoder_input(batch)).aux
        return aux

    def eval_step(self, batch):
        self._readout.pop('aux', None)  # nothing from an earlier batch
        output = super().eval_step(batch)
        if output is None or batch.text_vec is None:
            return output
        self.add_readout_fields(output, self.encoder_readout(batch))
        return output

    def add_readout_fields(self, output, aux):
        raise NotImplementedError

    def _v2t(self, vec):
        return detokenize(super()._v2t(vec))
