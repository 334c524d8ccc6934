"""Opening model files without running code from them.

A PyTorch checkpoint is a pickle, and unpickling can run arbitrary code: ParlAI 1.7.2's
``TorchAgent.load`` calls ``torch.load`` with its own pickle module, i.e. a full unpickle, and its
``Opt.load`` falls back to ``pickle.load`` for an ``.opt`` file that is not UTF-8 text. So
opening a shared model file could run code. Here:

* :func:`load_checkpoint` reads a ParlAI model file with ``torch.load(weights_only=True)``, which
  only rebuilds tensors and plain containers, plus the few safe types ParlAI's checkpoints hold
  (:func:`parlai_safe_globals`). A file that needs anything else is refused
  (:class:`UnsafeModelFile`, naming the file and what it asked for); a truncated, empty or foreign
  file gives a :class:`ModelFileError` that names the file and says what is wrong with it.
* ``.opt`` files are read as JSON only: the repair below (armed by :func:`install`, which the
  start-up hook calls in every process that imports ParlAI) makes ``Opt.load`` refuse pickled
  ones, open only regular files within the ``opt_bytes`` cap (a FIFO would hang it, ``/dev/zero``
  never end), parse within the JSON caps, and name the file, line and column of what it refuses.
  Its refusals are a :class:`ModelFileExit` (a ``SystemExit``): the command ends with the one line,
  and no caller's ``except Exception`` can swallow the refusal and go on. A JSON ``.opt``, the
  only kind ParlAI 1.7.2 writes, loads exactly as before.

* A model folder is opened by the agent its ``.opt`` names, and only the project's agents load
  weights-only: :func:`check_model_trust` reads that ``model`` field as JSON (importing nothing it
  names) and refuses (:class:`UntrustedModelFile`) any other agent unless the user passes
  ``--trust-model-file`` (:func:`add_trust_flag`, on each command of ours that opens models; it also
  arms the check inside ParlAI's parser, which imports that agent while it parses ``-mf``).

The project's agents use this through :class:`parlai_empathy.agents.safety.SafeAgentMixin`.
Import-light: torch is imported only when a file is loaded.
"""

import os
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from parlai_empathy.files.bounded import FileRefused, loads_json, open_regular, read_bytes
from parlai_empathy.files.caps import caps
from parlai_empathy.integration.compat import _ModuleView, repair

# a source checkout's root, three folders above this module (no wheel has it)
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ZIP_MAGIC = b'PK\x03\x04'


class ModelFileError(RuntimeError):
    """A model file that cannot be used: missing, truncated, corrupt or not a ParlAI model file."""


class UnsafeModelFile(ModelFileError):
    """A model file that could only be opened by unpickling arbitrary objects (it could run code)."""


class ModelFileExit(SystemExit):
    """A refusal of a model's ``.opt`` met while ParlAI reads it (``Opt.load``, inside stock
    commands too): it ends the command with its one line, because ParlAI would show any other
    exception as a traceback and some of its callers catch exceptions and go on. ``.error`` is
    the :class:`ModelFileError`, for Python callers."""

    def __init__(self, error: ModelFileError):
        super().__init__(str(error))
        self.error = error


def parlai_safe_globals() -> List[Any]:
    """What ParlAI checkpoints hold besides tensors and plain containers: numpy scalars (the
    learning-rate scheduler keeps the best validation figure, a numpy float, in its state) and the
    dtypes they are rebuilt with. Rebuilding a scalar from its dtype and raw bytes runs no code."""
    import numpy as np

    core = getattr(np, '_core', None) or np.core  # numpy 2 / numpy 1
    dtypes = {type(np.dtype(name)) for name in ('float64', 'float32', 'float16', 'int64', 'int32', 'bool')}
    return [core.multiarray.scalar, np.dtype, *sorted(dtypes, key=lambda t: t.__name__)]


REFUSAL_ADVICE = (
    'parlai-empathy opens model files with torch.load(weights_only=True) and never unpickles '
    'other objects, because unpickling can run code. If you made this file yourself and trust '
    'it, load it once with torch.load(path, weights_only=False), keep only its state dicts '
    '({"model": model_state, "optimizer": optimizer_state, ...}) and torch.save those.'
)


