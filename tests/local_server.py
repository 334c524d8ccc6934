"""A server of ours (or ``python -m http.server``) in its own process on 127.0.0.1, for tests."""

import subprocess
import tempfile
import time
import urllib.request

from humaneval_helpers import free_port


class LocalServer:
    """Starts ``argv(port)`` and waits until ``http://127.0.0.1:<port><ready_path>`` answers."""

    def __init__(self, argv, ready_path='/', timeout=3600, env=None, cwd=None):
        self.port = free_port()
        self.url = f'http://127.0.0.1:{self.port}'
        self.log = tempfile.TemporaryFile()  # a pipe nobody reads could fill up and block it
        self.proc = subprocess.Popen(
            [str(a) for a in argv(self.port)], stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=cwd
        )
        deadline = time.monotonic() + timeout  # model loading on a busy machine can be slow
        while True:
            try:
                urllib.request.urlopen(self.url + ready_path, timeout=5).read()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f'{argv(self.port)} did not start:\n{self.output()[-3000:]}') from None
                time.sleep(0.3)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode('utf-8', 'replace')

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
