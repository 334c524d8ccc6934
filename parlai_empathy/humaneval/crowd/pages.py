"""Our task pages for ParlAI's crowdsourcing blueprints, and the router copy that serves them.

The pages (``webapp/``: React, mephisto-task 2.0.4 and Bootstrap 5.3.9 from the npm registry,
bundled by esbuild, versions locked in ``package-lock.json``) are built once per source version
into the crowd cache (``$PARLAI_EMPATHY_CROWD_CACHE``, else ``~/.cache/parlai-empathy/crowd``),
never into site-packages. ``make install-crowd`` builds them ahead of time; a launch builds them
if they are missing.

The router is Mephisto's own node router (``mephisto/abstractions/architects/router/node``) with
three changes in the cached copy: it listens on 127.0.0.1 only
(:data:`parlai_empathy.integration.compat.ROUTER_LISTEN_PATCH`), every request passes ``router_guard.js``
first (:data:`parlai_empathy.integration.compat.ROUTER_GUARD_PATCH`), and its ``static/index.html`` is ours
(the stock one loads Bulma from a CDN). Each run gets its own copy under its run folder, passed to the
local architect as ``server_source_path``, so Mephisto never runs ``npm install`` in site-packages.
"""

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Optional

from parlai_empathy.files import cache_lock
from parlai_empathy.integration import compat

WEBAPP = os.path.join(os.path.dirname(__file__), 'webapp')
CACHE_ENV = 'PARLAI_EMPATHY_CROWD_CACHE'
WEBAPP_SOURCES = ('package.json', 'package-lock.json', 'build.mjs', 'index.html', 'router_guard.js')
MEPHISTO_VERSION = '1.1.1'


class PagesError(RuntimeError):
    """npm or node failed, or is missing; the message says which command and how to fix it."""


@dataclass(frozen=True)
class Pages:
    acute: str  # the ACUTE-Eval page's bundle
    turns: str  # the turn-annotation page's bundle
    index_html: str


def cache_dir(cache: Optional[str] = None) -> str:
    return os.path.expanduser(cache or os.environ.get(CACHE_ENV) or '~/.cache/parlai-empathy/crowd')


def _sources_digest() -> str:
    digest = hashlib.sha256()
    names = list(WEBAPP_SOURCES) + sorted(os.path.join('src', n) for n in os.listdir(os.path.join(WEBAPP, 'src')))
    for name in names:
        digest.update(name.encode())
        with open(os.path.join(WEBAPP, name), 'rb') as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]


def _run(cmd, cwd: str, what: str) -> None:
    try:
        done = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    except FileNotFoundError:
        raise PagesError(
            f'{what}: {cmd[0]} is not installed (the crowd extra needs node and npm: apt-get install nodejs npm)'
        ) from None
    except subprocess.TimeoutExpired:
        raise PagesError(f'{what}: {" ".join(cmd)} did not finish in 15 minutes') from None
    if done.returncode != 0:
        tail = '\n'.join(done.stdout.strip().splitlines()[-15:])
        raise PagesError(f'{what}: {" ".join(cmd)} failed (exit {done.returncode}) in {cwd}:\n{tail}')


def _npm_ci(folder: str, what: str) -> None:
    # the lock file pins every package; nothing runs install scripts (esbuild's binary comes as
    # its platform package, the router's packages have none that it needs)
    _run(['npm', 'ci', '--no-audit', '--no-fund', '--ignore-scripts', '--loglevel=error'], folder, what)


def _build_folder(target: str, build) -> None:
    """``build(folder)`` fills a temporary folder, renamed to ``target`` when complete (a whole
    folder in one step: a killed build leaves nothing that looks finished)."""
    tmp = cache_lock.temporary_name(target)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        build(tmp)
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build_pages(cache: Optional[str] = None) -> Pages:
    """The two page bundles, built if this version of ``webapp/`` has not been built yet."""
    target = os.path.join(cache_dir(cache), 'pages', _sources_digest())
    pages = Pages(
        os.path.join(target, 'acute.js'), os.path.join(target, 'turns.js'), os.path.join(target, 'index.html')
    )
    if os.path.isfile(pages.turns):
        return pages
    with cache_lock.build_lock(target, 'building the crowd task pages'):
        if os.path.isfile(pages.turns):
            return pages

        def build(folder):
            work = folder + '.src'
            shutil.copytree(WEBAPP, work, ignore=shutil.ignore_patterns('node_modules', 'build'))
            try:
                _npm_ci(work, 'building the crowd task pages')
                os.makedirs(folder)
                _run(['node', 'build.mjs', os.path.abspath(folder)], work, 'building the crowd task pages')
                shutil.copy2(os.path.join(WEBAPP, 'index.html'), os.path.join(folder, 'index.html'))
            finally:
                shutil.rmtree(work, ignore_errors=True)

        _build_folder(target, build)
    return pages


def _mephisto_router_source() -> str:
    import importlib.util

    spec = importlib.util.find_spec('mephisto')
    if spec is None or not spec.submodule_search_locations:
        raise PagesError('Mephisto is not installed: make install-crowd')
    return os.path.join(list(spec.submodule_search_locations)[0], 'abstractions', 'architects', 'router', 'node')


def router_source(cache: Optional[str] = None) -> str:
    """Mephisto's node router with its packages installed, listening on 127.0.0.1, our index."""
    pages = build_pages(cache)
    target = os.path.join(cache_dir(cache), 'router', f'mephisto-{MEPHISTO_VERSION}-{_sources_digest()}')
    if os.path.isfile(os.path.join(target, 'server.js')):
        return target
    with cache_lock.build_lock(target, "installing Mephisto's router"):
        if os.path.isfile(os.path.join(target, 'server.js')):
            return target

        def build(folder):
            shutil.copytree(_mephisto_router_source(), folder, ignore=shutil.ignore_patterns('node_modules'))
            server = os.path.join(folder, 'server.js')
            with open(server, encoding='utf-8') as f:
                text = compat.patch_text(f.read(), [compat.ROUTER_LISTEN_PATCH, compat.ROUTER_GUARD_PATCH], server)
            with open(server, 'w', encoding='utf-8') as f:
                f.write(text)
            shutil.copy2(os.path.join(WEBAPP, 'router_guard.js'), folder)
            shutil.copy2(pages.index_html, os.path.join(folder, 'static', 'index.html'))
            _npm_ci(folder, "installing Mephisto's router")

        _build_folder(target, build)
    return target


def router_copy(run_dir: str, cache: Optional[str] = None) -> str:
    """A run's own copy of the router, under its run folder."""
    dest = os.path.join(run_dir, 'router_source')
    if not os.path.isdir(dest):
        shutil.copytree(router_source(cache), dest, symlinks=True)
    return dest


if __name__ == '__main__':  # make install-crowd: build ahead of the first launch
    built = build_pages()
    print(f'crowd pages: {os.path.dirname(built.acute)}')
    print(f"Mephisto's router (127.0.0.1 only): {router_source()}")