def _unsafe_globals(path: str) -> List[str]:
    import torch

    allowed = {f'{g.__module__}.{g.__qualname__}' for g in parlai_safe_globals()}
    try:
        return [name for name in torch.serialization.get_unsafe_globals_in_checkpoint(path) if name not in allowed]
    except Exception:  # a broken archive: the caller's message covers it
        return []


def _describe_foreign(path: str, head: bytes) -> str:
    if not head:
        return f'{path} is empty (an interrupted save or copy?)'
    if head.startswith(ZIP_MAGIC):
        return (
            f'{path} is a truncated or corrupt PyTorch checkpoint (its zip archive has no '
            'readable end; an interrupted download, copy or save?)'
        )
    if head[:1] == b'\x80':
        return None  # a pickle: decided by the caller
    if head.lstrip()[:1] in (b'{', b'['):
        return f'{path} is a JSON/text file, not a PyTorch checkpoint'
    return f'{path} is not a PyTorch checkpoint (it starts with {head[:16]!r})'


def _check_stored(path: str, handle) -> None:
    """A checkpoint's zip members as ``torch.save`` writes them, stored and not compressed, so that
    loading holds no more than the file's own size: a deflated member could inflate to any size."""
    try:
        with zipfile.ZipFile(handle) as archive:
            members = archive.infolist()
    except zipfile.BadZipFile:
        return  # the loader's own message names a truncated archive
    size = os.fstat(handle.fileno()).st_size
    compressed = [m for m in members if m.compress_type != zipfile.ZIP_STORED]
    unpacked = sum(m.file_size for m in members)
    if compressed or unpacked > size:
        raise ModelFileError(
            f'{path}: {len(compressed)} compressed member(s) ({compressed[0].filename if compressed else "-"!s:.80}, '
            f'...); its {size:,} bytes unpack to {unpacked:,}. torch.save stores checkpoint members '
            'uncompressed, so this is not a checkpoint it wrote and it is not loaded'
        )


def load_checkpoint(path: str, mmap: bool = False) -> Dict[str, Any]:
    """The ``dict`` a ParlAI agent saved to ``path`` (``model`` weights, optimizer state, ...).
    ``mmap``: map the tensors instead of reading them (for callers that only want the plain
    entries, e.g. the update count; a zip checkpoint only).

    Raises :class:`UnsafeModelFile` or :class:`ModelFileError`, both naming ``path``.
    """
    import pickle

    import torch

    if not os.path.lexists(path):
        raise ModelFileError(f'{path}: no such model file')
    try:
        with open_regular(path, 'a model checkpoint', 'checkpoint_bytes') as f:
            head = f.read(64)
            is_zip = zipfile.is_zipfile(f)
            if is_zip:
                _check_stored(path, f)
    except FileRefused as err:
        raise ModelFileError(str(err)) from None
    if not is_zip:
        problem = _describe_foreign(path, head)
        if problem:
            raise ModelFileError(problem)
    try:
        with torch.serialization.safe_globals(parlai_safe_globals()):
            states = torch.load(path, map_location='cpu', weights_only=True, mmap=mmap and is_zip)
    except pickle.UnpicklingError:
        wanted = _unsafe_globals(path) if is_zip else []
        what = (
            f'it refers to {", ".join(wanted)}'
            if wanted
            else 'it is not a weights-only checkpoint'
            if is_zip
            else 'it is a plain pickle, not a torch.save checkpoint'
        )
        raise UnsafeModelFile(
            f'{path} was refused: loading it needs arbitrary unpickling ({what}). {REFUSAL_ADVICE}'
        ) from None
    except (RuntimeError, EOFError, KeyError, ValueError, OSError, zipfile.BadZipFile) as err:
        raise ModelFileError(
            f'{path} is a corrupt or truncated PyTorch checkpoint '
            f'({type(err).__name__}: {str(err).splitlines()[0] if str(err) else "-"})'
        ) from None
    if not isinstance(states, Mapping) or not isinstance(states.get('model'), Mapping):
        if isinstance(states, Mapping) and states and all(torch.is_tensor(v) for v in states.values()):
            kind = 'a bare state dict (weights of some model, without ParlAI\'s "model" entry)'
        elif isinstance(states, Mapping):
            kind = f'a dict without "model" weights (keys: {", ".join(map(str, list(states)[:8]))})'
        else:
            kind = f'a {type(states).__name__}'
        raise ModelFileError(f'{path} is not a ParlAI model file: it holds {kind}')
    return dict(states)


