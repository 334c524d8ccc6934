"""Make ParlAI 1.7.2 run on Python 3.11, torch 2.13, numpy 2 and setuptools>=81.

ParlAI is frozen, so its breakage against the modern stack is absorbed here, in one place, by
repairing the *ParlAI* modules that break. torch, numpy and setuptools are never patched:

* ``parlai.nn.lr_scheduler`` builds ``ReduceLROnPlateau(..., verbose=True)``; torch 2.13 removed
  ``verbose``. That module gets a view of ``torch.optim`` whose ``ReduceLROnPlateau`` drops it.
* ``parlai.core.dict`` uses ``np.int`` (gone in numpy 2). That module gets a view of numpy that
  has ``int``.
* ``parlai.core.opt`` imports ``pkg_resources`` (gone in setuptools>=81). When it is missing, a
  small stand-in built on ``importlib.resources`` is registered under that name.
* ``multiprocessing_train`` assumes CUDA and nccl; :mod:`parlai_empathy.cpu_distributed` makes it
  use gloo on CPU-only machines (GPU runs are untouched).
* ``parlai.scripts.train_model.TrainLoop`` restores the epoch of the last validation when it resumes
  from a ``.trainstats`` but not its update count, so a run resumed with ``-vstep N`` validates at
  its first update and then every N from there: every restart costs a whole extra validation and
  moves the learning curve off its grid. Its ``__init__`` is wrapped to restore that count too.
  It also checks its update budget before its validation schedule, so the end of a fixed schedule
  (``--num-epochs``, ``--max-train-steps``) is never validated: the schedule's last stretch is
  validated too (``_get_time``, called just before that check, is wrapped; so is the world's
  ``parley``, out of which the linear learning-rate schedule ends training by an exception).
  Its ``validate`` is wrapped for ``--count-validations-after N`` (an option of our generators):
  a validation at or before N updates runs as usual (logged, the model saved) but then forgets
  the best valid figure and the impatience (its log line says so, in place of ParlAI's "new
  best ... saving best valid model"), so neither counts until after N updates, as the
  MIME reference's training loop does (it skips its best-PPL and patience bookkeeping for the
  validations before 10,000 updates). Without the option nothing changes. A run resumed under
  another ``--validation-metric`` than it was saved with gets its best figure and impatience
  recomputed from its earlier validations under the new metric (ParlAI compares the new metric
  with the old one's best). A run killed after a validation saved a new best model file but
  before its next ``.checkpoint`` (``--save-every-n-secs`` without ``--save-after-valid``)
  resumes with the checkpoint's older best figure, so the first repeated validation that beats
  that figure would overwrite the better model file: it keeps the model file's best instead. And
  a resumed run that never beats its best after resuming no longer ends by saving its last
  weights over the best model file (ParlAI saves the final weights of a run that "saved" nothing).
  A resumed run's final valid and test reports (``train_model``'s reload after training) are of
  the best model file, not of the last checkpoint. ``--seed`` is set before the model is built
  (ParlAI sets it after, so two runs with the same seed started from different weights).
* ``parlai.core.agents.compare_init_model_opts`` crashes on a saved list option that is None now
  (a classifier's ``--classes``): it compares without the unset options.
* ``parlai <command> --help`` listed every option twice (the superscript copies a script's options
  into the subcommand's own group and appends the script's groups too), and a command with a
  required option ended its help in "Parse Error" with exit status 2 (``add_extra_args`` parses
  without ``--help`` first, and that parse enforced the required options): each option is listed
  once, and only the real parse enforces required options.

The repairs are applied by :func:`apply` (every teacher, agent and script of ours imports this
module) and, through the ``parlai_empathy_compat.pth`` start-up hook the wheel installs
(:mod:`parlai_empathy.startup`, which imports this module on a process's first ``import parlai``),
the moment those ParlAI modules are first imported in any process.
"""
import importlib.abc
import importlib.util
import json
import os
import sys
import types
import warnings

_REPAIRS = {}  # ParlAI module name -> function(module) that applies every repair of it in place


def _repairs_for(module_name):
    """Register ``fn(module)`` as a repair of ``module_name``; a module may have several, each
    applied in the order registered (each must be idempotent: :func:`apply` may run it again)."""
    def register(fn):
        earlier = _REPAIRS.get(module_name)
        if earlier is None:
            _REPAIRS[module_name] = fn
        else:
            def both(module, earlier=earlier):
                earlier(module)
                fn(module)

            _REPAIRS[module_name] = both
        return fn

    return register


