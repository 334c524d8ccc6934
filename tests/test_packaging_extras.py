"""Each part of the package declares what it imports: the core in install_requires, the optional
parts in their extras ([humaneval], [mturk], [offline]).

Every import of every module (function-level ones included) is read from the source and mapped to
the distribution that provides it in this environment; the requirements are those of the
installed parlai-empathy (what ``make reinstall`` put there).
"""

import ast
import importlib.metadata as metadata
import os
import re
import sys

import pytest

from conftest import REPO, install_lock, require_crowd

PACKAGE = os.path.join(REPO, 'parlai_empathy')
# Installed separately with --no-deps, by design (see README "What the install does").
# Mephisto too, by the crowd extra's install (its metadata pins break the tested set).
NOT_DECLARED = {'parlai', 'mephisto'}
PART_OF = [  # first match wins: (path prefix inside parlai_empathy/, extra)
    ('humaneval/providers.py', 'mturk'),
    ('humaneval/crowd/', 'crowd'),
    ('humaneval/', 'humaneval'),
    ('files/offline_models.py', 'offline'),
    ('models/glove.py', 'offline'),
    ('serving/chat.py', 'chat'),
]


def _canonical(name: str) -> str:
    return re.sub(r'[-_.]+', '-', name).lower()


def _requirements():
    """{extra or '': {canonical distribution names}} of the installed parlai-empathy."""
    out = {}
    with install_lock(shared=True):
        lines = metadata.requires('parlai-empathy') or []
    for line in lines:
        name = _canonical(re.match(r'[A-Za-z0-9_.-]+', line).group(0))
        extra = re.search(r'extra\s*==\s*["\']([^"\']+)["\']', line)
        out.setdefault(extra.group(1) if extra else '', set()).add(name)
    return out


def _imports(path):
    tree = ast.parse(open(path, encoding='utf-8').read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split('.')[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split('.')[0]


def _part(relpath):
    return next((extra for prefix, extra in PART_OF if relpath.startswith(prefix)), '')


def test_every_third_party_import_is_declared_for_its_part():
    requirements = _requirements()
    assert {'humaneval', 'mturk', 'offline', 'chat'} <= set(requirements), requirements.keys()
    with install_lock(shared=True):
        providers = metadata.packages_distributions()
    missing = []
    for root, _dirs, files in os.walk(PACKAGE):
        for name in files:
            if not name.endswith('.py'):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, PACKAGE).replace(os.sep, '/')
            allowed = requirements[''] | requirements.get(_part(rel), set())
            for module in set(_imports(path)):
                if module in sys.stdlib_module_names or module in NOT_DECLARED | {'parlai_empathy'}:
                    continue
                dists = {_canonical(d) for d in providers.get(module, [])}
                if not dists:
                    missing.append(f'{rel}: imports {module}, which no installed distribution provides')
                elif not dists & allowed:
                    missing.append(
                        f'{rel}: imports {module} ({sorted(dists)}), not declared for [{_part(rel) or "core"}]'
                    )
    assert not missing, '\n'.join(missing)


@pytest.mark.parametrize('extra', ['humaneval', 'mturk', 'offline', 'chat', 'crowd'])
def test_extras_name_installed_distributions(extra):
    if extra == 'crowd':
        require_crowd()
    for name in _requirements()[extra]:
        with install_lock(shared=True):
            assert metadata.version(name), name
