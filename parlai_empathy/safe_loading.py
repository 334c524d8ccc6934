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
* ``.opt`` files are read as JSON only: the repair below (armed by :mod:`parlai_empathy.compat`
  in every process) makes ``Opt.load`` refuse pickled ones, and name the file, line and column of
  broken JSON.

The project's agents use this through :class:`parlai_empathy.agents.safety.SafeAgentMixin`.
Import-light: torch is imported only when a file is loaded.
"""
import json
import os
import zipfile
from collections.abc import Mapping
from typing import Any, Dict, List

from parlai_empathy.compat import _ModuleView, _repairs_for

ZIP_MAGIC = b'PK\x03\x04'


class ModelFileError(RuntimeError):
    """A model file that cannot be used: missing, truncated, corrupt or not a ParlAI model file."""


class UnsafeModelFile(ModelFileError):
    """A model file that could only be opened by unpickling arbitrary objects (it could run code)."""


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
        return [name for name in torch.serialization.get_unsafe_globals_in_checkpoint(path)
                if name not in allowed]
    except Exception:  # a broken archive: the caller's message covers it
        return []


def _describe_foreign(path: str, head: bytes) -> str:
    if not head:
        return f'{path} is empty (an interrupted save or copy?)'
    if head.startswith(ZIP_MAGIC):
        return (f'{path} is a truncated or corrupt PyTorch checkpoint (its zip archive has no '
                'readable end; an interrupted download, copy or save?)')
    if head[:1] == b'\x80':
        return None  # a pickle: decided by the caller
    if head.lstrip()[:1] in (b'{', b'['):
        return f'{path} is a JSON/text file, not a PyTorch checkpoint'
    return f'{path} is not a PyTorch checkpoint (it starts with {head[:16]!r})'


def load_checkpoint(path: str, mmap: bool = False) -> Dict[str, Any]:
    """The ``dict`` a ParlAI agent saved to ``path`` (``model`` weights, optimizer state, ...).
    ``mmap``: map the tensors instead of reading them (for callers that only want the plain
    entries, e.g. the update count; a zip checkpoint only).

    Raises :class:`UnsafeModelFile` or :class:`ModelFileError`, both naming ``path``.
    """
    import pickle

    import torch

    if not os.path.isfile(path):
        raise ModelFileError(f'{path}: no such model file' if not os.path.exists(path)
                             else f'{path} is not a file')
    with open(path, 'rb') as f:
        head = f.read(64)
    is_zip = zipfile.is_zipfile(path)
    if not is_zip:
        problem = _describe_foreign(path, head)
        if problem:
            raise ModelFileError(problem)
    try:
        with torch.serialization.safe_globals(parlai_safe_globals()):
            states = torch.load(path, map_location='cpu', weights_only=True, mmap=mmap and is_zip)
    except pickle.UnpicklingError as err:
        wanted = _unsafe_globals(path) if is_zip else []
        what = (f'it refers to {", ".join(wanted)}' if wanted else
                'it is not a weights-only checkpoint' if is_zip else
                'it is a plain pickle, not a torch.save checkpoint')
        raise UnsafeModelFile(f'{path} was refused: loading it needs arbitrary unpickling ({what}). '
                              f'{REFUSAL_ADVICE}') from None
    except (RuntimeError, EOFError, KeyError, ValueError, OSError, zipfile.BadZipFile) as err:
        raise ModelFileError(f'{path} is a corrupt or truncated PyTorch checkpoint '
                             f'({type(err).__name__}: {str(err).splitlines()[0] if str(err) else "-"})') from None
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
        f'another agent or size, or options that differ from the .opt): {detail}')


# ----- .opt files: JSON only --------------------------------------------------------------------
def _opt_json_load(handle, **kwargs):
    name = getattr(handle, 'name', '<opt file>')
    try:
        return json.load(handle, **kwargs)
    except json.JSONDecodeError as err:
        raise ModelFileError(
            f'{name}, line {err.lineno}, column {err.colno}: not a valid options file '
            f'({err.msg}); a truncated or hand-edited .opt?') from None


def _refuse_pickled_opt(handle, *args, **kwargs):
    name = getattr(handle, 'name', '<opt file>')
    raise UnsafeModelFile(
        f'{name} was refused: it is not a UTF-8 JSON options file; ParlAI would unpickle it, and '
        'unpickling can run code. If you trust it, convert it yourself: '
        'load it with pickle and save it with parlai.core.opt.Opt(...).save(path).')


@_repairs_for('parlai.core.opt')
def _repair_opt(module):
    if isinstance(module.json, _ModuleView):
        return
    module.json = _ModuleView(module.json, load=_opt_json_load)
    module.pickle = _ModuleView(module.pickle, load=_refuse_pickled_opt)