def describe_mismatch(path: str, agent_name: str, err: Exception) -> ModelFileError:
    """A ``load_state_dict`` failure as an error that names the file and what does not fit."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    detail = '; '.join(lines[1:4] if len(lines) > 1 else lines)[:600]
    return ModelFileError(
        f'{path}: its weights do not fit the {agent_name} model built from its options (weights of '
        f'another agent or size, or options that differ from the .opt): {detail}'
    )


# ----- .opt files: JSON only, regular files within the cap -------------------------------------
OPT_WHAT = 'an options file'


def _opt_json_load(handle, **kwargs):
    name = getattr(handle, 'name', '<opt file>')
    try:
        opt = loads_json(handle.read(caps().opt_bytes + 1), name, what=OPT_WHAT)
    except FileRefused as err:
        raise ModelFileExit(ModelFileError(f'{err}; a truncated or hand-edited .opt?')) from None
    if not isinstance(opt, dict):
        raise ModelFileExit(
            ModelFileError(
                f'{name}, line 1: not an options file (a JSON {type(opt).__name__}, not an object of options)'
            )
        )
    return opt


def _refuse_pickled_opt(handle, *args, **kwargs):
    name = getattr(handle, 'name', '<opt file>')
    raise ModelFileExit(
        UnsafeModelFile(
            f'{name} was refused: it is not a UTF-8 JSON options file; ParlAI would unpickle it, and '
            'unpickling can run code. If you trust it, convert it yourself: '
            'load it with pickle and save it with parlai.core.opt.Opt(...).save(path).'
        )
    )


def open_opt(path, mode: str = 'r', encoding: Optional[str] = None):
    """A local ``.opt`` opened for reading only if it is a regular file within ``opt_bytes``
    (checked on the open descriptor, which never blocks on a FIFO): neither a FIFO, a device nor a
    huge file is read. A refusal is a :class:`ModelFileExit`."""
    import io

    try:
        binary = open_regular(path, OPT_WHAT, 'opt_bytes')
    except FileRefused as err:
        raise ModelFileExit(ModelFileError(str(err))) from None
    return binary if 'b' in mode else io.TextIOWrapper(binary, encoding=encoding or 'utf-8')


def _repair_opt(module):
    if isinstance(module.json, _ModuleView):
        return
    module.json = _ModuleView(module.json, load=_opt_json_load)
    module.pickle = _ModuleView(module.pickle, load=_refuse_pickled_opt)
    module.PathManager = _PathManagerView(module.PathManager)


class _PathManagerView:
    """ParlAI's ``PathManager`` for the ``Opt`` module only: :func:`open_opt` in place of ``open``."""

    def __init__(self, wrapped):
        self._wrapped = wrapped

    def open(self, path, mode: str = 'r', *args, **kwargs):
        if 'r' not in mode or '+' in mode or '://' in str(path):
            return self._wrapped.open(path, mode, *args, **kwargs)  # writing, or a remote path: as ParlAI does
        return open_opt(path, mode, kwargs.get('encoding'))

    def __getattr__(self, name):
        return getattr(self._wrapped, name)


# ----- the trust boundary: which agent a model folder makes ParlAI run ---------------------------
# The checks above hold for the project's agents, whose ``load`` is weights-only. A model folder's
# ``.opt`` says which agent opens it, and ParlAI obeys: it imports whatever module ``model`` names
# (``parlai.core.loader.load_agent_module``), and a stock ParlAI agent's ``TorchAgent.load`` then
# unpickles the whole checkpoint. So a folder is opened only when its ``model`` is one of ours,
# read here as JSON before ParlAI sees it, or when the user says they trust the file.
TRUST_FLAG = '--trust-model-file'
TRUST_OPTION = 'trust_model_file'
_MODULE_RE = re.compile(r'^[a-z][a-z0-9_]*$')
_MODEL_FIELD_RE = re.compile(r'"model"\s*:')
# the last sentence of the refusal in a command that runs the project's agents only
NO_OPT_IN_ADVICE = (
    f'This command opens parlai-empathy agents only, whoever made the file ({TRUST_FLAG} '
    'belongs to the commands that can run other agents, for files you trust).'
)


