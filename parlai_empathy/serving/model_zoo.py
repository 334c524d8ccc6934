"""parlai-empathy's model zoo: ``-mf zoo:empathy/<name>/model``.

ParlAI resolves ``zoo:empathy/<name>/model`` by importing ``parlai.zoo.empathy.<name>`` (our thin
module, ``zoo/empathy/<name>.py``) and calling its ``download(datapath)``, then opening
``<datapath>/models/empathy/<name>/model``. That ``download`` is :func:`download` here:

* The entries are listed in ``zoo/empathy/manifest.json`` (or ``$PARLAI_EMPATHY_ZOO_MANIFEST``):
  archive file name, sha256, size, model card, version, the agent (one of ours), and the
  ``parlai empathy_reproduce`` row that trains the model.
* The unpacked folder is opened by whatever agent its ``model.opt`` names, so an archive is
  unpacked only when that file (read from the tar as JSON) names the entry's agent, and an
  installed folder is used only while it does (:func:`check_archive_agent`,
  :func:`check_installed_agent`).
* A model is fetched from ``$PARLAI_EMPATHY_ZOO_URL/<file>`` (a release mirror) with ParlAI's
  ``DownloadableFile`` (sha256-verified) into a staging folder, unpacked there and only then moved
  into place and marked built (``mark_done`` with the entry's version and checksum). A failed
  checksum or download leaves nothing installed.
* ``parlai empathy_package_model ... --install-zoo`` installs a locally built archive in the same
  place (marked ``local:<sha256>``); a local build is used as it is.
* Without a mirror and without a local build, the error says which two commands build the model
  (:func:`build_commands`: the row's ``parlai empathy_reproduce`` plan, then ``parlai
  empathy_package_model ... --install-zoo``) and how long that took for the committed row.
  ParlAI calls ``download`` while it parses the command line, so the zoo modules end the
  command there with that message (:func:`download_or_exit`), not with a traceback.
* An entry has a ``sha256`` only while a mirror can serve that exact archive: nothing is fetched
  for an entry without one, and a locally built archive is installed all the same.
"""

import contextlib
import fcntl
import json
import os
import re
import shlex
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Optional

from parlai_empathy.files.bounded import FileRefused, check_archive, loads_json, read_text
from parlai_empathy.files.caps import caps
from parlai_empathy.integration.safe_loading import (
    TRUST_FLAG,
    ModelFileError,
    decide_agent,
    empathy_agents,
    read_opt_agent,
    read_opt_file,
    untrusted_message,
)

# a source checkout's root, three folders above this module (no wheel has it)
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ZOO_URL_ENV = 'PARLAI_EMPATHY_ZOO_URL'
MANIFEST_ENV = 'PARLAI_EMPATHY_ZOO_MANIFEST'  # another manifest, e.g. a private mirror's
MANIFEST_FILE = 'manifest.json'
LOCAL_PREFIX = 'local:'
REQUIRED_FILES = ('model', 'model.opt')
NAME_RE = re.compile(r'^[a-z][a-z0-9_]*$')
SHA256_RE = re.compile(r'^[0-9a-f]{64}$')


class ZooError(RuntimeError):
    """A zoo model that cannot be installed (never an ImportError: ParlAI would swallow it)."""


class ZooModelUnavailable(ZooError):
    pass


class ManifestError(ZooError):
    pass


