"""The papers' NOTEBOOK.md files are the decisions behind each table, not a diary: each stays under
150 lines, and every path it names for evidence exists (relative to its folder or the repository)."""

import glob
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(REPO, 'projects', '*', 'NOTEBOOK.md')))
# a path in backquotes, as the notebooks name evidence: runs/..., diagnostics/..., bench/..., ../...
PATH = re.compile(r'`((?:\.\./)*(?:runs|diagnostics|bench|tools|projects|parlai_empathy)/[^`\s]*)`')


@pytest.mark.parametrize('notebook', NOTEBOOKS, ids=lambda p: os.path.basename(os.path.dirname(p)))
def test_notebook_is_under_150_lines(notebook):
    with open(notebook, encoding='utf-8') as f:
        assert len(f.readlines()) < 150


@pytest.mark.parametrize('notebook', NOTEBOOKS, ids=lambda p: os.path.basename(os.path.dirname(p)))
def test_every_evidence_path_a_notebook_names_exists(notebook):
    folder = os.path.dirname(notebook)
    with open(notebook, encoding='utf-8') as f:
        named = PATH.findall(f.read())
    assert named
    missing = [
        p
        for p in named
        if not re.search(r'[{}<>*]|ROW|/M$', p)  # placeholders in a command
        and not any(os.path.exists(os.path.join(base, p.rstrip('/'))) for base in (folder, REPO))
    ]
    assert missing == [], f'{os.path.relpath(notebook, REPO)} names paths that do not exist'
