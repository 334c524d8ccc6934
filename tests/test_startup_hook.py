"""The start-up hook (parlai_empathy_compat.pth) does nothing in a process that never imports
ParlAI, and still arms the ParlAI repairs in one that does (fresh processes of this venv)."""

import json
import subprocess
import sys

HEAVY = (
    'parlai_empathy.integration.compat',
    'parlai_empathy.integration.cpu_distributed',
    'torch',
    'numpy',
    'pkg_resources',
    'parlai',
)


def _fresh(code):
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr  # our line is the last


def test_a_process_without_parlai_imports_nothing_of_ours_but_the_hook():
    modules, stderr = _fresh('import sys, json; print(json.dumps(sorted(sys.modules)))')
    assert stderr == ''  # the hook prints nothing
    ours = [m for m in modules if m.startswith('parlai')]
    # the hook's own module and the packages above it, whose __init__ files hold only docstrings
    assert ours == ['parlai_empathy', 'parlai_empathy.integration', 'parlai_empathy.integration.startup'], ours
    assert not set(HEAVY) & set(modules)


def test_importing_parlai_arms_the_repairs():
    out, _stderr = _fresh(
        'import sys, json\n'
        'before = "parlai_empathy.integration.compat" in sys.modules\n'
        'import parlai.core.dict, parlai.nn.lr_scheduler\n'
        'print(json.dumps([before, type(parlai.core.dict.np).__name__,\n'
        '                  type(parlai.nn.lr_scheduler.optim).__name__]))'
    )
    assert out == [False, '_ModuleView', '_ModuleView']