class UntrustedModelFile(ModelFileError):
    """A model folder whose ``.opt`` names an agent other than the project's: opening it would run
    that agent's code (any module it names is imported; a stock agent unpickles the checkpoint)."""


def _agent_folders() -> List[str]:
    """Where ``-m empathy/<name>`` is looked up: the installed ``parlai/agents/empathy/`` (the
    wheel's thin modules), else the checkout's ``agents/empathy/``. Found without importing ParlAI."""
    import importlib.util

    folders = []
    try:
        spec = importlib.util.find_spec('parlai')  # locates the package, runs none of it
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        folders.append(os.path.join(location, 'agents', 'empathy'))
    folders.append(os.path.join(_CHECKOUT, 'agents', 'empathy'))
    return folders


def empathy_agents() -> List[str]:
    """``empathy/<name>`` of every agent the project provides, from the modules that exist."""
    for folder in _agent_folders():
        if os.path.isdir(folder):
            names = [n[:-3] for n in os.listdir(folder) if n.endswith('.py') and n != '__init__.py']
            return sorted(f'empathy/{n}' for n in names if _MODULE_RE.match(n))
    return []


def our_agent(model: Any) -> Optional[str]:
    """``empathy/<name>`` when ``model`` (a ``.opt``'s ``model`` or ``-m`` value) loads one of the
    project's agents: ``empathy/<name>``, or the full module path of one (``parlai.agents.empathy.
    <name>:<Class>``, ``parlai_empathy.agents.<name>:<Class>``), which imports only our module.
    None for anything else."""
    if not isinstance(model, str):
        return None
    ours = set(empathy_agents())
    if model in ours:
        return model
    module, sep, cls = model.partition(':')
    if not sep:
        return None
    for prefix in ('parlai.agents.empathy.', 'parlai_empathy.agents.'):
        name = module[len(prefix) :] if module.startswith(prefix) else None
        if name and f'empathy/{name}' in ours and cls == agent_class_name(name):
            return f'empathy/{name}'
    return None


def agent_class_name(name: str) -> str:
    """The class ParlAI loads for ``-m empathy/<name>`` (``bert_ranker`` -> ``BertRankerAgent``, the
    rule of ``parlai.core.loader``): the one class of each of our agent modules a file may name.
    Any other name importable from that module (a stock class it imports) is not ours."""
    return ''.join(word[:1].upper() + word[1:] for word in name.split('_')) + 'Agent'


def parse_opt_text(text: str, where: str) -> Dict[str, Any]:
    """An ``.opt`` file's options from its text, as JSON and nothing else, within the JSON caps;
    anything else is a :class:`ModelFileError` naming ``where``, the line and the column."""
    try:
        opt = loads_json(text, where, what=OPT_WHAT)
    except FileRefused as err:
        raise ModelFileError(f'{err}; a truncated or hand-edited .opt?') from None
    if not isinstance(opt, dict):
        raise ModelFileError(
            f'{where}, line 1: not an options file (a JSON {type(opt).__name__}, not an object of options)'
        )
    return opt


def read_opt_agent(data: bytes, where: str) -> Tuple[str, int]:
    """The ``model`` of an ``.opt`` file's bytes, and its line, read as JSON and nothing else
    (``where`` names the file in errors: file, line and field)."""
    try:
        text = data.decode('utf-8')
    except UnicodeDecodeError:
        raise UnsafeModelFile(
            f'{where} was refused: it is not a UTF-8 JSON options file; ParlAI would unpickle it, and '
            'unpickling can run code'
        ) from None
    opt = parse_opt_text(text, where)
    found = _MODEL_FIELD_RE.search(text)
    line = text.count('\n', 0, found.start()) + 1 if found else 1
    model = opt.get('model')
    if not isinstance(model, str) or not model:
        raise ModelFileError(
            f'{where}, line {line}: field "model": missing or not an agent name '
            f'(got {model!r}); which agent opens this model is unknown'
        )
    return model, line


