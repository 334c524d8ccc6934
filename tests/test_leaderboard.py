"""``parlai empathy_leaderboard`` on two stock baselines trained for a few steps on the sample (stock
ParlAI agents unpickle their checkpoints: the board opens them only with ``--trust-model-file``)."""

import csv
import dataclasses
import json
import os

import pytest

from conftest import REPO


def _train(run_parlai, model_file, model, *extra):
    run_parlai(
        'train_model',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-m',
        model,
        '-mf',
        model_file,
        '--n-layers',
        '1',
        '--embedding-size',
        '16',
        '--ffn-size',
        '32',
        '--n-heads',
        '2',
        '-bs',
        '8',
        '--max-train-steps',
        '10',
        '--dict-maxtokens',
        '2000',
        '--truncate',
        '48',
        *extra,
    )


@pytest.fixture
def baselines(run_parlai, tmp_path):
    generator, ranker = str(tmp_path / 'gen' / 'model'), str(tmp_path / 'rank' / 'model')
    _train(run_parlai, generator, 'transformer/generator', '--skip-generation', 'true', '-vmt', 'ppl')
    _train(run_parlai, ranker, 'transformer/ranker', '--candidates', 'batch', '--eval-candidates', 'batch')
    return generator, ranker


def test_leaderboard_evaluates_tabulates_plots_and_writes_evidence(baselines, run_parlai, tmp_path):
    generator, ranker = baselines
    outdir, artifacts = tmp_path / 'lb', tmp_path / 'runs'
    done = run_parlai(
        'empathy_leaderboard',
        '--entries',
        f'gen={generator}',
        f'rank={ranker}',
        '--ed-datapath',
        'sample',
        '--outdir',
        outdir,
        '--bertscore-model',
        'none',
        '--eval-args',
        '-bs 16',
        '--entry-args',
        'gen=--inference greedy',
        '--artifacts',
        artifacts,
        '--trust-model-file',
    )
    results = {r['name']: r for r in json.loads((outdir / 'results.json').read_text())['results']}
    assert results['gen']['kind'] == 'generator' and results['rank']['kind'] == 'ranker'
    assert {'avg_bleu', 'dist-1', 'dist-2', 'ppl', 'multi_bleu'} <= set(results['gen']['values'])
    assert 'p@1,100' in results['rank']['values'] and 'avg_bleu' in results['rank']['values']
    assert 'p@1,100' not in results['gen']['values']
    # the ranker's P@1,100 is ParlAI's hits@1 over 100-candidate blocks: one block in the sample
    assert 0.0 <= results['rank']['values']['p@1,100'] <= 1.0 and results['rank']['exs']['p@1,100'] == 100
    # and on blocks of shuffled examples (the paper's "randomly selected" wording), a second pass
    assert 0.0 <= results['rank']['values']['p@1,100_shuffled'] <= 1.0
    assert any('--ed-candidates rashkin100_shuffled --ed-candidates-seed 0' in c for c in results['rank']['commands'])
    assert 'p@1,100_shuffled' not in results['gen']['values']
    rows = list(csv.DictReader(open(outdir / 'leaderboard.csv')))
    assert [r['model'] for r in rows] == ['gen', 'rank']
    assert float(rows[0]['avg_bleu']) == pytest.approx(results['gen']['values']['avg_bleu'])
    assert (outdir / 'leaderboard.png').stat().st_size > 1000
    assert 'nrefs:1|case:mixed|eff:no|tok:13a' in (outdir / 'leaderboard.md').read_text()
    assert any('--ed-candidates rashkin100 --eval-candidates inline' in c for c in results['rank']['commands'])
    # each model's evidence: the figures recompute from its per-example outputs
    from parlai_empathy.evidence import artifacts as evidence

    for name in ('gen', 'rank'):
        report = evidence.read_report(str(artifacts / name))
        rows = evidence.read_outputs(str(artifacts / name / 'outputs.jsonl.gz'))
        recomputed = evidence.recompute(rows)
        assert set(report['values']) - {'ppl_ex'} <= set(recomputed) | {'avg_bleu', 'corpus_bleu-1'}
        for key, value in recomputed.items():
            if key in report['values']:
                assert value == pytest.approx(report['values'][key], rel=1e-6), (name, key)
        assert 'evidence in' in done.stdout
    ranked = evidence.read_outputs(str(artifacts / 'rank' / 'outputs.jsonl.gz'))
    assert sum(r.get('p@1,100') is not None for r in ranked) == 100

    # boards made one run at a time are gathered into one, nothing evaluated again
    merged = tmp_path / 'lb2'
    run_parlai(
        'empathy_leaderboard',
        '--entries',
        f'generator={outdir}/results.json#gen',
        f'rank={outdir}/results.json',
        '--outdir',
        merged,
        '--bertscore-model',
        'none',
    )
    gathered = {r['name']: r for r in json.loads((merged / 'results.json').read_text())['results']}
    assert gathered['generator']['values'] == results['gen']['values']
    assert gathered['rank']['values'] == results['rank']['values']
    assert gathered['rank']['commands'] == results['rank']['commands']
    wrong = run_parlai(
        'empathy_leaderboard',
        '--entries',
        f'mime={outdir}/results.json',
        '--outdir',
        tmp_path / 'lb3',
        '--bertscore-model',
        'none',
        check=False,
    )
    assert wrong.returncode != 0 and "has no row 'mime' (rows: gen, rank)" in wrong.stderr


