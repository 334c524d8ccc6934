"""Shared fixtures for the human-evaluation tests: real world logs and a real server process.

The world logs are produced by ParlAI itself (``eval_model --world-logs``) on the real ED test
split read by ParlAI's own ``empathetic_dialogues`` teacher: "gold" is ParlAI's repeat_label
agent (replies with the reference) and "echo" its repeat_query agent (parrots the speaker).
"""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from parlai_empathy.files.cache_lock import build_lock

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ed_dir() -> str:
    path = os.environ.get('PARLAI_EMPATHY_ED_DIR') or os.path.join(REPO, '..', 'shared', 'data', 'empatheticdialogues')
    if not os.path.isfile(os.path.join(path, 'test.csv')):
        raise FileNotFoundError(f'ED data not found at {path} (set PARLAI_EMPATHY_ED_DIR)')
    return path


def _parlai_datapath(root: str) -> str:
    """A ParlAI datapath whose empatheticdialogues folder links to the shared ED files."""
    import parlai.core.build_data as build_data

    dpath = os.path.join(root, 'empatheticdialogues')
    os.makedirs(os.path.join(dpath, 'empatheticdialogues'), exist_ok=True)
    for split in ('train', 'valid', 'test'):
        link = os.path.join(dpath, 'empatheticdialogues', f'{split}.csv')
        if not os.path.exists(link):
            os.symlink(os.path.join(ed_dir(), f'{split}.csv'), link)
    build_data.mark_done(dpath, version_string='1.0')  # ParlAI's ED build version
    return root


def make_world_logs(root: str) -> dict:
    """{'gold': path, 'echo': path}: ParlAI world logs over the whole ED test split."""
    datapath = _parlai_datapath(os.path.join(root, 'parlai_data'))
    procs, paths = [], {}
    for name, agent in (('gold', 'repeat_label'), ('echo', 'repeat_query')):
        paths[name] = os.path.join(root, f'{name}.jsonl')
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    '-m',
                    'parlai',
                    'eval_model',
                    '-t',
                    'empathetic_dialogues',
                    '-dt',
                    'test',
                    '--datapath',
                    datapath,
                    '-m',
                    agent,
                    '--world-logs',
                    paths[name],
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=root,
            )
        )
    for proc in procs:
        out = proc.communicate(timeout=300)[0]
        assert proc.returncode == 0, out.decode()[-2000:]
    return paths


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class Server:
    """The app in its own uvicorn process on 127.0.0.1, as in production.

    Its stdout and stderr (uvicorn's access and error logs) go to ``log_path``, appended to
    across restarts, so tests can read what the server logged."""

    def __init__(self, db_path: str, port: int = None, limits: dict = None):
        """``limits``: keyword arguments of :class:`parlai_empathy.humaneval.db.Limits`
        (default: the task's own, see ``app.default_limits``)."""
        self.db_path, self.port = db_path, port or free_port()
        self.limits = limits
        self.base = f'http://127.0.0.1:{self.port}'
        self.log_path = db_path + '.server.log'
        self.proc = None

    def start(self, timeout: float = 300):
        code = (
            'from parlai_empathy.humaneval.app import serve; '
            + ('from parlai_empathy.humaneval.db import Limits; ' if self.limits else '')
            + f'serve({self.db_path!r}, "127.0.0.1", {self.port}'
            + (f', limits=Limits(**{self.limits!r}))' if self.limits else ')')
        )
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))
        with open(self.log_path, 'ab') as log:
            self.proc = subprocess.Popen(
                [sys.executable, '-c', code], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(self.log()[-2000:])
            try:
                urllib.request.urlopen(self.base + '/healthz', timeout=1).read()
                return self
            except OSError:
                time.sleep(0.2)
        self.kill()  # never leave a late server running
        raise RuntimeError(f'server did not come up within {timeout:.0f} s')

    def log(self) -> str:
        with open(self.log_path, encoding='utf-8', errors='replace') as f:
            return f.read()

    def kill(self):
        """SIGKILL: no chance to flush anything, like a crash."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def cached_world_logs(tmp_path_factory) -> dict:
    """make_world_logs once per pytest session, shared by all human-evaluation test files
    (``PARLAI_EMPATHY_WORLD_LOGS_CACHE=DIR`` keeps them in DIR across sessions instead)."""
    cache = os.environ.get('PARLAI_EMPATHY_WORLD_LOGS_CACHE')
    root = Path(cache) if cache else tmp_path_factory.getbasetemp() / 'humaneval_world_logs'
    done = root / 'done'
    # the xdist workers share the cache folder when the variable is set: one builds, the others wait
    with build_lock(str(root), f'the human-evaluation world logs in {root}'):
        if not done.exists():
            root.mkdir(parents=True, exist_ok=True)
            make_world_logs(str(root))
            done.write_text('ok')
    return {name: str(root / f'{name}.jsonl') for name in ('gold', 'echo')}


CHROMIUM = shutil.which('chromium') or shutil.which('chromium-browser')
CHROMEDRIVER = shutil.which('chromedriver') or '/usr/bin/chromedriver'
BROWSER_MISSING = 'chromium not installed (apt-get install chromium chromium-driver, or make browser)'
BROWSER_REQUIRED = os.environ.get('PARLAI_EMPATHY_REQUIRE_BROWSER') == '1'


def headless_chromium(profile_dir):
    """A headless Chromium driven by selenium, or a skip (a failure where
    ``PARLAI_EMPATHY_REQUIRE_BROWSER=1``, as in CI) when Debian's chromium is absent."""
    import pytest

    if CHROMIUM is None:
        if BROWSER_REQUIRED:
            pytest.fail(
                f'{BROWSER_MISSING}; PARLAI_EMPATHY_REQUIRE_BROWSER=1 forbids skipping this test', pytrace=False
            )
        pytest.skip(BROWSER_MISSING)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
        '--disable-dev-shm-usage',
        f'--user-data-dir={profile_dir}',
        '--window-size=1000,1100',
    ):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(300)
    return driver


