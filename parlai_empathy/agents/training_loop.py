"""How ``parlai train_model`` trains one of the project's agents: ParlAI 1.7.2's loop, with changes.

Where it happens: every agent of ours names the loop that trains it
(:meth:`~parlai_empathy.agents.safety.SafeAgentMixin.train_loop`: :class:`EmpathyTrainLoop`, a
subclass of ParlAI's ``TrainLoop``), and the command ``parlai train_model`` is :class:`TrainModel`
below, ParlAI's command with one difference: it builds the loop the agent's class names, and
ParlAI's own ``TrainLoop`` for any other agent. The package's script module
``scripts/empathy_train_model.py`` registers it under ParlAI's names (``train_model``, ``tm``,
``train``) through ParlAI's script registry; no class of ParlAI is changed, so a stock agent, in the
same process or not, trains exactly as upstream ParlAI does. ParlAI's other ways to train
(``python -m parlai.scripts.train_model``, ``multiprocessing_train``) build ParlAI's loop as they
always did.

The changes (methods of :class:`EmpathyTrainLoop`), and the upstream behaviour each corrects:

* ``--seed`` is set before the model is built (``__init__``). ParlAI seeds after its ``TrainLoop``
  has built the agent, so two runs with the same seed started from different weights.
* Resuming from a ``.trainstats`` restores the update count of the last validation too
  (``__init__``). ParlAI restores its epoch but not its update count, so a run resumed with
  ``-vstep N`` validated at its first update and then every N from there: a whole extra validation
  per restart, and a learning curve off its grid.
* The end of a fixed schedule (``--num-epochs``, ``--max-train-steps``, the linear learning-rate
  schedule's last update) is validated (``_get_time``, and the training world's ``parley`` for the
  linear schedule: :class:`_ScheduleEndWorld`). ParlAI checks its update budget before its
  validation schedule, so the schedule's last stretch was trained and thrown away.
* ``--count-validations-after N`` (an option of our generators; ``validate``): a validation at or
  before N updates runs as usual (logged, the model saved) but then forgets the best valid figure
  and the impatience, as the MIME reference's training loop does before 10,000 updates.
* A run resumed under another ``--validation-metric`` than it was saved with gets its best figure
  and impatience recomputed from its earlier validations under the new metric (``__init__``;
  ParlAI compares the new metric with the old one's best).
* A run killed after a validation saved a new best model file but before its next
  ``.checkpoint`` resumes with the model file's best, not the checkpoint's older one (the first
  repeated validation that beat the older figure would overwrite the better model file).
* A resumed run that never beats its best after resuming does not end by saving its last weights
  over the best model file, and its final valid and test reports are of the best model file, not
  of the last checkpoint.
* The ``.trainstats`` file is written to a temporary name and renamed over the old one
  (``_save_train_stats``). ParlAI writes it in place, so a run killed while saving left a truncated
  ``.checkpoint.trainstats``, and the resumed run stopped on a JSON error (the agent saves its own
  files the same way: :meth:`~parlai_empathy.agents.safety.SafeAgentMixin.save`).
"""

import json
import logging as std_logging
import os

import numpy as np
from parlai.core.exceptions import StopTrainException
from parlai.core.loader import load_agent_module
from parlai.scripts import train_model as parlai_train_model
from parlai.utils import logging

from parlai_empathy.files.cache_lock import move_into_place, temporary_name


