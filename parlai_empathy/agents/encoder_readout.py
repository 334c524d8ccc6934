"""The base of the project's generators: replies carry what the encoder predicted.

MIME, Multi-TR and ETHREED answer with the emotions their encoder read off the context (the
user's emotion, the mimicry polarity, the listener's planned emotion). Their encoder returns them
typed, beside the decoder memory (``EncoderStates.aux``, a ``ModelOutput`` of the model); the agent
keeps the report of its last pass over the batch (:meth:`EncoderReadoutAgent.keep_readout`): the
loss's, then the generation's, which made the reply. Where ParlAI's own search loop generates
(beam search, blocking, ``--beam-stop top``) it encodes the batch itself and returns no states, so
the agent makes that pass once more, just before, from the same random state.

Replies are plain text (:mod:`parlai_empathy.agents.detokenize`), as the rankers' are.

It also holds what every generator shares about *training* like its reference:

* ``--amsgrad``: ParlAI's ``TorchAgent.init_optim`` always builds ``--optimizer adam`` with
  ``amsgrad=True``. The MIME and ETHREED references step plain ``torch.optim.Adam``; so a new model
  trains with plain Adam, and a model saved before the option keeps the AMSGrad it was trained with.
* Adam steps all parameters at once (``foreach``): PyTorch picks its one-tensor-at-a-time loop on
  the CPU, which passes over the vocabulary-sized embedding and output matrices about ten times a
  step. The multi-tensor step does the same arithmetic in the same order, so the weights are
  identical to the bit (``tests/test_agents_mime.py``); alone it saves about a tenth of the
  optimizer's time (``bench/mime_step_profile.py``). PyTorch's fused CPU kernel is faster still
  but rounds differently, so it is not used. glibc's allocation thresholds (which decide whether
  the step's vocabulary-sized temporaries are mapped afresh each time) are process-wide: the
  agents leave them to glibc and the user (``docs/models.md``).
* Subnormal moments are flushed (:func:`flush_subnormal_moments`, every 100 updates on the CPU):
  the Adam moments of rarely seen words decay into float32's subnormal range and stay there, where
  the CPU computes slowly; setting them to zero changes no weight.
* ``_new_model_flag``: options added to follow a reference after models were saved without them.
  What such a model had is each agent's one migration table (``OPT_MIGRATIONS``), applied where a
  saved model's options are read: :meth:`EncoderReadoutAgent.upgrade_opt`.
"""

import os

import parlai.utils.logging as logging
import torch
from parlai.core.torch_generator_agent import TorchGeneratorAgent

from parlai_empathy.agents.batched_search import applicable_search, batched_greedy
from parlai_empathy.agents.config_options import migrate_saved_opt
from parlai_empathy.agents.detokenize import detokenize
from parlai_empathy.agents.safety import SafeAgentMixin


def _saved_options(model_file):
    """A saved model's options as saved, ``{}`` without an ``.opt`` file."""
    from parlai_empathy.integration.model_opt import read_model_opt

    try:
        return read_model_opt(model_file)
    except FileNotFoundError:
        return {}


def set_amsgrad(optimizer, amsgrad):
    """Switch AMSGrad on or off in every parameter group of a ``torch.optim.Adam``.

    Switched on for parameters that already have Adam state without a running maximum (a model
    trained with plain Adam, resumed with AMSGrad), the maximum starts at the saved second-moment
    estimate: the value AMSGrad would hold had it started now. Switched off, a saved maximum is
    kept in the state, unused."""
    for group in optimizer.param_groups:
        group['amsgrad'] = bool(amsgrad)
        if not amsgrad:
            continue
        for param in group['params']:
            state = optimizer.state.get(param)
            if state and 'exp_avg_sq' in state and 'max_exp_avg_sq' not in state:
                state['max_exp_avg_sq'] = state['exp_avg_sq'].clone()