def test_leaderboard_rejects_a_model_that_is_no_response_model_nor_classifier(run_parlai, tmp_path):
    model_file = tmp_path / 'm'
    model_file.write_text('')
    (tmp_path / 'm.opt').write_text(json.dumps({'model': 'repeat_label'}))
    done = run_parlai(
        'empathy_leaderboard',
        '--entries',
        f'm={model_file}',
        '--ed-datapath',
        'sample',
        '--outdir',
        tmp_path / 'lb',
        '--bertscore-model',
        'none',
        '--trust-model-file',
        'true',
        check=False,
    )
    assert done.returncode != 0
    assert 'neither a response generator, a response ranker nor an emotion classifier' in done.stderr


def test_the_evaluation_loop_scores_every_p100_example_when_batch_slots_run_dry(ed_dir, tmp_path, monkeypatch):
    """A batch of episodes of unequal length leaves slots padded while others still have turns: the
    loop must count real examples, not batchsize per parley (which once stopped 2 turns early and
    scored 5,198 of ED test's 5,200 P@1,100 examples at -bs 64)."""
    from parlai_empathy.leaderboard.eval_loop import run_eval
    from parlai_empathy.leaderboard.worldlogs import p100_hits

    monkeypatch.setenv('PARLAI_EMPATHY_ED_DIR', ed_dir)
    logs = str(tmp_path / 'logs.jsonl')
    report = run_eval(
        [
            '-t',
            'empathy_ed_clean',
            '--ed-candidates',
            'rashkin100',
            '-dt',
            'test',
            '-m',
            'echo_ranker:EchoRanker',
            '-bs',
            '64',
            '--datapath',
            str(tmp_path),
        ],
        logs,
        'echo',
        False,
    )
    hits = p100_hits(logs, int(report['exs'].value()))
    assert len(hits) == int(report['exs'].value()) == 5200


def test_a_row_whose_evidence_came_from_its_gpu_plan_is_marked_with_the_card(tmp_path):
    from parlai_empathy.leaderboard import readme_tables

    row = {'artifacts': 'runs/r'}
    (tmp_path / 'runs' / 'r').mkdir(parents=True)
    meta = tmp_path / 'runs' / 'r' / 'meta.json'
    meta.write_text(json.dumps({'plan': {'profile': 'cpu'}, 'machine': {'gpu': None}}))
    assert readme_tables._gpu_note(str(tmp_path), row) == ''
    meta.write_text(json.dumps({'plan': {'profile': 'gpu'}, 'machine': {'gpu': 'NVIDIA H200'}}))
    assert readme_tables._gpu_note(str(tmp_path), row) == ' (gpu plan, NVIDIA H200)'
    assert readme_tables._gpu_note(str(tmp_path), {'artifacts': 'runs/none'}) == ''