class EmpathyTrainLoop(parlai_train_model.TrainLoop):
    """ParlAI's ``TrainLoop`` with the changes listed in the module docstring; each method calls
    ParlAI's and adds what is described there."""

    def __init__(self, opt):
        if opt.get('seed') is not None:
            parlai_train_model.set_seed(opt['seed'])  # before the agent builds its model
        super().__init__(opt)
        self._schedule_end_validated = False
        _resume_bookkeeping(self)
        self.world = _ScheduleEndWorld(self.world, self)

    def validate(self):
        after = self.opt.get('count_validations_after') or 0
        if self._train_steps > after:
            return super().validate()
        # not counted: ParlAI compares it with nothing (best_valid is None), so it would announce
        # a "new best" and save "the best valid model"; it logs what happens instead
        hidden = _HideLines(_HIDDEN_WHEN_UNCOUNTED)
        logging.logger.addFilter(hidden)
        try:
            super().validate()
        finally:
            logging.logger.removeFilter(hidden)
        metric = self.opt.get('validation_metric')
        value = _metric_value(self.valid_reports[-1].get(metric)) if self.valid_reports else None
        figure = f'{metric} {value:.4g}' if isinstance(value, (int, float)) else str(metric)
        saved = (
            f'; its weights are saved to {self.opt["model_file"]} until a counted validation replaces them'
            if self.opt.get('model_file')
            else ''
        )
        logging.info(
            f'validation at {self._train_steps} updates not counted for the best model or '
            f'patience (--count-validations-after {after}): {figure}{saved}'
        )
        # the next validation is compared with nothing (so it saves the model), as the reference's
        # first counted one is; patience starts from 0
        self.best_valid, self.impatience = None, 0
        return False

    def _get_time(self, world):
        times = super()._get_time(world)
        # ParlAI counts the examples right after this call; the validation below records them, and
        # at a run's first update (--max-train-steps 1) they did not exist yet (AttributeError)
        self._total_exs = int(np.round(self._total_epochs * world.num_examples()))
        _validate_the_schedule_end(self)
        return times

    def _save_train_stats(self, suffix=None):
        model_file = self.opt.get('model_file')
        if not model_file:
            return super()._save_train_stats(suffix)
        final = f'{model_file}{suffix or ""}.trainstats'
        # ParlAI names the file model_file + suffix + '.trainstats'; a suffix of ours makes it temporary
        partial_suffix = temporary_name(suffix or '')
        super()._save_train_stats(partial_suffix)
        written = f'{model_file}{partial_suffix}.trainstats'
        if os.path.exists(written):  # a non-primary worker writes nothing
            move_into_place(written, final)


class _ScheduleEndWorld:
    """The loop's training world, unchanged but for ``parley``: a schedule can also end by an
    exception out of it. The linear learning-rate schedule raises "End of Linear LR Schedule"
    after its last update, which leaves ParlAI's loop before ``_get_time`` (and so before the
    check there); that end is validated before the exception goes on to end the loop."""

    def __init__(self, world, loop):
        self._world, self._loop = world, loop

    def __getattr__(self, name):
        return getattr(self._world, name)

    def __enter__(self):
        self._world.__enter__()
        return self

    def __exit__(self, *exc):
        return self._world.__exit__(*exc)

    def parley(self):
        try:
            return self._world.parley()
        except StopTrainException as err:
            if 'End of Linear LR Schedule' in str(err):  # validated now: the loop tears down next
                self._world.reset_metrics()
                _validate_the_schedule_end(self._loop, ended=True)
            raise


def loop_class(opt):
    """The loop ``parlai train_model`` builds for ``opt``: the one the agent's class names
    (``train_loop``), ParlAI's ``TrainLoop`` for an agent that names none."""
    model = opt.get('model')
    if not model and opt.get('model_file'):
        from parlai_empathy.integration.model_opt import read_model_opt

        try:
            model = read_model_opt(opt['model_file']).get('model')
        except FileNotFoundError:
            model = None
    agent_class = load_agent_module(model) if model else None
    named = getattr(agent_class, 'train_loop', None)
    return named() if named is not None else parlai_train_model.TrainLoop


class TrainModel(parlai_train_model.TrainModel):
    """``parlai train_model``: ParlAI's command, training with the loop the agent names."""

    def run(self):
        self.train_loop = loop_class(self.opt)(self.opt)
        if self.opt['seed'] is not None:
            parlai_train_model.set_seed(self.opt['seed'])
        return self.train_loop.train()