# Adam's moments of a row whose gradient stays zero (a word absent from the batches) shrink by
# beta1 or beta2 each step into float32's subnormal range and, rounded to nearest, stop there a
# few units above zero; x86 CPUs take some operations on them (the square root of the second
# moment) through a slow path, every step, for the rest of training (bench/adam_subnormal.py)
SMALLEST_NORMAL = torch.finfo(torch.float32).tiny
MOMENTS = ('exp_avg', 'exp_avg_sq', 'max_exp_avg_sq')
FLUSH_SUBNORMAL_EVERY = 100  # updates


def flush_subnormal_moments(optimizer) -> int:
    """Set to zero every entry of Adam's float32 CPU moment estimates whose size is below the
    smallest normal float32 (1.18e-38); returns how many were subnormal.

    No weight moves differently: such an entry adds at most lr * 1.2e-38 / eps (7e-33 at MIME's
    lr 6.5e-4, eps 1e-9) to a step, and sqrt(v) at most 1.1e-19 to a denominator eps = 1e-9,
    both far below half a unit in the last place of any weight or denominator above 1e-17 in
    size; the tests check the weights to the bit."""
    flushed = 0
    for state in optimizer.state.values():
        for key in MOMENTS:
            moment = state.get(key)
            if not torch.is_tensor(moment) or moment.dtype != torch.float32 or moment.device.type != 'cpu':
                continue
            size = moment.abs()
            subnormal = (size < SMALLEST_NORMAL) & (size > 0)
            flushed += int(subnormal.sum())
            moment.masked_fill_(subnormal, 0.0)
    return flushed


def set_foreach(optimizer):
    """Step every parameter group of a ``torch.optim.Adam`` with its multi-tensor kernels (see the
    module docstring); a group asked to be fused stays fused."""
    for group in optimizer.param_groups:
        if 'foreach' in group and not group.get('fused'):
            group['foreach'] = True


def warn_world_logs_without_replies(opt):
    """A world log asked for while generation is skipped would hold no replies: ParlAI's
    TorchGeneratorAgent then answers with metrics only, and the human evaluation built from the log
    stops. Our generators default to ``skip_generation`` true (and save it), so say so at once."""
    if opt.get('world_logs') and opt.get('skip_generation'):
        logging.warning(
            f'--world-logs {opt["world_logs"]} will hold no generated replies: skip_generation is '
            'true (the default of this agent, kept in the options saved with its models); add '
            '--skip-generation false to write them'
        )


