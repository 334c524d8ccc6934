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
start-up hook calls it (:mod:`parlai_empathy.integration.startup`) on a process's first ``import parlai``, so
they are in place before any ParlAI module loads, in spawned workers too.

This module is also the one way the package repairs a ParlAI module (:func:`repair`, used by
:mod:`parlai_empathy.integration.cpu_distributed` and
:mod:`parlai_empathy.integration.safe_loading`): a repair is applied
when its module is imported, or at once if it already is, to that module only.
"""

import importlib.abc
import importlib.machinery
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
    stand_in.__doc__ = 'parlai_empathy.integration.compat stand-in for setuptools<81 pkg_resources'

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


# ----- Mephisto 1.1.1 and ParlAI's crowdsourcing tasks (the crowd extra) ------------------------
# Applied only by prepare_crowd(), which our crowd commands call before they import Mephisto; the
# start-up hook never arms these, so a process that runs no crowd command is untouched.
#
# module -> [(upstream text, replacement, the upstream line it works around)]. Each upstream text
# must occur exactly once in the installed file, else the versions differ from the tested ones
# and the import stops with that message instead of running patched code it was not made for.
CROWD_SOURCE_PATCHES = {
    'mephisto.operations.hydra_config': [
        # Python 3.11 refuses an unhashable dataclass instance as a field default
        # ("ValueError: mutable default ... use default_factory"); Mephisto's later releases
        # made the same three fields default factories.
        (
            '    task: TaskRunArgs = TaskRunArgs()\n',
            '    task: TaskRunArgs = field(default_factory=TaskRunArgs)\n',
            'hydra_config.py:38',
        ),
        (
            '    database: DatabaseArgs = DatabaseArgs()\n',
            '    database: DatabaseArgs = field(default_factory=DatabaseArgs)\n',
            'hydra_config.py:39',
        ),
        (
            '    mephisto: MephistoConfig = MephistoConfig()\n',
            '    mephisto: MephistoConfig = field(default_factory=MephistoConfig)\n',
            'hydra_config.py:45',
        ),
    ],
}
# Mephisto's metrics endpoint (prometheus_client's start_http_server) listens on every interface.
CROWD_SOURCE_PATCHES['mephisto.utils.metrics'] = [
    (
        '        start_http_server(3031)\n',
        "        start_http_server(3031, addr='127.0.0.1')\n",
        'utils/metrics.py:122',
    ),
]
# The node router Mephisto's local architect starts: `server.listen(PORT, ...)` listens on every
# interface and no option changes it, so the router copy under the run folder gets a host.
ROUTER_LISTEN_PATCH = (
    'server.listen(PORT, function () {',
    "server.listen(PORT, '127.0.0.1', function () {",
    'router/node/server.js:379',
)
# ... and every request first passes our guard (humaneval/crowd/webapp/router_guard.js says what
# it stops: a file download route that serves any file of the machine, unbounded uploads, and
# bodies that crash a handler or leave a request unanswered).
ROUTER_GUARD_PATCH = (
    'app.use(bodyParser.json());\n',
    'app.use(bodyParser.json());\n'
    'require("./router_guard.js")(app, () => Object.keys(pending_agent_requests).length);\n',
    'router/node/server.js:40',
)


class CrowdVersionError(RuntimeError):
    """The installed Mephisto or ParlAI crowdsourcing code is not the version the patches fit."""


def patch_text(text: str, patches, where: str) -> str:
    """Apply ``(upstream, replacement, line)`` patches, each upstream text exactly once."""
    for old, new, line in patches:
        count = text.count(old)
        if count != 1:
            raise CrowdVersionError(
                f'{where}: expected the upstream line {line} ({old.strip()!r}) once, found it '
                f'{count} times: this is not the tested Mephisto 1.1.1 (install the crowd extra: '
                'make install-crowd)'
            )
        text = text.replace(old, new)
    return text


class _PatchedSourceLoader(importlib.machinery.SourceFileLoader):
    """Compiles the installed source with its patches applied (never from or into a cached .pyc,
    so the file in site-packages and its bytecode stay as installed)."""

    def __init__(self, fullname, path, patches):
        super().__init__(fullname, path)
        self.patches = patches

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        with open(path, encoding='utf-8') as f:
            source = patch_text(f.read(), self.patches, path)
        return compile(source, path, 'exec', dont_inherit=True)


class _PatchSourceOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; gives the modules it has patches for a patching loader."""

    def __init__(self, patches):
        self.patches = patches

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.patches:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            raise CrowdVersionError(
                f'{fullname}: not found as a source file to patch (install the crowd extra: make install-crowd)'
            )
        spec.loader = _PatchedSourceLoader(spec.loader.name, spec.loader.path, self.patches[fullname])
        return spec


def _run_folder_patches(data_dir: str):
    """Where Mephisto keeps its files, baked into its modules as the run folder's paths."""
    import os

    config, tmp = os.path.join(data_dir, 'config') + os.sep, os.path.join(data_dir, 'tmp')
    return {
        # ~/.mephisto/config.yml, which import mephisto creates (init_config)
        'mephisto.operations.config_handler': [
            (
                'DEFAULT_CONFIG_FOLDER = os.path.expanduser("~/.mephisto/")\n',
                f'DEFAULT_CONFIG_FOLDER = {config!r}\n',
                'operations/config_handler.py:14',
            )
        ],
        # the local architect's deploy folder and the metrics' pid files: site-packages/tmp
        'mephisto.utils.dirs': [
            ('    return os.path.join(get_root_dir(), "tmp")\n', f'    return {tmp!r}\n', 'utils/dirs.py:128')
        ],
    }


def prepare_crowd(data_dir: str) -> None:
    """Make Mephisto 1.1.1 importable on Python 3.11 and keep its files under ``data_dir``.

    Call it before the first ``import mephisto``, once per process: besides
    :data:`CROWD_SOURCE_PATCHES`, Mephisto's own folders are patched to lie in ``data_dir``
    (``config/``, ``data/``, ``tmp/``): its config file would go to ``~/.mephisto/`` and its
    local server and pid files to ``site-packages/tmp``. The config file names ``data/`` as the
    data folder, so Mephisto never asks for one with ``input()`` (``utils/dirs.py:74``).
    """
    import os

    import yaml

    data_dir = os.path.abspath(data_dir)
    patches = dict(CROWD_SOURCE_PATCHES, **_run_folder_patches(data_dir))
    loaded = [m for m in patches if m in sys.modules]
    for name in loaded:
        if getattr(sys.modules[name].__spec__.loader, 'patches', None) != patches[name]:
            raise CrowdVersionError(
                f'{name} was imported before prepare_crowd({data_dir!r}) (one crowd run folder per process)'
            )
    if loaded:
        return
    for name in ('config', 'data', 'tmp'):
        os.makedirs(os.path.join(data_dir, name), exist_ok=True)
    config_file = os.path.join(data_dir, 'config', 'config.yml')
    with open(config_file, 'w', encoding='utf-8') as f:
        yaml.safe_dump({'core': {'main_data_directory': os.path.join(data_dir, 'data')}}, f)
    for finder in [f for f in sys.meta_path if isinstance(f, _PatchSourceOnImport)]:
        sys.meta_path.remove(finder)
    sys.meta_path.insert(0, _PatchSourceOnImport(patches))