def read_opt_file(opt_path: str) -> Tuple[str, int]:
    """:func:`read_opt_agent` of a file (a regular file within ``opt_bytes``); a missing, special or
    oversized one is a :class:`ModelFileError`."""
    try:
        data = read_bytes(opt_path, OPT_WHAT, 'opt_bytes')
    except FileRefused as err:
        raise ModelFileError(str(err)) from None
    except OSError as err:
        raise ModelFileError(f'{opt_path}: cannot be read ({err.strerror or err})') from None
    return read_opt_agent(data, opt_path)


def untrusted_message(where: str, line: int, model: str, outcome: str, advice: Optional[str] = None) -> str:
    """The one refusal: the ``.opt`` (file, line, field), the agent it names, what was not done
    (``outcome``), why, and the way out (``advice``; default: pass ``--trust-model-file``)."""
    if advice is None:
        advice = f'If you trust the file, pass {TRUST_FLAG} to open it anyway.'
    return (
        f'{where}, line {line}: field "model" names {model!r}, which is not an agent of parlai-empathy '
        f'({", ".join(empathy_agents()) or "none found"}); {outcome}: ParlAI would import the module '
        'that field names, and a stock ParlAI agent unpickles the whole checkpoint, either of which can '
        f'run code from the file. {advice}'
    )


def zoo_model_path(model_file: str, datapath: Optional[str] = None) -> str:
    """Where ``zoo:<path>`` is installed (``<datapath>/models/<path>``), without installing it."""
    if not model_file.startswith('zoo:'):
        return model_file
    if datapath is None:  # ParlAI's default, <parlai_home>/data, found without importing ParlAI
        import importlib.util

        spec = importlib.util.find_spec('parlai')
        home = os.path.dirname(os.path.realpath(list(spec.submodule_search_locations)[0])) if spec else '.'
        datapath = os.path.join(home, 'data')
    return os.path.join(datapath, 'models', model_file[len('zoo:') :])


KINDS = ('ranker', 'generator', 'classifier')


@dataclass(frozen=True)
class AgentDecision:
    """What opening a model folder (or ``-m``) would run, decided once by :func:`decide_agent`."""

    model: str  # the agent as named (a ``.opt``'s ``model`` or ``-m``)
    ours: Optional[str]  # ``empathy/<name>`` when it is one of the project's agents, else None
    trusted: bool  # may be opened: it is ours, or the user passed --trust-model-file

    @property
    def kind(self) -> str:
        """'ranker', 'generator' or 'classifier' (:func:`agent_kind`); imports the agent, so only
        for a trusted one."""
        if not self.trusted:
            raise UntrustedModelFile(f'the kind of {self.model!r} is not looked up: it is not trusted')
        return agent_kind(self.model)


def decide_agent(model: Any, trust: bool = False) -> AgentDecision:
    """The one decision on an agent a model folder names (read without importing it): it may be
    opened when it is one of the project's (:func:`our_agent`) or the user trusts the file.
    Every command that opens, installs or packs a model folder asks here."""
    ours = our_agent(model)
    return AgentDecision(model=model, ours=ours, trusted=bool(trust) or ours is not None)


def agent_kind(model: str) -> str:
    """The one decision on what kind of agent ``model`` is, from the ParlAI class it loads:
    'ranker' (a ``TorchRankerAgent``), 'generator' (``TorchGeneratorAgent``) or 'classifier'
    (``TorchClassifierAgent``), or the ``leaderboard_kind`` an agent of none of these kinds
    declares; a ``ValueError`` for anything else. Imports the agent's module:
    call it only after :func:`decide_agent` trusted it."""
    from parlai.core.loader import load_agent_module
    from parlai.core.torch_classifier_agent import TorchClassifierAgent
    from parlai.core.torch_generator_agent import TorchGeneratorAgent
    from parlai.core.torch_ranker_agent import TorchRankerAgent

    agent_class = load_agent_module(model)
    # an agent that is none of ParlAI's three kinds says which it is (``-m empathy/hf_lm``)
    if getattr(agent_class, 'leaderboard_kind', None) in KINDS:
        return agent_class.leaderboard_kind
    for kind, base in zip(KINDS, (TorchRankerAgent, TorchGeneratorAgent, TorchClassifierAgent)):
        if isinstance(agent_class, type) and issubclass(agent_class, base):
            return kind
    raise ValueError(f'{model} is neither a response generator, a response ranker nor an emotion classifier')