@dataclass(frozen=True)
class ZooEntry:
    name: str
    file: str
    sha256: Optional[str]
    size: Optional[int]
    card: str
    version: str
    project: str
    row: str
    description: str = ''
    agent: str = ''  # empathy/<name>: the only agent the entry's archive may name

    @property
    def zoo_path(self) -> str:
        return f'zoo:empathy/{self.name}/model'

    @property
    def done_version(self) -> str:
        """What ``mark_done`` records: a new archive (another checksum) is fetched again."""
        return f'{self.version} {self.sha256}'

    def build_argvs(
        self, datapath: Optional[str] = None, runs_dir: str = 'runs', profile: str = 'cpu'
    ) -> List[List[str]]:
        """The two ``parlai`` command lines (without ``parlai``) that build and install this
        entry: the row's plan, then the package of the model it leaves, installed where
        ``zoo:`` looks (``datapath``: ParlAI's ``--datapath``, named when it is not the default)."""
        reproduce = ['empathy_reproduce', '--project', self.project, '--rows', self.row]
        if runs_dir != 'runs':
            reproduce += ['--runs-dir', runs_dir]
        if profile != 'cpu':
            reproduce += ['--profile', profile]
        package = [
            'empathy_package_model',
            '-mf',
            os.path.join(runs_dir, self.project, self.row, 'model'),
            '--name',
            self.name,
            '--version',
            self.version,
            '--project',
            self.project,
            '--row',
            self.row,
            '--install-zoo',
        ]
        if datapath and os.path.abspath(datapath) != os.path.abspath(_default_datapath()):
            package += ['--datapath', datapath]
        return [reproduce, package]

    def build_commands(self, datapath: Optional[str] = None) -> str:
        return '\n'.join('  parlai ' + shlex.join(argv) for argv in self.build_argvs(datapath))

    def build_time(self, profile: str = 'cpu') -> str:
        """What the row's plan (the rows it needs included) took when the committed row was made."""
        from parlai_empathy.evidence import reproduce

        try:
            projects = reproduce.find_projects_dir(self.project)
            plans = reproduce.ordered_plans(projects, self.project, [self.row], 'runs', profile)
        except (reproduce.ReproduceSpecError, OSError) as err:
            return f'its time is unknown: {err}'
        return reproduce.plans_estimate(plans, include_done=False)


def _default_datapath() -> str:
    """ParlAI's own default ``--datapath`` (``<parlai_home>/data``). Not ``$PARLAI_DATAPATH``:
    ParlAI copies ``--datapath`` into it while parsing, so it cannot tell the two apart."""
    import parlai

    return os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(parlai.__file__))), 'data')


def default_manifest_path() -> str:
    """``$PARLAI_EMPATHY_ZOO_MANIFEST``, else the installed ``parlai/zoo/empathy/manifest.json``
    (the checkout's when the plugin is not installed)."""
    if os.environ.get(MANIFEST_ENV):
        return os.environ[MANIFEST_ENV]
    try:
        import parlai.zoo.empathy as installed

        path = os.path.join(os.path.dirname(installed.__file__), MANIFEST_FILE)
        if os.path.isfile(path):
            return path
    except ImportError:
        pass
    return os.path.join(_CHECKOUT, 'zoo', 'empathy', MANIFEST_FILE)


def _line_of(text: str, needle: str) -> int:
    index = text.find(needle)
    return text.count('\n', 0, index) + 1 if index >= 0 else 1


