"""``projects/majumder2020_mime/diagnostics/reference_curve.py --init ours``: the 300-d word file it
writes for the reference's
``gen_embeddings`` starts every word as our ``-m empathy/mime`` does under each ``--fill-std``."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIAGNOSTICS = os.path.join(REPO, 'projects', 'majumder2020_mime', 'diagnostics')
sys.path.insert(0, DIAGNOSTICS)
import reference_curve  # noqa: E402


def read_table(path):
    rows = {}
    with open(path, encoding='utf-8') as handle:
        for line in handle:
            word, *values = line.split(' ')
            rows[word] = [float(v) for v in values]
    return rows


@pytest.fixture
def dict_file(tmp_path):
    path = tmp_path / 'model.dict'
    path.write_text('__null__\t1000000003\nhappy\t120\nsad\t80\nzzqxnotaword\t3\n', encoding='utf-8')
    return str(path)


def test_fill_std_scales_only_what_glove_does_not_give(tmp_path, dict_file):
    from parlai_empathy.models.glove import fill_std_value, glove_fill_std, load_glove

    glove, _hit = load_glove(['happy', 'sad'])
    tables = {}
    for option in ('0.01', 'glove'):
        out = str(tmp_path / f'init_{option}.txt')
        info = reference_curve.write_init_file(dict_file, out, fill_std=fill_std_value(glove_fill_std(option)))
        assert info['words'] == 3 and info['in_glove'] == 2 and info['dim'] == 300
        assert info['fill_std'] == (0.01 if option == '0.01' else 'glove')
        tables[option] = read_table(out)
        assert set(tables[option]) == {'happy', 'sad', 'zzqxnotaword'}
        for i, word in enumerate(('happy', 'sad')):
            row = tables[option][word]
            assert len(row) == 300
            assert row[:50] == pytest.approx(glove[i].tolist(), abs=1e-5)
    small, wide = tables['0.01'], tables['glove']
    padding = [abs(v) for word in ('happy', 'sad') for v in small[word][50:]]
    padding += [abs(v) for v in small['zzqxnotaword']]
    assert max(padding) < 0.06  # N(0, 0.01): five sigma over 850 draws
    wide_padding = [abs(v) for word in ('happy', 'sad') for v in wide[word][50:]]
    assert max(wide_padding) > 0.3  # GloVe's own std (about 0.4)


@pytest.mark.parametrize('option', ['-1', 'wide', 'nan'])
def test_fill_std_rejects_what_is_not_a_scale(option, tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            os.path.join(DIAGNOSTICS, 'reference_curve.py'),
            '--mime-repo',
            str(tmp_path),
            '--dict',
            str(tmp_path / 'none.dict'),
            '--out',
            str(tmp_path / 'c.json'),
            f'--fill-std={option}',
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    assert '--fill-std' in done.stderr and 'non-negative number or "glove"' in done.stderr
    assert not (tmp_path / 'c.json').exists()


def test_child_reads_its_arguments_without_our_package(tmp_path):
    """The child process runs in the reference's own venv, where ``parlai_empathy`` is not
    installed: reading its command line must not need it (a ``--fill-std`` type that imported it
    stopped every run at its start)."""
    code = (
        'import sys; sys.modules["parlai_empathy"] = None; '
        f'sys.path.insert(0, {DIAGNOSTICS!r}); import reference_curve; '
        'args = reference_curve.build_parser().parse_args(["--child", "mime-curve", "--spec", "s.json"]); '
        'print(args.child, args.fill_std)'
    )
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ['mime-curve', '0.01']