def test_a_row_can_fill_a_column_from_its_own_key(tmp_path):
    """Multi-TR has no polarity: the reference's PPL definition is its ``ppl_ex``, which fills the
    ``ppl_ex_gold`` column (table cell, example count, learning curve and minutes to target)."""
    from parlai_empathy.leaderboard import readme_tables

    (tmp_path / 'runs' / 'r').mkdir(parents=True)
    (tmp_path / 'runs' / 'r' / 'report.json').write_text(
        json.dumps({'values': {'ppl_ex': 40.31, 'ppl': 48.0}, 'exs': {'ppl_ex': 5259, 'ppl': 5259}})
    )
    curve = [{'minutes': 10.0, 'updates': 1000, 'ppl_ex': 60.0}, {'minutes': 20.0, 'updates': 2000, 'ppl_ex': 37.0}]
    (tmp_path / 'runs' / 'r' / 'meta.json').write_text(json.dumps({'training': {'curve': curve}}))
    table = {
        'id': '',
        'metrics': [{'key': 'ppl_ex_gold', 'label': 'PPL'}, {'key': 'ppl', 'label': 'corpus'}],
        'rows': [{'entry': 'r', 'label': 'R', 'paper': {}, 'artifacts': 'runs/r', 'keys': {'ppl_ex_gold': 'ppl_ex'}}],
    }
    target = {'metric': 'ppl_ex_gold', 'value': 37.54, 'mode': 'min'}
    line = readme_tables.render_project_table(str(tmp_path), table, target).splitlines()[-1]
    assert line.split(' | ')[1:] == ['', '', '40.31', '48', '5,259', '20 (2,000 updates)', '[runs/r](runs/r) |']
    del table['rows'][0]['keys']  # without it the column stays empty
    line = readme_tables.render_project_table(str(tmp_path), table, target).splitlines()[-1]
    assert line.split(' | ')[3] == ''


# ----- the board's figure and tables, from the committed evidence ----------------------------------
PROJECTS = os.path.join(REPO, 'projects')


def _table_rows():
    """(project, table metric key -> its scale, row) of every projects/*/table.json row."""
    from parlai_empathy.leaderboard.rows import project_tables

    for paper in sorted(os.listdir(PROJECTS)):
        path = os.path.join(PROJECTS, paper, 'table.json')
        if os.path.isfile(path):
            with open(path) as f:
                spec = json.load(f)
            for table in project_tables(spec):
                scales = {m['key']: m.get('scale', 1) for m in table['metrics']}
                for row in table['rows']:
                    yield paper, scales, row


@pytest.fixture(scope='module')
def board_results():
    from parlai_empathy.leaderboard.rows import gather_artifacts

    return gather_artifacts(PROJECTS)


def _drawn(results, tmp_path, monkeypatch):
    """What the board's figure draws, read off its artists once it is drawn: per panel its title,
    rows' y tick labels, bars (y centre, width) and paper markers (x, y centre); and the legend's labels."""
    import matplotlib.figure

    from parlai_empathy.leaderboard import plot

    drawn = []
    savefig = matplotlib.figure.Figure.savefig

    def spy(fig, *args, **kwargs):
        savefig(fig, *args, **kwargs)
        drawn.append({'legend': [t.get_text() for legend in fig.legends for t in legend.get_texts()]})
        for ax in fig.axes:
            if not ax.axison:
                continue
            bars = [(p.get_y() + p.get_height() / 2, p.get_width()) for p in ax.patches]
            markers = [
                (float(line.get_xdata()[0]), float(sum(line.get_ydata()) / len(line.get_ydata()))) for line in ax.lines
            ]
            labels = [t for t in ax.get_yticklabels() if t.get_fontweight() != 'bold']  # not a project's name
            drawn.append(
                {'title': ax.get_title(), 'labels': [t.get_text() for t in labels], 'bars': bars, 'markers': markers}
            )

    monkeypatch.setattr(matplotlib.figure.Figure, 'savefig', spy)
    plot.plot_headline(results, str(tmp_path / 'board.png'))
    return drawn[0]['legend'], drawn[1:]


def test_the_figure_draws_each_papers_figure_on_its_bars_scale_with_short_labels(board_results, tmp_path, monkeypatch):
    """Read off the drawn figure (not its pixels): a paper's figure sits beside its own row's bar on
    the bar's scale (the board once drew P@1,100 65.92 % at 0.66 beside bars in percent), every
    panel's title names its unit, and no row label fills the panel (a project is named once, in
    bold, above its rows)."""
    _, drawn = _drawn(board_results, tmp_path, monkeypatch)
    assert len(drawn) >= 10
    markers = 0
    for panel in drawn:
        assert panel['title'].endswith(')'), f'{panel["title"]}: no unit'
        assert all(len(line) <= 24 for label in panel['labels'] for line in label.split('\n')), panel['labels']
        for x, y in panel['markers']:
            width = [w for centre, w in panel['bars'] if abs(centre - y) < 1e-6]
            assert len(width) == 1, f'{panel["title"]}: a paper marker at y={y} has no bar'
            # ours and the paper's are the same quantity: never a factor of 100 apart
            assert 1 / 3 < x / width[0] < 3, f'{panel["title"]}: paper {x} beside our {width[0]}'
            markers += 1
    assert markers >= 10


