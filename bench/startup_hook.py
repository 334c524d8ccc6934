"""Interpreter start-up with and without the ``parlai_empathy_compat.pth`` start-up hook.

The hook runs in every Python process of the environment, so its cost is paid by every process,
ParlAI or not. Measured in a throw-away venv made from this interpreter, whose only addition is a
path line pointing at this environment's site-packages (so ``parlai_empathy`` is importable but no
``.pth`` file of the real environment runs); the variants differ only in the hook line:

* ``none``: no hook (``.pth`` files run in name order, so the path line, named ``_env_...``, comes first);
* ``lazy``: the installed hook (``parlai_empathy.integration.startup``: arms compat on the first ``import parlai``);
* ``eager``: the earlier hook, which imported and armed ``parlai_empathy.integration.compat`` at start-up.

Each variant runs ``python -c pass`` ``--runs`` times, interleaved round-robin so the machine's
load drifts over all of them alike; reported: median wall time and median CPU time (user + system,
from ``wait4``) per start-up, and the modules the hook added to ``sys.modules``. On a loaded
machine (or under ``nice``) wall time mostly measures waiting for a core; CPU time is the cost.

    nice -n 19 .venv/bin/python bench/startup_hook.py --runs 300
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

HOOKS = {
    'none': None,
    'lazy': 'import parlai_empathy.integration.startup as _s; _s.install()',
    'eager': 'import parlai_empathy.integration.compat as _c; _c.install_import_hook()',
}
MODULES = 'import sys, json; print(json.dumps(sorted(sys.modules)))'


def make_venvs(root: str) -> dict:
    site = sysconfig.get_paths()['purelib']
    pythons = {}
    for name, hook in HOOKS.items():
        venv = os.path.join(root, name)
        subprocess.run([sys.executable, '-m', 'venv', '--without-pip', venv], check=True)
        python = os.path.join(venv, 'bin', 'python')
        venv_site = subprocess.run(
            [python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        with open(os.path.join(venv_site, '_env_site_packages.pth'), 'w') as f:
            f.write(site + '\n')
        if hook:
            with open(os.path.join(venv_site, 'parlai_empathy_compat.pth'), 'w') as f:
                f.write(hook + '\n')
        pythons[name] = python
    return pythons


def one_start(python: str):
    """(wall seconds, CPU seconds) of one ``python -c pass``."""
    start = time.perf_counter()
    proc = subprocess.Popen([python, '-c', 'pass'])
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f'{python} -c pass exited {proc.returncode}')
    return wall, usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--runs', type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        pythons = make_venvs(root)
        modules = {
            name: set(
                json.loads(subprocess.run([py, '-c', MODULES], check=True, capture_output=True, text=True).stdout)
            )
            for name, py in pythons.items()
        }
        times = {name: [] for name in pythons}
        for _ in range(args.runs):
            for name, python in pythons.items():
                times[name].append(one_start(python))
    base = modules['none']
    print(f'python -c pass, {args.runs} runs each, interleaved; {sys.version.split()[0]}, {os.cpu_count()} CPUs')
    print('| hook | median wall ms | median CPU ms | modules added by the hook |')
    print('|---|---|---|---|')
    for name, samples in times.items():
        added = sorted(modules[name] - base)
        shown = ', '.join(added) if len(added) <= 6 else f'{len(added)}: ' + ', '.join(added[:6]) + ', ...'
        wall, cpu = (1000 * statistics.median(column) for column in zip(*samples))
        print(f'| {name} | {wall:.1f} | {cpu:.1f} | {shown or "none"} |')


if __name__ == '__main__':
    main()
