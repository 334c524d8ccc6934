"""The leaderboard's typed records read and write exactly the JSON the committed evidence holds,
and every table, figure and model card writes a number with the one formatter."""

import dataclasses
import glob
import json
import os

import pytest

from conftest import REPO
from parlai_empathy.leaderboard import formatting
from parlai_empathy.leaderboard.records import Entry, EntryResult, Meta, Report

PROJECTS = os.path.join(REPO, 'projects')
REPORTS = sorted(glob.glob(os.path.join(PROJECTS, '*', 'runs', '*', 'report.json')))
METAS = sorted(glob.glob(os.path.join(PROJECTS, '*', 'runs', '*', 'meta.json')))


def _as_written(obj) -> str:
    """What :func:`parlai_empathy.evidence.artifacts.write_json` writes for ``obj``."""
    return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + '\n'


def _read(path):
    with open(path, encoding='utf-8') as f:
        return f.read()


@pytest.mark.parametrize('path', REPORTS, ids=lambda p: os.path.relpath(p, PROJECTS))
def test_every_committed_report_reads_and_writes_back_to_the_same_bytes(path):
    text = _read(path)
    report = Report.from_json(json.loads(text), path)
    assert _as_written(report.to_json()) == text
    assert not report.extra, f'{path}: keys the record does not model: {sorted(report.extra)}'
    assert report.kind in ('ranker', 'generator', 'classifier', 'published') and report.values


@pytest.mark.parametrize('path', METAS, ids=lambda p: os.path.relpath(p, PROJECTS))
def test_every_committed_meta_reads_and_writes_back_to_the_same_bytes(path):
    text = _read(path)
    meta = Meta.from_json(json.loads(text), path)
    assert _as_written(meta.to_json()) == text
    assert not meta.extra, f'{path}: keys the record does not model: {sorted(meta.extra)}'


def test_there_is_committed_evidence_to_check():
    assert len(REPORTS) >= 10 and len(METAS) >= 10


def test_a_gathered_board_reads_and_writes_back_to_the_same_bytes(tmp_path, monkeypatch):
    from parlai_empathy.leaderboard import board, plot, rows

    monkeypatch.setattr(plot, 'plot_headline', lambda results, path: None)
    results = rows.gather_artifacts(PROJECTS)
    paths = board.write_outputs(results, str(tmp_path), rows.board_notes(results))
    text = _read(paths['results.json'])
    saved = json.loads(text)
    read = [EntryResult.from_json(row) for row in saved['results']]
    assert read == results
    assert _as_written({'results': [r.to_json() for r in read], 'notes': saved['notes']}) == text
    # a gathered row has exactly the fields the board has always written for it, with its figures'
    # 95% intervals; a published row (another paper's released outputs) also its label and
    # alignment counts
    fields = {'name', 'kind', 'values', 'exs', 'commands', 'paper', 'seconds', 'notes', 'ci95'}
    assert {frozenset(row) for row in saved['results']} == {
        frozenset(fields),
        frozenset(fields | {'label', 'alignment'}),
    }


def test_fields_a_record_does_not_model_and_nulls_are_kept_as_read():
    row = {'name': 'a', 'values': {'ppl': 40.0}, 'kind': None, 'world_logs': 'a.jsonl', 'added_later': [1, 2]}
    result = EntryResult.from_json(row)
    assert (
        result.kind is None and result.world_logs == 'a.jsonl' and result.extra == {'kind': None, 'added_later': [1, 2]}
    )
    assert result.to_json() == row
    meta = {'plan': {'profile': 'gpu'}, 'machine': {'gpu': None}, 'evaluation_seconds': None}
    assert Meta.from_json(meta).to_json() == meta


def test_outputs_stay_in_memory_and_out_of_results_json():
    result = EntryResult(name='gen', values={'ppl': 40.0}, commands=[], outputs=[{'id': 'c/1', 'reply': 'hi'}])
    assert result.to_json() == {'name': 'gen', 'values': {'ppl': 40.0}, 'commands': []}
    assert result == dataclasses.replace(result, outputs=None)  # the figures are the row, not the examples


def test_records_are_frozen_and_their_accessors_read_absent_fields_as_none():
    report = Report.from_json({'values': {'ppl': 40.31}, 'exs': {'ppl': 5259}, 'ci95': {'ppl': [39.0, 41.5]}})
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.values = {}
    assert 'ppl' in report and 'bleu' not in report
    assert report.value('ppl') == 40.31 and report.count('ppl') == 5259 and report.interval('ppl') == (39.0, 41.5)
    assert report.value('bleu') is None and report.count('bleu') is None and report.interval('bleu') is None
    meta = Meta.from_json({})
    assert (meta.seconds, meta.curve, meta.profile, meta.gpu) == (0.0, [], '', None)
    gpu = Meta.from_json({'plan': {'profile': 'gpu'}, 'machine': {'gpu': 'NVIDIA H200'}, 'evaluation_seconds': 75.2})
    assert (gpu.seconds, gpu.profile, gpu.gpu) == (75.2, 'gpu', 'NVIDIA H200')