def test_the_legend_names_only_what_the_figure_draws(board_results, tmp_path, monkeypatch):
    rankers = [r for r in board_results if r.kind == 'ranker']
    legend, _ = _drawn(rankers, tmp_path, monkeypatch)
    assert legend == ['ranker', "paper's figure (same scale)", '95 % bootstrap interval over test examples']
    legend, _ = _drawn([dataclasses.replace(r, paper={}) for r in rankers], tmp_path, monkeypatch)
    assert legend == ['ranker', '95 % bootstrap interval over test examples']
    legend, _ = _drawn([dataclasses.replace(r, paper={}, ci95=None) for r in rankers], tmp_path, monkeypatch)
    assert legend == ['ranker']


def test_the_panels_hold_each_papers_figure_as_its_table_prints_it(board_results):
    """Every paper figure of a table.json row with evidence is on the panel of its metric, equal to
    the table's figure converted to the panel's unit (P@1,100 65.92 in a table in percent is 65.92
    on the percent panel; emotion accuracy 0.34 in a table of fractions is 34 on the percent panel)."""
    from parlai_empathy.leaderboard.plot import headline_panels

    panels = {p.key: p for p in headline_panels(board_results)}
    bars = {(key, bar.name): bar for key, panel in panels.items() for bar in panel.bars}
    expected, undrawn = 0, set()
    for paper, scales, row in _table_rows():
        if not os.path.isdir(os.path.join(PROJECTS, paper, row.get('artifacts') or '-')):
            continue
        for key, figure in row.get('paper', {}).items():
            if key not in panels:
                undrawn.add(key)
                continue
            bar = bars[(key, f'{paper}/{row["entry"]}')]
            assert bar.paper == pytest.approx(figure / scales[key] * panels[key].scale), (paper, row['entry'], key)
            if scales[key] == panels[key].scale:
                assert bar.paper == pytest.approx(figure)
            expected += 1
    assert expected >= 10
    drawn = sum(bar.paper is not None for panel in panels.values() for bar in panel.bars)
    assert drawn == expected, 'a paper marker that no table.json figure gives'
    # only these are left to the project READMEs: Dist on the reference's nltk tokens (ETHREED) and
    # the classifier's agreement with the conversation label; MIME's PPL (gold polarity) and the
    # multi-bleu BLEU of MIME and Multi-TR have panels of their own
    assert undrawn <= {'dist-1_nltk', 'dist-2_nltk', 'speaker_agreement'}, undrawn
    assert panels['p@1,100_shuffled'].unit == panels['emo_acc'].unit == '%'


def test_each_panel_names_a_project_once_above_its_rows_short_labels(board_results):
    from parlai_empathy.leaderboard import plot

    for panel in plot.headline_panels(board_results):
        projects = [project for project, _ in panel.groups]
        assert len(projects) == len(set(projects)), f'{panel.key}: a project split into two groups'
        for project, bars in panel.groups:
            for bar in bars:
                assert all(len(line) <= plot.LABEL_WIDTH for line in bar.label.split('\n'))
                assert f'{project}/{bar.label.replace(chr(10), "")}' == bar.name  # still identifies the row
        names = [bar.name for bar in panel.bars]
        assert names == [r.name for r in board_results if panel.key in r.values]


def test_a_long_label_wraps_at_underscores_and_keeps_every_character():
    from parlai_empathy.leaderboard.plot import short_label

    label = short_label('ethreed_no_emotion_gru_and_no_party_and_no_kl', 24)
    assert label.split('\n') == ['ethreed_no_emotion_gru_', 'and_no_party_and_no_kl']
    assert short_label('x' * 30, 24).split('\n') == ['x' * 24, 'x' * 6]
    assert short_label('mime', 24) == 'mime'


def _md_tables(text):
    """The markdown tables of ``text``: each a list of rows, each row its cells (header first, no rule)."""
    tables, table = [], []
    for line in text.splitlines() + ['']:
        if line.startswith('|'):
            if not line.startswith('|---'):
                table.append([cell.strip() for cell in line.strip().strip('|').split('|')])
        elif table:
            tables.append(table)
            table = []
    return tables