def _resume_bookkeeping(loop):
    """What the loop's ``__init__`` does after loading its ``.trainstats``, and ParlAI's does not."""
    resumed = _resumed_from_checkpoint(loop)
    # ParlAI sets last_valid_epoch from the last valid report and leaves _last_valid_steps at 0;
    # -vstep N validates at multiples of N, so the grid goes on from the last multiple (a
    # validation at the end of an earlier schedule may lie between two)
    if loop.valid_reports and 'train_steps' in loop.valid_reports[-1]:
        last = loop.valid_reports[-1]['train_steps']
        every = loop.val_every_n_steps
        loop._last_valid_steps = last if every == float('inf') else int(last // every * every)
    _restore_best_under_current_metric(loop)
    if resumed:
        _keep_best_saved_after_checkpoint(loop)
        _model_file_holds_the_best(loop)
        _final_reports_on_the_model_file(loop)


_HIDDEN_WHEN_UNCOUNTED = ('new best ', 'saving best valid model', 'task solved!')


class _HideLines(std_logging.Filter):
    """On ParlAI's logger during a validation that is not counted (``--count-validations-after``):
    drops ParlAI's lines that announce a new best, the saving of the best model and a solved task,
    which would contradict the line logged instead."""

    def __init__(self, prefixes):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record):
        return not str(record.msg).startswith(self.prefixes)


def _validate_the_schedule_end(loop, ended=False):
    """ParlAI checks its update budget (``--num-epochs``, ``--max-train-steps``) before its
    validation schedule, so the last stretch of a fixed schedule is never validated and cannot
    become the model: with ``-veps 1 --num-epochs 7`` (ETHREED's reference schedule, whose
    reference validates after every epoch, the last one too) epoch 7 is trained and thrown away.
    Called where the budget is checked: when it is reached and updates were made since the last
    validation, the weights are validated once more (a new best is saved as usual). Not for
    ``--max-train-time``, which cuts a run anywhere, nor where no validation is configured."""
    # ``ended``: the learning-rate schedule stopped training in the middle of a parley, whose
    # update was made but not counted
    updates = loop._train_steps + (1 if ended else 0)
    if loop._schedule_end_validated or updates <= loop._last_valid_steps:
        return
    if not ended and loop._total_epochs < loop.max_num_epochs and updates < loop.max_train_steps:
        return
    inf = float('inf')
    if (loop.val_every_n_epochs, loop.val_every_n_steps, loop.val_every_n_secs) == (inf, inf, inf):
        return
    loop._schedule_end_validated = True
    loop._train_steps = updates
    logging.info(f'the training schedule ends at {updates} updates: validating its last weights')
    try:
        loop.validate()
    except StopTrainException:
        pass
    loop.last_valid_epoch = loop._total_epochs
    loop._last_valid_steps = loop._train_steps


def _metric_value(value):
    return value.value() if hasattr(value, 'value') else value


def replay_validations(valid_reports, metric, optim, count_after=0):
    """Best value and impatience that ``TrainLoop.validate`` would hold after these valid reports
    under ``metric`` (``optim`` 1 to maximise, -1 to minimise) and ``--count-validations-after``;
    None when a report lacks the metric."""
    best, impatience = None, 0
    for report in valid_reports:
        if metric not in report:
            return None
        value = _metric_value(report[metric])
        if count_after and report.get('train_steps', 0) <= count_after:
            best, impatience = None, 0
        elif best is None or optim * value > optim * best:
            best, impatience = value, 0
        else:
            impatience += 1
    return best, impatience


