"""The package's imports point downward, and none runs in a circle.

Each top-level module or subpackage of ``parlai_empathy`` has a layer; a module imports only from
its own subpackage or from a lower layer, counting imports inside functions too (a lazy import is
still a dependency). The models are plain PyTorch: they import nothing of ParlAI.
"""

import ast
import os
import re

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'parlai_empathy')

ARCHITECTURE = os.path.join(os.path.dirname(PACKAGE), 'docs', 'architecture.md')
TABLE_START = 'parlai_empathy, highest first'


def read_layers(path=ARCHITECTURE):
    """The layer table of ``docs/architecture.md`` (its one copy), lowest layer first: each row of
    its ``parlai_empathy`` part names the layer's modules and subpackages (``leaderboard/``), comma
    separated, before two spaces and the description; ``__init__`` is the package's own."""
    lines = open(path, encoding='utf-8').read().splitlines()
    start = lines.index(TABLE_START) + 1
    layers = []
    for number, line in enumerate(lines[start:], start + 1):
        if line.startswith('```'):
            return layers[::-1]
        names = re.split(r'\s{2,}', line.strip(), maxsplit=1)[0]
        layer = {name.strip().rstrip('/') for name in names.split(',')}
        bad = sorted(name for name in layer if not re.fullmatch(r'[a-z_]+', name))
        assert not bad, f'{path}, line {number}: not a module or subpackage name: {bad}'
        layers.append({'parlai_empathy' if name == '__init__' else name for name in layer})
    raise AssertionError(f'{path}: the layer table after {TABLE_START!r} has no closing ```')


LAYERS = read_layers()
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _modules():
    found = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith('.py'):
                path = os.path.join(folder, name)
                parts = os.path.relpath(path[:-3], os.path.dirname(PACKAGE)).split(os.sep)
                if parts[-1] == '__init__':
                    parts = parts[:-1]
                found['.'.join(parts)] = path
    return found


MODULES = _modules()


def _imports(module, path):
    """(module imported, line) for every import of ``parlai_empathy`` or ``parlai`` in ``path``."""
    tree = ast.parse(open(path, encoding='utf-8').read(), path)
    package = module if path.endswith('__init__.py') else module.rsplit('.', 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split('.')[: len(package.split('.')) - node.level + 1]
                target = '.'.join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ''
            for alias in node.names:
                full = f'{target}.{alias.name}'
                yield (full if full in MODULES else target), node.lineno


def _layer(module):
    parts = module.split('.')
    return parts[1] if len(parts) > 1 else parts[0]


def _graph():
    return {
        module: {(target, line) for target, line in _imports(module, path) if target in MODULES and target != module}
        for module, path in MODULES.items()
    }


def test_every_part_of_the_package_has_a_layer():
    assert not {_layer(m) for m in MODULES} - set(RANK), 'add the new module to the layer table of docs/architecture.md'


def test_the_layer_table_names_only_what_exists():
    """A row left behind after a module moved would keep a layer for nothing."""
    assert not set(RANK) - {_layer(m) for m in MODULES}, 'remove it from the layer table of docs/architecture.md'


def test_imports_point_downward():
    wrong = []
    for module, targets in _graph().items():
        for target, line in targets:
            here, there = _layer(module), _layer(target)
            if here != there and RANK[there] >= RANK[here]:
                wrong.append(
                    f'{MODULES[module]}:{line}: {module} imports {target} (layer {RANK[there]} >= {RANK[here]})'
                )
    assert not wrong, '\n'.join(wrong)


def test_no_import_cycle():
    graph = {module: {target for target, _ in targets} for module, targets in _graph().items()}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert not cycles, cycles


@pytest.mark.parametrize('module', sorted(m for m in MODULES if _layer(m) == 'models'))
def test_models_never_import_parlai(module):
    imported = [
        f'{target} (line {line})'
        for target, line in _imports(module, MODULES[module])
        if target == 'parlai' or target.startswith('parlai.')
    ]
    assert not imported, f'{MODULES[module]} imports ParlAI: {imported}'


def test_package_root_is_grouped_by_job():
    """The package root shows its jobs as subpackages; a loose module there needs a reason."""
    loose = sorted(name for name in os.listdir(PACKAGE) if name.endswith('.py') and name != '__init__.py')
    assert len(loose) <= 6, f'parlai_empathy/ holds {len(loose)} loose modules: {loose}; give each a subpackage'