def load_manifest(path: Optional[str] = None) -> Dict[str, ZooEntry]:
    """Every entry of the manifest, checked; a bad one is named by file, line and field."""
    path = path or default_manifest_path()
    try:  # a regular file within the caps of an options file: a manifest is a few KB of JSON
        text = read_text(path, 'a zoo manifest', 'opt_bytes')
        data = loads_json(text, path, what='a zoo manifest')
    except FileRefused as err:
        raise ManifestError(str(err)) from None
    models = data.get('models') if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise ManifestError(f'{path}, line 1: expected {{"models": {{NAME: {{...}}, ...}}}}')
    entries = {}
    for name, fields in models.items():
        line = _line_of(text, f'"{name}"')

        def bad(field, problem, line=line, name=name):
            return ManifestError(f'{path}, line {line}: models.{name}.{field}: {problem}')

        if not NAME_RE.match(name):
            raise bad('(name)', 'a zoo name is lower-case letters, digits and "_" (a Python module name)')
        if not isinstance(fields, dict):
            raise bad('(entry)', 'expected an object')
        for field in ('file', 'card', 'version', 'project', 'row', 'agent'):
            value = fields.get(field)
            if not isinstance(value, str) or not value:
                raise bad(field, f'missing or not a non-empty string (got {value!r})')
        for field in ('file', 'card'):
            if os.path.basename(fields[field]) != fields[field] or fields[field] in ('.', '..'):
                raise bad(field, f'must be a plain file name, not a path (got {fields[field]!r})')
        if decide_agent(fields['agent']).ours != fields['agent']:
            raise bad(
                'agent',
                f'{fields["agent"]!r} is not an agent of parlai-empathy (one of '
                f'{", ".join(empathy_agents())}): the zoo installs those only',
            )
        if not fields['file'].endswith('.tar.gz'):
            raise bad('file', f'the archive is a .tar.gz (got {fields["file"]!r})')
        sha256, size = fields.get('sha256'), fields.get('size')
        if sha256 is not None and (not isinstance(sha256, str) or not SHA256_RE.match(sha256)):
            raise bad('sha256', f'64 lower-case hex digits, or null until published (got {sha256!r})')
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size <= 0):
            raise bad('size', f'a positive number of bytes, or null until published (got {size!r})')
        if (sha256 is None) != (size is None):
            raise bad('sha256' if sha256 is None else 'size', 'sha256 and size are published together')
        entries[name] = ZooEntry(
            name,
            fields['file'],
            sha256,
            size,
            fields['card'],
            fields['version'],
            fields['project'],
            fields['row'],
            fields.get('description', ''),
            fields['agent'],
        )
    return entries


def model_dir(datapath: str, name: str) -> str:
    return os.path.join(datapath, 'models', 'empathy', name)


def installed_version(folder: str) -> Optional[str]:
    """The version line ``mark_done`` wrote in ``folder``, or None if it is not built."""
    try:
        lines = read_text(os.path.join(folder, '.built'), 'a build mark', 'opt_bytes').split('\n')
    except FileNotFoundError:
        return None
    return lines[1] if len(lines) > 1 else ''