def model_folder(
    model_file: str, trust: bool = False, datapath: Optional[str] = None, advice: Optional[str] = None
) -> AgentDecision:
    """:func:`decide_agent` for the agent that opening ``model_file`` would run, from the ``.opt``
    beside it (read as JSON: nothing it names is imported, ParlAI is not needed). An agent it does
    not trust is refused (:class:`UntrustedModelFile`). ``zoo:`` paths are looked up where they
    are installed (``datapath``: ParlAI's ``--datapath``). A missing or broken ``.opt`` is a
    :class:`ModelFileError` naming the file (and line). ``advice`` replaces the sentence that names
    ``--trust-model-file``, for a command where it does not apply."""
    path = zoo_model_path(str(model_file), datapath)
    opt_path = path + '.opt'
    if not os.path.lexists(opt_path):
        where = f' ({model_file} is looked for at {path}: not installed?)' if path != str(model_file) else ''
        raise ModelFileError(
            f'{opt_path}: no such options file beside the model file{where}; it says which agent opens the model'
        )
    model, line = read_opt_file(opt_path)
    decision = decide_agent(model, trust)
    if not decision.trusted:
        raise UntrustedModelFile(untrusted_message(opt_path, line, model, f'{path} was not opened', advice))
    return decision


def check_model_trust(
    model_file: str, trust: bool = False, datapath: Optional[str] = None, advice: Optional[str] = None
) -> str:
    """The agent :func:`model_folder` accepts for ``model_file`` (its refusals raised as there)."""
    return model_folder(model_file, trust, datapath, advice).model


def add_trust_flag(parser, opt_in: bool = True):
    """``--trust-model-file`` on one of our commands. It also arms the check at parse time:
    ParlAI's parser imports the agent of ``-mf``'s ``.opt`` while it parses (to add that agent's
    options), before the command runs, and it does so for a command with this option only after
    :func:`check_model_trust` (see ``_repair_model_name`` below). ``opt_in=False``: a command that
    never opens other agents' files (the check is armed; there is no flag to pass)."""
    if opt_in:
        parser.add_argument(
            TRUST_FLAG,
            type='bool',
            nargs='?',
            const=True,
            default=False,
            help="open a model file whose .opt names an agent that is not one of parlai-empathy's (a stock "
            'ParlAI agent, or any module path): ParlAI imports that module and a stock agent unpickles the '
            'checkpoint, either of which runs code from the file; only for files you trust',
        )
    else:
        parser.set_defaults(**{TRUST_OPTION: None})  # None: no opt-in (False: not given)
    return parser


def _repair_model_name(module):
    """``get_model_name`` reads the ``model`` of ``-mf``'s ``.opt`` for the parser, which imports it
    next: for a command of ours (its options hold ``trust_model_file``) the file is checked first."""
    real = module.get_model_name
    if getattr(real, '_empathy_trust_checked', False):
        return

    def get_model_name(opt):
        if TRUST_OPTION in opt and opt.get('model_file'):
            model_file = module.modelzoo_path(opt.get('datapath'), opt['model_file'])  # installs zoo: (checked)
            if os.path.lexists(str(model_file) + '.opt'):
                trust = opt.get(TRUST_OPTION)
                try:
                    check_model_trust(model_file, bool(trust), advice=NO_OPT_IN_ADVICE if trust is None else None)
                except ModelFileError as err:
                    # final: a file this check cannot read is never handed to a reader that might
                    raise ModelFileExit(err) from None
        return real(opt)

    get_model_name._empathy_trust_checked = True
    module.get_model_name = get_model_name


def install() -> None:
    """Arm the two repairs of ParlAI's loading (idempotent): ``Opt.load`` reads JSON only, and the
    parser of a command of ours checks a model folder's agent before it imports it."""
    repair('parlai.core.opt', _repair_opt)
    repair('parlai.core.params', _repair_model_name)