class _ModuleView(types.ModuleType):
    """A read-through view of a module with a few names overridden.

    It is handed to one ParlAI module in place of the real one, so the real module stays intact
    for everybody else.
    """

    def __init__(self, wrapped, **overrides):
        super().__init__(wrapped.__name__, wrapped.__doc__)
        self.__dict__['_wrapped'] = wrapped
        self.__dict__.update(overrides)

    def __getattr__(self, name):
        return getattr(self.__dict__['_wrapped'], name)


@_repairs_for('parlai.nn.lr_scheduler')
def _repair_lr_scheduler(module):
    real_optim = module.optim
    if isinstance(real_optim, _ModuleView):
        return
    real_plateau = real_optim.lr_scheduler.ReduceLROnPlateau

    class ReduceLROnPlateau(real_plateau):
        """torch>=2.7 dropped the ``verbose`` argument that ParlAI still passes."""

        def __init__(self, *args, verbose=None, **kwargs):
            super().__init__(*args, **kwargs)

    lr_scheduler_view = _ModuleView(real_optim.lr_scheduler, ReduceLROnPlateau=ReduceLROnPlateau)
    module.optim = _ModuleView(real_optim, lr_scheduler=lr_scheduler_view)


@_repairs_for('parlai.core.dict')
def _repair_dict(module):
    real_np = module.np
    if isinstance(real_np, _ModuleView) or 'int' in real_np.__dict__:
        return
    module.np = _ModuleView(real_np, int=int)