def test_the_markdown_board_is_a_headline_table_and_the_csv_keeps_every_figure(board_results, tmp_path, monkeypatch):
    """The main table holds the metrics a researcher compares, on the figure's scale; each family's
    other figures follow in tables of their own (raw, as the CSV has them): no table is 29 columns
    wide, and every figure of the CSV is in exactly one markdown cell."""
    from parlai_empathy.leaderboard import board, columns, plot, rows

    monkeypatch.setattr(plot, 'plot_headline', lambda results, path: None)
    paths = board.write_outputs(board_results, str(tmp_path), rows.board_notes(board_results))
    with open(paths['leaderboard.md']) as f:
        tables = _md_tables(f.read())
    with open(paths['leaderboard.csv']) as f:
        csv_rows = list(csv.DictReader(f))
    assert len(csv_rows[0]) >= 25  # the CSV keeps every column
    main = tables[0]
    assert len(main[0]) <= 13 and all(len(t[0]) <= 16 for t in tables), [len(t[0]) for t in tables]
    for wanted in ('P@1,100', 'PPL', 'emotion acc', 'AVG BLEU', 'Dist-1', 'Dist-2', 'BERTScore', 'macro-F1'):
        assert any(wanted in header for header in main[0][1:]), wanted
    headlines = {h.column: h for h in columns.HEADLINE}

    def name(cell):  # a published row reads "published/NAME: released outputs of ..."
        return cell.split(': ', 1)[0]

    assert [name(row[0]) for row in main[1:]] == [row['model'] for row in csv_rows]
    seen = set()
    for table in tables:
        header = table[0]
        if 'matched' in header:  # the published rows' alignment counts: not figures of the CSV
            continue
        if any('–' in cell for row in table[1:] for cell in row):  # the headline figures' intervals
            for row in table[1:]:
                csv_row = csv_rows[[r['model'] for r in csv_rows].index(name(row[0]))]
                for column, cell in zip(header[1:], row[1:]):
                    key, scale = headlines[column].key, headlines[column].scale
                    if cell:
                        low, high = (float(x) for x in cell.split('–'))
                        assert low == pytest.approx(float(csv_row[f'{key} ci95 low']) * scale, rel=1e-3)
                        assert high == pytest.approx(float(csv_row[f'{key} ci95 high']) * scale, rel=1e-3)
                    else:
                        assert not csv_row.get(f'{key} ci95 low'), (row[0], key)
            continue
        for row in table[1:]:
            for column, cell in zip(header[1:], row[1:]):
                if not cell:
                    continue
                key, scale = (headlines[column].key, headlines[column].scale) if table is main else (column, 1)
                assert (name(row[0]), key) not in seen, f'{row[0]} {key} is in two tables'
                seen.add((name(row[0]), key))
                csv_row = csv_rows[[r['model'] for r in csv_rows].index(name(row[0]))]
                assert float(cell) == pytest.approx(float(csv_row[key]) * scale, rel=1e-3), (row[0], key)
    in_csv = {
        (r['model'], key)
        for r in csv_rows
        for key, value in r.items()
        if key != 'model' and value and ' ci95 ' not in key
    }
    assert seen == in_csv


def test_rows_of_one_project_share_one_group_and_rows_with_none_are_not_under_anothers_name(board_results):
    """A board of ``--entries`` may list one project's rows apart, or mix them with rows that have
    no project: each project is still named once, and the rows with none get a group of their own."""
    from parlai_empathy.leaderboard import plot

    rankers = [r for r in board_results if r.kind == 'ranker']
    mixed = [rankers[0], rankers[-1], rankers[1], dataclasses.replace(rankers[2], name='plain')]
    panel = plot.headline_panels(mixed)[0]
    assert [project for project, _ in panel.groups] == [
        rankers[0].name.split('/')[0],
        rankers[-1].name.split('/')[0],
        '',
    ]
    assert [label for label, bar in plot._slots(panel) if bar is None][-1] == '(no project)'


def test_a_given_datapath_reaches_every_entrys_evaluation(tmp_path):
    """``--datapath`` of the leaderboard is passed on to each eval_model run (whose data and caches
    would otherwise go to ParlAI's default folder, inside the installed package), unless
    ``--eval-args`` names its own."""
    from parlai.scripts.empathy_leaderboard import setup_args

    from parlai_empathy.leaderboard.pipeline import eval_common_args

    given = setup_args().parse_args(
        ['--entries', 'a=x', '--datapath', str(tmp_path), '--eval-args', '-bs 8', '--ed-datapath', 'sample']
    )
    assert eval_common_args(given) == ['--datapath', str(tmp_path), '-bs', '8', '--ed-datapath', 'sample']
    default = setup_args().parse_args(['--entries', 'a=x', '--eval-args', '-bs 8'])
    assert eval_common_args(default) == ['-bs', '8']
    both = setup_args().parse_args(['--entries', 'a=x', '--datapath', str(tmp_path), '--eval-args', '--datapath /d'])
    assert eval_common_args(both) == ['--datapath', '/d']  # the one in --eval-args, once