def click_and_wait(driver, element_id, timeout=300):
    """Click ``element_id`` and wait for the next page to replace this one before looking at it."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    old = driver.find_element(By.TAG_NAME, 'main')
    driver.find_element(By.ID, element_id).click()

    def replaced(_):
        # the old page is gone; chromedriver reports that either as a stale element or as
        # "node does not belong to the document" (the latter escapes staleness_of)
        try:
            old.is_enabled()
            return False
        except WebDriverException:
            return True

    WebDriverWait(driver, timeout).until(replaced)


def session_from(address: str):
    """A requests session whose connections leave from ``address`` (any 127.x.y.z works on
    Linux loopback), so one machine can play clients at several addresses."""
    import requests
    from requests.adapters import HTTPAdapter

    class SourceAddress(HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs):
            kwargs['source_address'] = (address, 0)
            super().init_poolmanager(*args, **kwargs)

    session = requests.Session()
    session.mount('http://', SourceAddress())
    return session


def entry_link(db, base: str, pid: str, session: str, study: str = 'STUDY1') -> str:
    """The Prolific-style entry URL as the platform fills it in for one participant."""
    from parlai_empathy.humaneval import providers

    return (
        providers.generic_entry_url(db, base)
        .replace('{{%PROLIFIC_PID%}}', pid)
        .replace('{{%STUDY_ID%}}', study)
        .replace('{{%SESSION_ID%}}', session)
    )


def peak_rss_kb(pid: int) -> int:
    """The process's peak resident set (VmHWM) in kB, from /proc."""
    with open(f'/proc/{pid}/status') as f:
        for line in f:
            if line.startswith('VmHWM:'):
                return int(line.split()[1])
    raise RuntimeError(f'no VmHWM in /proc/{pid}/status')


def stream_chunked(
    host: str, port: int, path: str, total_bytes: int, chunk: int = 1 << 20, timeout: float = 120
) -> dict:
    """POST ``total_bytes`` of form-like data to ``path`` as a chunked body (no Content-Length),
    reading the server's answer while sending; returns {'status', 'sent'}. A server that refuses
    early may close the connection while the body is still being sent: that ends the sending."""
    import select

    sock = socket.create_connection((host, port), timeout=timeout)
    head = (
        f'POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nTransfer-Encoding: chunked\r\n'
        'Content-Type: application/x-www-form-urlencoded\r\n\r\n'
    ).encode()
    piece = f'{chunk:x}\r\n'.encode() + b'a' * chunk + b'\r\n'
    out = [head] + [piece] * (total_bytes // chunk) + [b'0\r\n\r\n']
    received, sent, pending = b'', 0, b''
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and b'\r\n\r\n' not in received:
            want_write = bool(out or pending)
            readable, writable, _ = select.select([sock], [sock] if want_write else [], [], 1)
            if readable:
                data = sock.recv(65536)
                if not data:
                    break
                received += data
            if writable:
                if not pending:
                    pending = out.pop(0)
                n = sock.send(pending)
                sent += n
                pending = pending[n:]
    except OSError:
        pass  # refused mid-body: the connection was closed under the sender
    finally:
        sock.close()
    status = int(received.split(b' ', 2)[1]) if received.startswith(b'HTTP/') else None
    return {'status': status, 'sent': sent}
