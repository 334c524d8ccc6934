"""How a ``parlai train_model`` run of one of the project's agents differs from ParlAI 1.7.2's loop.

The project's rows rely on a few changes to ParlAI's ``TrainLoop``. They apply to a loop that
trains one of our agents, and to nothing else: when such an agent is built by a ``TrainLoop``
(:class:`~parlai_empathy.agents.safety.SafeAgentMixin` calls :func:`attach`), that one loop
object gets its own ``validate``, ``_get_time`` and ``train_steps``, which call ParlAI's. The
``TrainLoop`` class and ``parlai.scripts.train_model`` are never modified, so a stock agent, in the
same process or not, trains exactly as upstream ParlAI does.

The changes, and why:

* ``--seed`` is set before the model is built. ParlAI seeds after its ``TrainLoop`` has built the
  agent, so two runs with the same seed started from different weights.
* Resuming from a ``.trainstats`` restores the update count of the last validation too. ParlAI
  restores its epoch but not its update count, so a run resumed with ``-vstep N`` validated at its
  first update and then every N from there: a whole extra validation per restart, and a learning
  curve off its grid.
* The end of a fixed schedule (``--num-epochs``, ``--max-train-steps``, the linear learning-rate
  schedule's last update) is validated. ParlAI checks its update budget before its validation
  schedule, so the schedule's last stretch was trained and thrown away.
* ``--count-validations-after N`` (an option of our generators): a validation at or before N
  updates runs as usual (logged, the model saved) but then forgets the best valid figure and the
  impatience, as the MIME reference's training loop does before 10,000 updates.
* A run resumed under another ``--validation-metric`` than it was saved with gets its best figure
  and impatience recomputed from its earlier validations under the new metric (ParlAI compares
  the new metric with the old one's best).
* A run killed after a validation saved a new best model file but before its next
  ``.checkpoint`` resumes with the model file's best, not the checkpoint's older one (the first
  repeated validation that beat the older figure would overwrite the better model file).
* A resumed run that never beats its best after resuming does not end by saving its last weights
  over the best model file, and its final valid and test reports are of the best model file, not
  of the last checkpoint.
* The ``.trainstats`` file is written to a temporary name and renamed over the old one. ParlAI
  writes it in place, so a run killed while saving left a truncated ``.checkpoint.trainstats``,
  and the resumed run stopped on a JSON error (the agent saves its own files the same way:
  :meth:`~parlai_empathy.agents.safety.SafeAgentMixin.save`).
"""
import json
import os
import sys
import types
from typing import Optional

from parlai_empathy.files.cache_lock import move_into_place, temporary_name
from parlai_empathy.integration.compat import _ModuleView


def attach(opt) -> None:
    """Called as one of our agents is built (before its ``__init__``): if a ``TrainLoop`` is
    building it, that loop gets the changes above. Idempotent; nothing happens outside training
    (evaluation, chat, the final reload of the best model after training)."""
    loop = _loop_building_an_agent()
    if loop is None or getattr(loop, '_empathy_loop', False):
        return
    from parlai.scripts import train_model as module

    loop._empathy_loop = True
    if opt.get('seed') is not None:
        module.set_seed(opt['seed'])  # before the model is built: --seed fixes the initial weights too
    loop.validate = types.MethodType(_validate, loop)
    loop._get_time = types.MethodType(_get_time, loop)
    loop.train_steps = types.MethodType(_train_steps, loop)
    loop._save_train_stats = types.MethodType(_save_train_stats, loop)


def _loop_building_an_agent() -> Optional[object]:
    """The ``TrainLoop`` whose ``__init__`` is on the call stack, if any (it creates the agent)."""
    module = sys.modules.get('parlai.scripts.train_model')
    if module is None:
        return None
    init_code = module.TrainLoop.__init__.__code__
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is init_code:
            return frame.f_locals.get('self')
        frame = frame.f_back
    return None


