"""Make ParlAI 1.7.2 run on Python 3.11, torch 2.13, numpy 2 and setuptools>=81.

ParlAI is frozen, so its breakage against the modern stack is absorbed here, and only that: each
shim gives one ParlAI module what the modern stack took away. torch, numpy and setuptools are never
patched, and no behaviour of ParlAI's that works on this stack is changed:

* ``parlai.nn.lr_scheduler`` builds ``ReduceLROnPlateau(..., verbose=True)``; torch 2.13 removed
  ``verbose``. That module gets a view of ``torch.optim`` whose ``ReduceLROnPlateau`` drops it.
* ``parlai.core.dict`` uses ``np.int`` (gone in numpy 2). That module gets a view of numpy that
  has ``int``.
* ``parlai.core.opt`` imports ``pkg_resources`` (gone in setuptools>=81). When it is missing, a
  small stand-in built on ``importlib.resources`` is registered under that name.

Nothing happens on import. :func:`install` arms the shims; the ``parlai_empathy_compat.pth``
start-up hook calls it (:mod:`parlai_empathy.startup`) on a process's first ``import parlai``, so
they are in place before any ParlAI module loads, in spawned workers too.

This module is also the one way the package repairs a ParlAI module (:func:`repair`, used by
:mod:`parlai_empathy.cpu_distributed` and :mod:`parlai_empathy.safe_loading`): a repair is applied
when its module is imported, or at once if it already is, to that module only.
"""
import importlib.abc
import importlib.util
import sys
import types
import warnings
from typing import Callable, Dict, List

Repair = Callable[[types.ModuleType], None]
_REPAIRS: Dict[str, List[Repair]] = {}  # ParlAI module name -> its repairs, in the order registered


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


def repair(module_name: str, fn: Repair) -> None:
    """Apply ``fn(module)`` to the ParlAI module ``module_name`` when it is imported (at once if it
    already is). ``fn`` must be idempotent; registering it twice registers it once."""
    repairs = _REPAIRS.setdefault(module_name, [])
    if fn not in repairs:
        repairs.append(fn)
    if not any(isinstance(finder, _RepairAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RepairAfterImport())
    module = sys.modules.get(module_name)
    if module is not None:
        fn(module)


def _apply_repairs(module):
    for fn in _REPAIRS.get(module.__name__, ()):
        fn(module)


class _RepairAfterImport(importlib.abc.MetaPathFinder):
    """Import hook: finds nothing itself, but wraps the loader of the modules that have repairs."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _REPAIRS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, 'find_spec'):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _RepairingLoader(spec.loader)
                return spec
        return None


class _RepairingLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _apply_repairs(module)


# ----- the version shims -------------------------------------------------------------------------
def _shim_lr_scheduler(module):
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


def _shim_dict(module):
    real_np = module.np
    if isinstance(real_np, _ModuleView) or 'int' in real_np.__dict__:
        return
    module.np = _ModuleView(real_np, int=int)


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


VERSION_SHIMS = {'parlai.nn.lr_scheduler': _shim_lr_scheduler, 'parlai.core.dict': _shim_dict}


def install() -> None:
    """Arm the version shims (idempotent)."""
    ensure_pkg_resources()
    for module_name, fn in VERSION_SHIMS.items():
        repair(module_name, fn)