@_repairs_for('parlai.scripts.train_model')
def _repair_train_loop(module):
    loop = module.TrainLoop
    if getattr(loop.__init__, '_empathy_resume_grid', False):
        return
    real_init = loop.__init__

    def __init__(self, *args, **kwargs):
        opt = args[0] if args else kwargs.get('opt')
        if opt is not None and opt.get('seed') is not None:
            # ParlAI seeds after the TrainLoop has built the model: --seed fixed the data order
            # and dropout but not the initial weights
            module.set_seed(opt['seed'])
        real_init(self, *args, **kwargs)
        resumed = _resumed_from_checkpoint(self)
        # ParlAI sets last_valid_epoch from the last valid report and leaves _last_valid_steps at 0;
        # -vstep N validates at multiples of N, so the grid goes on from the last multiple (a
        # validation at the end of an earlier schedule may lie between two)
        if self.valid_reports and 'train_steps' in self.valid_reports[-1]:
            last = self.valid_reports[-1]['train_steps']
            every = self.val_every_n_steps
            self._last_valid_steps = last if every == float('inf') else int(last // every * every)
        _restore_best_under_current_metric(self, module.logging)
        if resumed:
            _keep_best_saved_after_checkpoint(self, module.logging)
            _model_file_holds_the_best(self)
            _final_reports_on_the_model_file(self)

    __init__._empathy_resume_grid = True
    loop.__init__ = __init__

    real_validate = loop.validate

    def validate(self):
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

    loop.validate = validate

    real_get_time = loop._get_time

    def _get_time(self, world):
        times = real_get_time(self, world)
        # ParlAI counts the examples right after this call; the validation below records them, and
        # at a run's first update (--max-train-steps 1) they did not exist yet (AttributeError)
        self._total_exs = int(module.np.round(self._total_epochs * world.num_examples()))
        _validate_the_schedule_end(self, module.logging, module.StopTrainException)
        return times

    loop._get_time = _get_time

    real_train_steps = loop.train_steps

    def train_steps(self):
        # a schedule can also end by an exception out of world.parley(): the linear learning-rate
        # schedule raises "End of Linear LR Schedule" after its last update, which leaves the loop
        # before _get_time (and so before the check above)
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
            yield from real_train_steps(self)
        finally:
            world.parley = real_parley

    loop.train_steps = train_steps


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


@_repairs_for('parlai.core.agents')
def _repair_compare_init_model_opts(module):
    """``compare_init_model_opts`` (which only logs how a resumed or initialising model's options
    differ) raises TypeError when a saved option is a list and the current one is None, e.g. a
    classifier's ``--classes``, which our agent fills from the teacher after this check: a killed
    classifier run could not resume. Unset options are dropped from the comparison instead."""
    real = module.compare_init_model_opts
    if getattr(real, '_empathy_none_safe', False):
        return

    def compare_init_model_opts(opt, curr_opt):
        return real(opt, {k: v for k, v in curr_opt.items() if v is not None})

    compare_init_model_opts._empathy_none_safe = True
    module.compare_init_model_opts = compare_init_model_opts


@_repairs_for('parlai.core.params')
def _repair_help_with_required_options(module):
    """``ParlaiParser.add_extra_args`` first parses the command line without ``--help`` (only to
    find the task and model whose options to add); a script with a required option (``-mf``)
    then stops there with "Parse Error: the following arguments are required" under its help,
    exit status 2. That first parse no longer enforces required options; the real parse after
    it still does, so a missing one is reported as before."""
    parser_class = module.ParlaiParser
    real = parser_class.parse_known_args
    if getattr(real, '_empathy_help_ok', False):
        return

    def parse_known_args(self, args=None, namespace=None, nohelp=False):
        if not nohelp:
            return real(self, args, namespace, nohelp)
        required = [action for action in self._actions if action.required]
        for action in required:
            action.required = False
        try:
            return real(self, args, namespace, nohelp)
        finally:
            for action in required:
                action.required = True

    parse_known_args._empathy_help_ok = True
    parser_class.parse_known_args = parse_known_args


@_repairs_for('parlai.core.script')
def _repair_subcommand_help(module):
    """``parlai <command> --help`` listed every option twice: the super-command copies each of the
    script's options into the subcommand's own option group *and* appends the script's groups,
    which hold them too. The subcommand's own groups now show only what no script group shows."""
    parser_class = module._SubcommandParser
    real = parser_class.format_help
    if getattr(real, '_empathy_once', False):
        return

    def format_help(self):
        own = [group for group in (self._positionals, self._optionals) if group in self._action_groups]
        shown = {id(action) for group in self._action_groups if group not in own
                 for action in group._group_actions}
        kept = [(group, group._group_actions) for group in own]
        try:
            for group in own:
                group._group_actions = [a for a in group._group_actions if id(a) not in shown]
            return real(self)
        finally:
            for group, actions in kept:
                group._group_actions = actions

    format_help._empathy_once = True
    parser_class.format_help = format_help


def pkg_resources_stand_in():
    """The two ``pkg_resources`` functions ParlAI 1.7.2 calls, on ``importlib.resources``."""
    import importlib.resources as resources

    stand_in = types.ModuleType('pkg_resources')
    stand_in.__doc__ = 'parlai_empathy.compat stand-in for setuptools<81 pkg_resources'

    def resource_exists(package, resource_name):
        try:
            return resources.files(package).joinpath(resource_name).is_file()
        except (ModuleNotFoundError, TypeError):
            return False

    def resource_filename(package, resource_name):
        return str(resources.files(package).joinpath(resource_name))

    stand_in.resource_exists = resource_exists
    stand_in.resource_filename = resource_filename
    return stand_in


def ensure_pkg_resources():
    # setuptools<81 still has pkg_resources but warns on every ParlAI start; the pin is deliberate.
    warnings.filterwarnings('ignore', message='pkg_resources is deprecated', category=UserWarning)
    if sys.modules.get('pkg_resources') is not None or importlib.util.find_spec('pkg_resources') is not None:
        return
    sys.modules['pkg_resources'] = pkg_resources_stand_in()


def apply():
    """Repair every ParlAI module that is already imported; idempotent."""
    ensure_pkg_resources()
    for name, repair in _REPAIRS.items():
        module = sys.modules.get(name)
        if module is not None:
            repair(module)


class _RepairAfterImport(importlib.abc.MetaPathFinder):
    """Import hook: finds nothing itself, but wraps the loader of the modules we repair."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _REPAIRS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, 'find_spec'):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _RepairingLoader(spec.loader, _REPAIRS[fullname])
                return spec
        return None


class _RepairingLoader(importlib.abc.Loader):
    def __init__(self, loader, repair):
        self._loader = loader
        self._repair = repair

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._repair(module)


def install_import_hook():
    """Called when this module is imported (by the start-up hook on a process's first
    ``import parlai``, or by our own modules); must never break Python."""
    try:
        ensure_pkg_resources()
        if not any(isinstance(f, _RepairAfterImport) for f in sys.meta_path):
            sys.meta_path.insert(0, _RepairAfterImport())
        apply()
    except Exception as err:  # pragma: no cover - defensive: never break interpreter start-up
        sys.stderr.write(f'parlai_empathy.compat: start-up hook disabled ({err!r})\n')


# CPU-only multiprocessing_train (gloo) registers its repairs here too, so that every process --
# spawned workers included -- gets them from the start-up hook.
from parlai_empathy import cpu_distributed  # noqa: F401
# Model and .opt files are opened without unpickling (parlai_empathy.safe_loading): also armed here.
from parlai_empathy import safe_loading  # noqa: F401

install_import_hook()