def _after_init(loop, module):
    """What the loop's ``__init__`` would do after loading its ``.trainstats``; run once, before the
    first update (the agent is built in the middle of ``__init__``, before that file is read)."""
    resumed = _resumed_from_checkpoint(loop)
    # ParlAI sets last_valid_epoch from the last valid report and leaves _last_valid_steps at 0;
    # -vstep N validates at multiples of N, so the grid goes on from the last multiple (a
    # validation at the end of an earlier schedule may lie between two)
    if loop.valid_reports and 'train_steps' in loop.valid_reports[-1]:
        last = loop.valid_reports[-1]['train_steps']
        every = loop.val_every_n_steps
        loop._last_valid_steps = last if every == float('inf') else int(last // every * every)
    _restore_best_under_current_metric(loop, module.logging)
    if resumed:
        _keep_best_saved_after_checkpoint(loop, module.logging)
        _model_file_holds_the_best(loop)
        _final_reports_on_the_model_file(loop)


def _validate(self):
    from parlai.scripts import train_model as module

    real_validate = type(self).validate
    after = self.opt.get('count_validations_after') or 0
    if self._train_steps > after:
        return real_validate(self)
    # not counted: ParlAI compares it with nothing (best_valid is None), so it would announce
    # a "new best" and save "the best valid model"; it logs what happens instead
    real_logging = module.logging
    module.logging = _UncountedValidationLog(real_logging)
    try:
        real_validate(self)
    finally:
        module.logging = real_logging
    metric = self.opt.get('validation_metric')
    value = _metric_value(self.valid_reports[-1].get(metric)) if self.valid_reports else None
    figure = f'{metric} {value:.4g}' if isinstance(value, (int, float)) else str(metric)
    saved = f'; its weights are saved to {self.opt["model_file"]} until a counted validation ' \
        'replaces them' if self.opt.get('model_file') else ''
    real_logging.info(f'validation at {self._train_steps} updates not counted for the best model or '
                      f'patience (--count-validations-after {after}): {figure}{saved}')
    # the next validation is compared with nothing (so it saves the model), as the reference's
    # first counted one is; patience starts from 0
    self.best_valid, self.impatience = None, 0
    return False


def _get_time(self, world):
    from parlai.scripts import train_model as module

    times = type(self)._get_time(self, world)
    # ParlAI counts the examples right after this call; the validation below records them, and
    # at a run's first update (--max-train-steps 1) they did not exist yet (AttributeError)
    self._total_exs = int(module.np.round(self._total_epochs * world.num_examples()))
    _validate_the_schedule_end(self, module.logging, module.StopTrainException)
    return times


def _save_train_stats(self, suffix=None):
    real_save = type(self)._save_train_stats
    model_file = self.opt.get('model_file')
    if not model_file:
        return real_save(self, suffix)
    final = f'{model_file}{suffix or ""}.trainstats'
    # ParlAI names the file model_file + suffix + '.trainstats'; a suffix of ours makes it temporary
    partial_suffix = temporary_name(suffix or '')
    real_save(self, partial_suffix)
    written = f'{model_file}{partial_suffix}.trainstats'
    if os.path.exists(written):  # a non-primary worker writes nothing
        move_into_place(written, final)


def _train_steps(self):
    from parlai.scripts import train_model as module

    if not getattr(self, '_empathy_after_init', False):
        self._empathy_after_init = True
        _after_init(self, module)
    # a schedule can also end by an exception out of world.parley(): the linear learning-rate
    # schedule raises "End of Linear LR Schedule" after its last update, which leaves the loop
    # before _get_time (and so before the check there)
    world = self.world  # train_steps deletes self.world when it is done
    real_parley = world.parley

    def parley():
        try:
            return real_parley()
        except module.StopTrainException as err:
            if 'End of Linear LR Schedule' in str(err):  # validated now: the loop tears down next
                world.reset_metrics()
                _validate_the_schedule_end(self, module.logging, module.StopTrainException, ended=True)
            raise

    world.parley = parley
    try:
        yield from type(self).train_steps(self)
    finally:
        world.parley = real_parley


_HIDDEN_WHEN_UNCOUNTED = ('new best ', 'saving best valid model', 'task solved!')


class _UncountedValidationLog(_ModuleView):
    """``parlai.utils.logging`` for ``train_model`` during a validation that is not counted
    (``--count-validations-after``): without ParlAI's lines that announce a new best, the saving of
    the best model and a solved task, which would contradict the line logged instead."""

    def __init__(self, logging):
        def quiet(log):
            def filtered(msg, *args, **kwargs):
                if not str(msg).startswith(_HIDDEN_WHEN_UNCOUNTED):
                    log(msg, *args, **kwargs)
            return filtered

        super().__init__(logging, success=quiet(logging.success), info=quiet(logging.info))


def _validate_the_schedule_end(loop, logging, stop_exception, ended=False):
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
    if getattr(loop, '_empathy_schedule_end_validated', False) or updates <= loop._last_valid_steps:
        return
    if not ended and loop._total_epochs < loop.max_num_epochs and updates < loop.max_train_steps:
        return
    inf = float('inf')
    if (loop.val_every_n_epochs, loop.val_every_n_steps, loop.val_every_n_secs) == (inf, inf, inf):
        return
    loop._empathy_schedule_end_validated = True
    loop._train_steps = updates
    logging.info(f'the training schedule ends at {updates} updates: validating its last weights')
    try:
        loop.validate()
    except stop_exception:
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


def _restore_best_under_current_metric(loop, logging):
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
        f'the saved best valid figure {best_valid:.6g} is not the {metric} of any of the run\'s '
        f'{len(reports)} validations: it was selected under another --validation-metric. Best and '
        f'patience are recomputed under {metric} from those validations: best {replay[0]:.6g}, '
        f'impatience {replay[1]}. The model file keeps the earlier metric\'s best until a '
        f'validation beats {replay[0]:.6g}.')


def _keep_best_saved_after_checkpoint(loop, logging):
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
        f'validation that beats it replaces the model file (--save-after-valid true avoids this).')
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