class EncoderReadoutAgent(SafeAgentMixin, TorchGeneratorAgent):
    """``add_readout_fields(output, aux)`` is what a subclass writes into its replies."""

    # the agent's migration table: version -> {option: what a model saved without it had}
    OPT_MIGRATIONS = {}

    @classmethod
    def add_cmdline_args(cls, parser, partial_opt=None):
        super().add_cmdline_args(parser, partial_opt=partial_opt)
        group = parser.add_argument_group('Optimizer (parlai-empathy)')
        group.add_argument(
            '--amsgrad',
            type='bool',
            default=None,
            help='AMSGrad in --optimizer adam. ParlAI always switches it on; the MIME and '
            'ETHREED references use plain Adam (default: false for a new model; a model saved '
            'without this option was trained with AMSGrad and keeps it)',
        )
        return parser

    def __init__(self, opt, shared=None):
        # the encoder's report on the batch being evaluated (see eval_step); this agent's own
        self._reply_readout = None
        super().__init__(opt, shared)
        if shared is None:
            warn_world_logs_without_replies(self.opt)

    # ----- options added after models were saved without them ----------------------------
    def _model_exists(self):
        path = self.opt.get('model_file')
        return bool(path) and os.path.isfile(path)

    @classmethod
    def upgrade_opt(cls, opt_from_disk):
        """A saved model's options, with what a model saved without an option had (the agent's
        ``OPT_MIGRATIONS``); ParlAI calls this when it loads a model file."""
        return migrate_saved_opt(super().upgrade_opt(opt_from_disk), cls.OPT_MIGRATIONS)

    def _new_model_flag(self, key, new):
        """A boolean option added to follow a reference after models were saved without it.

        Unset, a new model takes the reference's form (``new``); a saved model (``-mf`` that
        exists, or ``--init-model``) what its own options say, through the migration table
        (:meth:`upgrade_opt`) when they predate the option. The choice is written into the
        options, so it is saved with the model."""
        flag = self.opt.get(key)
        if flag is None:
            saved = self.opt['model_file'] if self._model_exists() else self.opt.get('init_model')
            options = migrate_saved_opt(dict(_saved_options(saved)), self.OPT_MIGRATIONS) if saved else {}
            flag = bool(options.get(key, new))
            self.opt[key] = flag
        return bool(flag)

    def init_optim(self, params, optim_states=None, saved_optim_type=None, is_finetune=False):
        """ParlAI's optimizer, then ``--amsgrad`` (see the module docstring) in place of its
        hard-wired ``amsgrad=True``. It is applied after the saved state is loaded, since loading
        restores the saved parameter groups, their ``amsgrad`` included."""
        failed = super().init_optim(params, optim_states, saved_optim_type, is_finetune)
        if self.opt.get('optimizer') == 'adam':
            amsgrad = self._new_model_flag('amsgrad', new=False)
            optimizer = getattr(self.optimizer, 'optimizer', self.optimizer)
            set_amsgrad(optimizer, amsgrad)
            set_foreach(optimizer)
        return failed

    def update_params(self):
        """ParlAI's step, then every :data:`FLUSH_SUBNORMAL_EVERY` updates on the CPU the
        subnormal moments flushed (:func:`flush_subnormal_moments`; the weights stay the same)."""
        before = self._number_training_updates
        super().update_params()
        stepped = self._number_training_updates != before
        if stepped and not self.use_cuda and self._number_training_updates % FLUSH_SUBNORMAL_EVERY == 0:
            optimizer = getattr(self.optimizer, 'optimizer', self.optimizer)
            if isinstance(optimizer, torch.optim.Adam):
                flush_subnormal_moments(optimizer)

    @property
    def core_model(self):
        """The model itself, also when multiprocessing_train wraps it in DDP."""
        return getattr(self.model, 'module', self.model)

    def keep_readout(self, encoder_states):
        """Called with the encoder states of each pass over the batch in evaluation (the loss's,
        then the generation's): the last one's report is what the replies carry."""
        self._reply_readout = encoder_states.aux

    def eval_step(self, batch):
        self._reply_readout = None  # nothing from an earlier batch
        output = super().eval_step(batch)
        if output is None or batch.text_vec is None:
            return output
        if self._reply_readout is None:  # neither scored nor generated: encoded for the fields alone
            with torch.no_grad():
                self.keep_readout(self.core_model.encoder(*self._encoder_input(batch)))
        self.add_readout_fields(output, self._reply_readout)
        return output

    def add_readout_fields(self, output, aux):
        raise NotImplementedError

    def _generate(self, batch, beam_size, max_ts, prefix_tokens=None):
        if batch.text_vec is None:
            return super()._generate(batch, beam_size, max_ts, prefix_tokens=prefix_tokens)
        device = batch.text_vec.device
        # one hypothesis per example: the whole batch's search at once (same replies and scores)
        search = applicable_search(self, beam_size, device, prefix_tokens)
        if search is not None:
            with torch.no_grad():
                encoder_states = self.core_model.encoder(*self._encoder_input(batch))
            self.keep_readout(encoder_states)
            return batched_greedy(self, batch, search, max_ts, encoder_states)
        # ParlAI's loop encodes the batch itself and keeps the states to itself: the replies'
        # report comes from the same pass made just before, from the same random state (ETHREED's
        # encoder samples), so both passes read the same and the loop draws what it drew alone
        with torch.no_grad(), torch.random.fork_rng(devices=[device] if device.type == 'cuda' else []):
            self.keep_readout(self.core_model.encoder(*self._encoder_input(batch)))
        return super()._generate(batch, beam_size, max_ts, prefix_tokens=prefix_tokens)

    def _v2t(self, vec):
        # ParlAI's loop compares every element of a tensor with the end and start tokens (three
        # tensor operations per token); on a list of ints it reads the same ids
        if torch.is_tensor(vec):
            vec = vec.tolist()
        return detokenize(super()._v2t(vec))
