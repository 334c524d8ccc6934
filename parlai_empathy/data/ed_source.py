"""Where the EmpatheticDialogues files come from.

In order of precedence: an explicit folder (``--ed-datapath DIR``; ``sample`` is the small real
sample embedded in this package), the ``PARLAI_EMPATHY_ED_DIR`` environment variable, and the
official release, downloaded once into ParlAI's datapath exactly where ParlAI's own
``empathetic_dialogues`` task puts it (same URL, sha256-verified, marked built).
"""

import hashlib
import os
from typing import Optional

from parlai_empathy.data.file_errors import DataNotFound
from parlai_empathy.files.bounded import open_regular

ED_DIR_ENV = 'PARLAI_EMPATHY_ED_DIR'
SAMPLE = 'sample'
SPLITS = ('train', 'valid', 'test')
OFFICIAL_URL = 'http://parl.ai/downloads/empatheticdialogues/empatheticdialogues.tar.gz'
OFFICIAL_FILE = 'empatheticdialogues.tar.gz'
OFFICIAL_SHA256 = '56f234d77b7dd1f005fd365bb17769cfe346c3c84295b69bc069c8ccb83be03d'
OFFICIAL_VERSION = '1.0'  # ParlAI's version string for this build, so both share one copy


class EDDataNotFound(DataNotFound):
    pass


def sample_dir() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), 'sample')


def _check_folder(folder: str, origin: str) -> str:
    missing = [s + '.csv' for s in SPLITS if not os.path.isfile(os.path.join(folder, s + '.csv'))]
    if missing:
        raise EDDataNotFound(
            f'{origin} points at {folder!r}, which lacks {", ".join(missing)}. It must be a folder '
            f"holding EmpatheticDialogues' train.csv, valid.csv and test.csv (as unpacked from "
            f'{OFFICIAL_FILE}).'
        )
    return folder


def official_dir(parlai_datapath: str) -> str:
    return os.path.join(parlai_datapath, 'empatheticdialogues', 'empatheticdialogues')


def build_official(parlai_datapath: str, url: str = OFFICIAL_URL, sha256: str = OFFICIAL_SHA256) -> str:
    """Download, verify and unpack the official tarball once (ParlAI's build_data conventions)."""
    import parlai.core.build_data as build_data

    dpath = os.path.join(parlai_datapath, 'empatheticdialogues')
    if not build_data.built(dpath, version_string=OFFICIAL_VERSION):
        if build_data.built(dpath):
            build_data.remove_dir(dpath)
        build_data.make_dir(dpath)
        resource = build_data.DownloadableFile(url, OFFICIAL_FILE, sha256)
        try:
            resource.download_file(dpath)
        except AssertionError as err:  # ParlAI's checksum failure
            build_data.remove_dir(dpath)
            raise EDDataNotFound(f'The EmpatheticDialogues download from {url} is corrupt: {err}') from None
        except Exception as err:
            build_data.remove_dir(dpath)
            raise EDDataNotFound(
                f'EmpatheticDialogues is not in {dpath} and could not be downloaded from {url} '
                f'({type(err).__name__}: {err}).\nTo use a local copy, pass --ed-datapath DIR or set '
                f'{ED_DIR_ENV}=DIR, where DIR holds train.csv, valid.csv and test.csv; '
                f'--ed-datapath {SAMPLE} uses the small sample embedded in parlai-empathy.'
            ) from None
        build_data.mark_done(dpath, version_string=OFFICIAL_VERSION)
    return _check_folder(official_dir(parlai_datapath), 'The official EmpatheticDialogues build')


def resolve_ed_dir(ed_datapath: Optional[str] = None, parlai_datapath: Optional[str] = None) -> str:
    """The folder holding train/valid/test.csv, building the official copy if that is the source."""
    if ed_datapath:
        if ed_datapath == SAMPLE:
            return sample_dir()
        return _check_folder(os.path.expanduser(ed_datapath), '--ed-datapath')
    if os.environ.get(ED_DIR_ENV):
        return _check_folder(os.path.expanduser(os.environ[ED_DIR_ENV]), f'${ED_DIR_ENV}')
    if parlai_datapath is None:
        raise EDDataNotFound(f'No EmpatheticDialogues location: pass --ed-datapath or set {ED_DIR_ENV}.')
    return build_official(parlai_datapath)


def file_checksum(path: str) -> str:
    """The sha256 of the regular file ``path`` (a FIFO or device is refused, never read)."""
    digest = hashlib.sha256()
    with open_regular(path, 'a file to checksum', 'checkpoint_bytes') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            digest.update(chunk)
    return digest.hexdigest()