def test_a_record_that_is_not_a_json_object_or_lacks_its_figures_is_named(tmp_path):
    with pytest.raises(ValueError, match=r'runs/r/report.json: no "values" object'):
        Report.from_json({'kind': 'ranker'}, 'runs/r/report.json')
    with pytest.raises(ValueError, match='runs/r/meta.json: not a JSON object'):
        Meta.from_json([1], 'runs/r/meta.json')
    with pytest.raises(ValueError, match="results.json row: no 'name' field"):
        EntryResult.from_json({'values': {}})


def test_an_entry_is_told_apart_by_its_path(tmp_path):
    (tmp_path / 'model').write_text('')
    (tmp_path / 'model.opt').write_text('{}')
    assert Entry('m', str(tmp_path / 'model')).source == 'model'
    assert Entry('r', str(tmp_path / 'report.json')).source == 'report'
    assert Entry('w', str(tmp_path / 'logs.jsonl')).source == 'world_logs'
    assert Entry('b', str(tmp_path / 'results.json')).source == 'leaderboard'
    assert Entry('b', str(tmp_path / 'board.json#gen')).source == 'leaderboard'


def test_entry_args_are_added_to_their_entry_only():
    from parlai_empathy.leaderboard.evaluation import attach_entry_args

    entries = [Entry('gen', 'g'), Entry('rank', 'r')]
    added = attach_entry_args(entries, ['gen=--inference beam', 'gen=-bs 8'])
    assert added[0].extra_args == ('--inference', 'beam', '-bs', '8') and added[1] is entries[1]
    assert entries[0].extra_args == ()  # the entries given are left as they were
    with pytest.raises(ValueError, match=r"--entry-args 'mime=-bs 8': expected NAME=ARGS with NAME one of"):
        attach_entry_args(entries, ['mime=-bs 8'])


# ----- the one number formatter ---------------------------------------------------------------------
@pytest.mark.parametrize(
    'value,written',
    [
        (None, ''),
        ('', ''),  # no figure (an empty CSV cell)
        (65.92, '65.92'),
        (0.123456, '0.1235'),
        (37.54, '37.54'),
        (0.0, '0'),
        (-0.5, '-0.5'),
        (100, '100'),
        (5, '5'),  # whole numbers as they are
        (999.94, '999.9'),
        (999.96, '1000'),  # four significant digits up to 1,000
        (1234.6, '1235'),
        (12345, '12345'),
        (-4321.2, '-4321'),  # whole numbers from 1,000 on, never 1.235e+03
    ],
)
def test_a_figure_has_four_significant_digits_and_whole_numbers_from_a_thousand(value, written):
    assert formatting.figure(value) == written


def test_counts_and_per_label_scores():
    assert formatting.count(5200) == '5,200' and formatting.count(75) == '75'
    assert formatting.per_label(0.5) == '0.500' and formatting.per_label(0.12345) == '0.123'


def test_the_model_card_writes_figures_as_the_board_does():
    from parlai_empathy.serving import model_card

    spec = {
        'metrics': [{'key': 'ppl', 'label': 'PPL', 'scale': 1}, {'key': 'p@1,100', 'label': 'P@1,100', 'scale': 100}]
    }
    lines = model_card.evaluation_table(
        spec, {'paper': {'ppl': 37.54, 'p@1,100': 65}}, {'ppl': 1234.6, 'p@1,100': 0.6592}
    )
    assert lines[2:] == ['| PPL | 1235 | 37.54 |', '| P@1,100 | 65.92 | 65 |']


def test_no_agent_or_model_imports_the_leaderboard():
    """The leaderboard evaluates agents; an agent importing it would import the evaluation into
    every model's start-up (what an agent needs of a saved model is in ``parlai_empathy.integration.model_opt``)."""
    sources = glob.glob(os.path.join(REPO, 'parlai_empathy', 'agents', '*.py'))
    sources += glob.glob(os.path.join(REPO, 'parlai_empathy', 'models', '*.py'))
    assert sources
    for path in sources:
        assert 'parlai_empathy.leaderboard' not in _read(path), f'{path} imports the leaderboard'