@contextlib.contextmanager
def _install_lock(folder: str):
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    with open(folder + '.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


ZOO_ADVICE = (
    f'The zoo installs parlai-empathy agents only; if you trust this archive, unpack it yourself '
    f'and open the folder with {TRUST_FLAG}.'
)


def check_archive_agent(tar: tarfile.TarFile, members: List[tarfile.TarInfo], archive: str, agent: str) -> None:
    """The archive's ``model.opt`` (read from the tar, as JSON, size-limited) names ``agent``, one of
    the project's: checked before anything is unpacked, since the unpacked folder is opened by
    whatever agent that file names."""
    where = f'{archive}: model.opt'
    found = [m for m in members if os.path.normpath(m.name) == 'model.opt']
    if not found or not found[-1].isfile():
        raise ZooError(
            f'{archive}: not a parlai-empathy model archive (no model.opt file at its top); nothing was installed'
        )
    cap = caps().opt_bytes
    if found[-1].size > cap:
        raise ZooError(
            f'{where}: {found[-1].size:,} bytes, over the cap of {cap:,} bytes for an options file '
            '(PARLAI_EMPATHY_CAP_OPT_BYTES); nothing was installed'
        )
    try:
        model, line = read_opt_agent(tar.extractfile(found[-1]).read(cap + 1), where)
    except ModelFileError as err:
        raise ZooError(f'{err}; nothing was installed') from None
    decision = decide_agent(model)  # the zoo never takes --trust-model-file
    if not decision.trusted:
        raise ZooError(untrusted_message(where, line, model, 'nothing was unpacked or installed', ZOO_ADVICE))
    if decision.ours != agent:
        raise ZooError(
            f'{where}, line {line}: field "model" names {model!r}, but the manifest entry says '
            f'{agent!r}: not the archive of that entry; nothing was installed'
        )


def _safe_extract(archive: str, into: str, agent: str) -> None:
    """Unpack regular files and folders only, each inside ``into`` (no links, no '..'), and only
    when the archive's ``model.opt`` names ``agent`` (:func:`check_archive_agent`) and its members
    fit the archive caps and the free disk (:func:`parlai_empathy.files.bounded.check_archive`),
    both checked before anything is unpacked. The members are listed one by one, so an archive
    over a cap is refused as soon as the listing passes it."""
    members = []

    def listed(tar):
        for member in iter(tar.next, None):
            parts = member.name.split('/')
            if member.name.startswith('/') or '..' in parts or not (member.isfile() or member.isdir()):
                raise ZooError(
                    f'{archive}: refused member {member.name!r:.120} (only plain files and '
                    'folders inside the archive are unpacked)'
                )
            members.append(member)
            yield member.name, member.size

    try:
        with tarfile.open(archive, 'r:gz') as tar:
            check_archive(archive, listed(tar), into)
            check_archive_agent(tar, members, archive, agent)
            tar.extractall(into, members=members, filter='data')
    except FileRefused as err:
        raise ZooError(f'{err}; nothing was installed') from None
    except (tarfile.TarError, EOFError, OSError, ValueError) as err:
        raise ZooError(
            f'{archive}: not a readable .tar.gz archive ({type(err).__name__}: '
            f'{str(err).splitlines()[0] if str(err) else "-"}); nothing was installed'
        ) from None
    missing = [f for f in REQUIRED_FILES if not os.path.isfile(os.path.join(into, f))]
    if missing:
        raise ZooError(f'{archive}: not a parlai-empathy model archive (no {", ".join(missing)} at its top)')


def install_archive(archive: str, folder: str, done_version: str, agent: str) -> str:
    """Unpack ``archive`` into ``folder`` all at once: staged beside it, moved into place, then
    marked built. Any failure leaves ``folder`` as it was; an archive whose ``model.opt`` does not
    name ``agent`` (the manifest entry's, one of ours) is refused before anything is unpacked."""
    import parlai.core.build_data as build_data

    parent = os.path.dirname(os.path.abspath(folder))
    with _install_lock(folder):
        stage = tempfile.mkdtemp(prefix=f'.{os.path.basename(folder)}.partial-', dir=parent)
        try:
            _safe_extract(archive, stage, agent)
            build_data.mark_done(stage, version_string=done_version)
            old = None
            if os.path.exists(folder):
                old = stage + '.old'
                os.rename(folder, old)
            os.rename(stage, folder)
            if old:
                shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    return folder


def fetch(entry: ZooEntry, base_url: str, folder: str) -> str:
    """Download the entry's archive from the mirror, verify it, install it (nothing on failure)."""
    import parlai.core.build_data as build_data

    url = base_url.rstrip('/') + '/' + entry.file
    resource = build_data.DownloadableFile(url, entry.file, entry.sha256, zipped=False)
    parent = os.path.dirname(os.path.abspath(folder))
    os.makedirs(parent, exist_ok=True)
    download_dir = tempfile.mkdtemp(prefix=f'.{entry.name}.download-', dir=parent)
    try:
        try:
            resource.check_header()
        except AssertionError:
            raise ZooError(
                f'{url}: the mirror {ZOO_URL_ENV}={base_url} does not serve {entry.file} '
                '(no HTTP 200); nothing was installed'
            ) from None
        except Exception as err:
            raise ZooError(
                f'{url}: cannot reach the mirror ({type(err).__name__}: {err}); nothing was installed'
            ) from None
        try:
            resource.download_file(download_dir)  # ParlAI's download + sha256 check
        except AssertionError as err:
            raise ZooError(
                f'{url} was refused: its sha256 does not match the manifest entry {entry.name!r}, '
                f'so the file on the mirror is corrupt or was tampered with; nothing was installed. '
                f'({" ".join(str(err).split())})'
            ) from None
        got = os.path.getsize(os.path.join(download_dir, entry.file))
        if got != entry.size:  # pragma: no cover - a matching sha256 means a matching size
            raise ZooError(f'{url}: {got} bytes, the manifest says {entry.size}; nothing was installed')
        return install_archive(os.path.join(download_dir, entry.file), folder, entry.done_version, entry.agent)
    finally:
        shutil.rmtree(download_dir, ignore_errors=True)


def download(datapath: str, name: str, manifest: Optional[str] = None) -> str:
    """What ``parlai.zoo.empathy.<name>.download`` does: make ``zoo:empathy/<name>/model`` exist."""
    entries = load_manifest(manifest)
    if name not in entries:
        raise ZooModelUnavailable(
            f'zoo:empathy/{name} is not in {manifest or default_manifest_path()} '
            f'(entries: {", ".join(sorted(entries)) or "none"})'
        )
    entry = entries[name]
    folder = model_dir(datapath, name)
    version = installed_version(folder)
    if version is not None:
        check_installed_agent(entry, folder)
    if version is not None and (version == entry.done_version or version.startswith(LOCAL_PREFIX)):
        return folder
    base_url = os.environ.get(ZOO_URL_ENV, '').strip()
    if base_url and entry.sha256:
        return fetch(entry, base_url, folder)
    if version is not None:
        import parlai.utils.logging as logging

        logging.warning(
            f'{entry.zoo_path}: using the installed {version!r} in {folder}; the manifest '
            f'lists {entry.done_version!r}, set {ZOO_URL_ENV} to fetch it'
        )
        return folder
    if not entry.sha256:
        why = f'no release of it is published (the manifest has no sha256 for {entry.file})'
    else:
        why = f'no mirror is set (${ZOO_URL_ENV}: a release mirror that serves {entry.file})'
    raise ZooModelUnavailable(
        f'{entry.zoo_path} is not installed in {folder}, and {why}.\n'
        f'Build it here ({entry.build_time()}), then run your command again:\n'
        f'{entry.build_commands(datapath)}'
    )


def check_installed_agent(entry: ZooEntry, folder: str) -> None:
    """An installed folder is opened by the agent its ``model.opt`` names: it must be the entry's
    (a folder installed by other means, or edited since, is refused rather than opened)."""
    opt_path = os.path.join(folder, 'model.opt')
    try:
        model, line = read_opt_file(opt_path)
    except ModelFileError as err:
        raise ZooError(f'{entry.zoo_path} is installed in {folder}, but: {err}') from None
    decision = decide_agent(model)
    if not decision.trusted:
        raise ZooError(untrusted_message(opt_path, line, model, f'{entry.zoo_path} was not opened', ZOO_ADVICE))
    if decision.ours != entry.agent:
        raise ZooError(
            f'{opt_path}, line {line}: field "model" names {model!r}, but the manifest entry '
            f'{entry.name!r} is {entry.agent!r}: {folder} holds another model; remove it to install '
            f'{entry.zoo_path}'
        )


def download_or_exit(datapath: str, name: str) -> str:
    """:func:`download` for the zoo modules ParlAI imports: ParlAI calls them while it parses the
    command line, where an exception becomes a traceback around the message; a zoo model that
    cannot be installed ends the command with the message alone (exit status 1)."""
    try:
        return download(datapath, name)
    except ZooError as err:
        print(f'{err}', file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def describe(name: str, manifest: Optional[str] = None) -> ZooEntry:
    entries = load_manifest(manifest)
    if name not in entries:
        raise ZooModelUnavailable(f'no zoo entry {name!r} (entries: {", ".join(sorted(entries))})')
    return entries[name]


def update_manifest(path: str, name: str, fields: Dict) -> None:
    """Write ``fields`` into the manifest's entry ``name`` (created if new), keeping the rest."""
    from parlai_empathy.evidence.artifacts import read_json

    data = read_json(path, ValueError)
    data.setdefault('models', {}).setdefault(name, {}).update(fields)
    tmp = f'{path}.tmp{os.getpid()}'
    with open(tmp, 'w', encoding='utf-8') as f:
        json.dump(data, f, indent=2)
        f.write('\n')
    try:
        load_manifest(tmp)  # a manifest that would not load is never written
    except ManifestError:
        os.remove(tmp)
        raise
    os.replace(tmp, path)