def _restore_best_under_current_metric(loop):
    """A run resumed with another ``--validation-metric`` than it was saved with (a changed
    default, or a user's choice): ParlAI restores the best value of the *old* metric and compares
    the new metric's values with it (PPL 41 "beats" an old best of 48 whatever the run did). When
    the restored best is no value of the current metric in any earlier validation, the best and
    the impatience are recomputed from those validations under the current metric."""
    best_valid, reports = loop.best_valid, loop.valid_reports
    metric = loop.opt.get('validation_metric')
    if best_valid is None or not reports or not metric:
        return
    if any(metric in r and _metric_value(r[metric]) == best_valid for r in reports):
        return
    replay = replay_validations(reports, metric, loop.valid_optim, loop.opt.get('count_validations_after') or 0)
    if replay is None or replay[0] is None:
        return
    loop.best_valid, loop.impatience = replay
    logging.warning(
        f"the saved best valid figure {best_valid:.6g} is not the {metric} of any of the run's "
        f'{len(reports)} validations: it was selected under another --validation-metric. Best and '
        f'patience are recomputed under {metric} from those validations: best {replay[0]:.6g}, '
        f"impatience {replay[1]}. The model file keeps the earlier metric's best until a "
        f'validation beats {replay[0]:.6g}.'
    )


def _keep_best_saved_after_checkpoint(loop):
    """Resumed from ``<model_file>.checkpoint`` while ``<model_file>.trainstats`` (written with
    the best model) records a later update count and a better best figure of the current metric
    in a counted validation: the run was killed between that validation and the next checkpoint.
    ParlAI restores the checkpoint's older best, and the first repeated validation that beats it
    would overwrite the better model file. The model file's best is kept, with the impatience
    it had there (0: the best was its last validation)."""
    opt = loop.opt
    model_file = opt['model_file']
    metric = opt.get('validation_metric')
    if not metric:
        return
    try:
        with open(model_file + '.trainstats') as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return
    best, steps = saved.get('best_valid'), saved.get('train_steps') or 0
    reports = saved.get('valid_reports') or []
    if best is None or steps <= loop._train_steps or steps <= (opt.get('count_validations_after') or 0):
        return
    if not reports or metric not in reports[-1] or _metric_value(reports[-1][metric]) != best:
        return  # not this metric's best, or not the validation the model file was saved at
    if loop.best_valid is not None and loop.valid_optim * best <= loop.valid_optim * loop.best_valid:
        return
    logging.warning(
        f'{model_file} was saved at {steps} updates with the best {metric} {best:.6g}, after the '
        f'checkpoint this run resumes from ({loop._train_steps} updates, best '
        f'{"none" if loop.best_valid is None else format(loop.best_valid, ".6g")}): the run was stopped '
        f'between that validation and its next checkpoint. Its best {best:.6g} is kept, so only a '
        f'validation that beats it replaces the model file (--save-after-valid true avoids this).'
    )
    loop.best_valid, loop.impatience = best, 0


def _model_file_holds_the_best(loop):
    """ParlAI starts every run with ``saved = False`` and, when training ends with it still False,
    saves the *current* weights to the model file (and reports on them). A resumed run that never
    beats its best after resuming (it runs out of patience, or its update budget ends) therefore
    overwrites the best model with its last weights. Resumed from a checkpoint with a best figure
    and a model file, that file already holds the best: ``saved`` starts True."""
    if loop.best_valid is not None and os.path.isfile(loop.opt['model_file']):
        loop.saved = True


def _resumed_from_checkpoint(loop):
    """Whether ParlAI resumed this run from ``<model_file>.checkpoint`` (it then points
    ``init_model`` there; the repairs below apply only to such runs)."""
    model_file = loop.opt.get('model_file')
    return bool(model_file) and loop.opt.get('init_model') == model_file + '.checkpoint'


def _final_reports_on_the_model_file(loop):
    """After training, ``train_model`` reloads the agent from its options to report on the best
    weights; a resumed run's options still point ``init_model`` at ``<model_file>.checkpoint``
    (``load_from_checkpoint`` then wins over the model file), so its final valid and test reports,
    and those in ``<model_file>.trainstats``, were of the last checkpoint. The reload now loads the
    model file, as for a run that was never interrupted. Only that reload reads the loop's
    ``init_model``: the agent already holds the checkpoint's weights and options."""
    loop.opt['init_model'] = loop.opt['model_file']
