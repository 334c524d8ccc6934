"""GoEmotions reader, groupings, official-download conventions and the empathy_goemotions teacher,
on the real release in ../shared/data/goemotions."""

import os
import shutil

import pytest

from parlai_empathy.data import goemotions


def test_real_splits_and_taxonomy(goemotions_dir):
    taxonomy = goemotions.read_taxonomy(goemotions_dir)
    assert len(taxonomy.names) == 28 and taxonomy.names[-1] == 'neutral'
    sizes = {split: len(goemotions.read_split(goemotions_dir, split)) for split in ('train', 'valid', 'test')}
    assert sizes == {'train': 43410, 'valid': 5426, 'test': 5427}
    first = goemotions.read_split(goemotions_dir, 'train')[0]
    assert first.comment_id == 'eebbqej' and first.label_ids == (27,) and first.line_no == 1


def test_groupings_follow_the_shipped_mappings(goemotions_dir):
    taxonomy = goemotions.read_taxonomy(goemotions_dir)
    ekman = taxonomy.classes('ekman')
    assert sorted(ekman) == ['anger', 'disgust', 'fear', 'joy', 'neutral', 'sadness', 'surprise']
    assert ekman[-1] == 'neutral'
    assert sorted(taxonomy.classes('sentiment')) == ['ambiguous', 'negative', 'neutral', 'positive']
    # two fine labels of one Ekman group collapse into one; order is class order
    assert taxonomy.group(['annoyance', 'anger', 'grief'], 'ekman') == [c for c in ekman if c in ('anger', 'sadness')]
    assert taxonomy.group(['curiosity', 'neutral'], 'sentiment') == ['ambiguous', 'neutral']
    with pytest.raises(ValueError, match='unknown GoEmotions grouping'):
        taxonomy.classes('plutchik')


def _copy_release(src, dst, train_text=None):
    shutil.copytree(src, dst)
    if train_text is not None:
        with open(os.path.join(dst, 'train.tsv'), 'w', encoding='utf-8') as f:
            f.write(train_text)
    return str(dst)


@pytest.mark.parametrize(
    'row, field',
    [
        ('only text and ids\t3\n', 'row'),
        ('some text\t3,x\tabc\n', 'ids'),
        ('some text\t28\tabc\n', 'ids'),
        ('some text\t3\t\n', 'comment_id'),
    ],
)
def test_malformed_rows_name_file_line_and_field(goemotions_dir, tmp_path, row, field):
    folder = _copy_release(goemotions_dir, tmp_path / 'ge', 'fine row\t1\tabc\n' + row)
    with pytest.raises(goemotions.GoEmotionsFormatError) as err:
        goemotions.read_split(folder, 'train')
    assert err.value.line_no == 2 and err.value.field == field
    assert 'train.tsv, line 2' in str(err.value)


def test_missing_file_and_unknown_group_member(goemotions_dir, tmp_path):
    folder = _copy_release(goemotions_dir, tmp_path / 'ge')
    with open(os.path.join(folder, 'ekman_mapping.json'), 'w') as f:
        f.write('{"joy": ["joy", "glee"]}')
    with pytest.raises(goemotions.GoEmotionsFormatError, match="unknown emotion 'glee'"):
        goemotions.read_taxonomy(folder)
    shutil.copy(os.path.join(goemotions_dir, 'ekman_mapping.json'), folder)
    os.remove(os.path.join(folder, 'test.tsv'))
    with pytest.raises(FileNotFoundError, match='test.tsv'):
        goemotions.read_split(folder, 'test')


def test_download_uses_parlai_build_conventions_and_sha256(goemotions_dir, tmp_path, monkeypatch):
    """The download path, with the network replaced by the shared copies of the same files."""
    from parlai.core import build_data

    fetched = []

    def fake_download(url, path, fname, **kwargs):
        fetched.append(url)
        shutil.copy(os.path.join(goemotions_dir, fname), os.path.join(path, fname))

    monkeypatch.delenv(goemotions.ENV_VAR, raising=False)
    monkeypatch.setattr(build_data, 'download', fake_download)
    folder = goemotions.resolve_dir(None, str(tmp_path))
    assert folder == str(tmp_path / 'goemotions')
    assert build_data.built(folder, goemotions.DOWNLOAD_VERSION)
    assert all(u.startswith('https://raw.githubusercontent.com/google-research/google-research/') for u in fetched)
    assert len(fetched) == 6 and len(goemotions.read_split(folder, 'test')) == 5427
    # already built: nothing is fetched again
    goemotions.resolve_dir(None, str(tmp_path))
    assert len(fetched) == 6

    def corrupt_download(url, path, fname, **kwargs):
        with open(os.path.join(path, fname), 'w') as f:
            f.write('not the real file')

    monkeypatch.setattr(build_data, 'download', corrupt_download)
    with pytest.raises(AssertionError, match='Checksum for train.tsv'):
        goemotions.download(str(tmp_path / 'other'))


def _teacher_examples(opt_args, goemotions_dir):
    from parlai.core.params import ParlaiParser

    from parlai_empathy.tasks.goemotions import GoEmotionsTeacher

    parser = ParlaiParser(True, False)
    GoEmotionsTeacher.add_cmdline_args(parser)
    opt = parser.parse_args(['--goemotions-datapath', goemotions_dir] + opt_args)
    teacher = GoEmotionsTeacher(opt)
    examples = []
    while not teacher.epoch_done():
        examples.append(teacher.act())
    return teacher, opt, examples


def test_teacher_multilabel_messages(goemotions_dir):
    teacher, opt, examples = _teacher_examples(['-dt', 'test'], goemotions_dir)
    assert len(examples) == 5427 and all(ex['episode_done'] for ex in examples)
    multi = [ex for ex in examples if len(ex['goemotions_labels']) > 1]
    assert multi, 'GoEmotions test has multi-label examples'
    ex = multi[0]
    assert ex['eval_labels'] == [','.join(ex['goemotions_labels'])]
    assert type(teacher).classifier_classes(opt)[-1] == 'neutral' and type(teacher).multilabel


def test_teacher_ekman_grouping(goemotions_dir):
    teacher, opt, examples = _teacher_examples(['-dt', 'valid', '--goemotions-grouping', 'ekman'], goemotions_dir)
    classes = type(teacher).classifier_classes(opt)
    assert len(classes) == 7
    seen = {name for ex in examples for name in ex['goemotions_labels']}
    assert seen == set(classes)


# ----------------------------------------------------------------------------------------------
# Hostile files: every way a file can fail names the file and the line; none yields 0 examples
# ----------------------------------------------------------------------------------------------

GOOD_SPLIT = b'I love it\t17\tabc1\nfine\t27\tabc2\n'
GARBAGE = __import__('random').Random(7).randbytes(3000)

# case -> (train.tsv content, None when it reads like GOOD_SPLIT, else (line, field, words))
HOSTILE_SPLITS = {
    'empty': (b'', (None, None, 'no examples (empty file)')),
    'only blank lines': (b'\n\r\n\n', (None, None, 'no examples (only blank lines)')),
    'binary garbage': (GARBAGE, (1, 'text', 'not UTF-8: byte 0xb4 at column 2')),
    'not UTF-8 at line 3': (GOOD_SPLIT + b'ok\t3\tab\xe9c\n', (3, 'comment_id', 'not UTF-8: byte 0xe9 at column 8')),
    'a header line': (b'text\tlabels\tid\n' + GOOD_SPLIT, (1, 'ids', "not comma-separated integers: 'labels'")),
    'wrong field count': (GOOD_SPLIT + b'two\tfields\n', (3, 'row', 'got 2')),
    'oversized line': (b'x' * ((1 << 20) + 5), (1, None, 'no line break within the cap of 1,048,576')),
    'NUL bytes': (GOOD_SPLIT.replace(b'fine', b'fi\0ne'), (2, 'text', 'NUL byte at column 3')),
    'UTF-16': (GOOD_SPLIT.decode().encode('utf-16'), (1, None, 'UTF-16 text')),
    'CRLF line ends': (GOOD_SPLIT.replace(b'\n', b'\r\n'), None),
    'UTF-8 byte order mark': (b'\xef\xbb\xbf' + GOOD_SPLIT, None),
}


@pytest.mark.parametrize('case', list(HOSTILE_SPLITS))
def test_hostile_split_files_name_file_and_line(tmp_path, case):
    content, error = HOSTILE_SPLITS[case]
    (tmp_path / 'train.tsv').write_bytes(content)
    (tmp_path / 'test.tsv').write_bytes(GOOD_SPLIT)
    if error is None:
        assert goemotions.read_split(str(tmp_path), 'train', 28) == goemotions.read_split(str(tmp_path), 'test', 28)
        return
    line_no, field, words = error
    with pytest.raises(goemotions.DataFileError) as err:
        goemotions.read_split(str(tmp_path), 'train', 28)
    assert (err.value.line_no, err.value.field) == (line_no, field), str(err.value)
    path = str(tmp_path / 'train.tsv')
    assert str(err.value).startswith(f'{path}, line {line_no}' if line_no else f'{path}: ') and words in str(err.value)


def _small_release(goemotions_dir, folder):
    """The release's taxonomy files, without the (large) splits."""
    os.makedirs(folder)
    for name in ('emotions.txt', 'ekman_mapping.json', 'sentiment_dict.json'):
        shutil.copy(os.path.join(goemotions_dir, name), folder)
    return str(folder)


@pytest.mark.parametrize(
    'file_name, content, words',
    [
        ('emotions.txt', b'', 'emotions.txt: no examples (no emotion names: empty file)'),
        ('emotions.txt', b'joy\nsad\njoy\n', "emotions.txt, line 3, field 'name': 'joy' is already on line 1"),
        ('emotions.txt', b'joy\nsad\nbl\xffe\n', 'emotions.txt, line 3: not UTF-8: byte 0xff at column 3'),
        ('emotions.txt', GARBAGE, 'emotions.txt, line 1: not UTF-8'),
        ('ekman_mapping.json', b'', 'ekman_mapping.json: no examples (empty file)'),
        ('ekman_mapping.json', b'{"joy": [\n"joy",\n"gl\xffee"]}', 'ekman_mapping.json, line 3: not UTF-8: byte 0xff'),
        ('ekman_mapping.json', b'{"joy": [\n"joy",\n', "ekman_mapping.json, line 3, field 'json': Expecting value"),
        ('sentiment_dict.json', b'["joy", "sadness"]', "sentiment_dict.json, line 1, field 'json': expected an object"),
    ],
)
def test_hostile_taxonomy_files_name_file_and_line(goemotions_dir, tmp_path, file_name, content, words):
    folder = _small_release(goemotions_dir, tmp_path / 'ge')
    with open(os.path.join(folder, file_name), 'wb') as f:
        f.write(content)
    with pytest.raises(goemotions.DataFileError) as err:
        goemotions.read_taxonomy(folder)
    assert str(err.value).startswith(folder) and words in str(err.value), str(err.value)


@pytest.mark.parametrize(
    'case, expected',
    [
        ('empty', '{dev}: no examples (empty file)'),
        (
            'not UTF-8 at line 3',
            "{dev}, line 3, field 'comment_id': not UTF-8: byte 0xe9 at column 8 (invalid continuation "
            'byte); the file must be UTF-8 text',
        ),
        ('missing split', 'GoEmotions file missing: {dev}'),
    ],
)
def test_parlai_display_data_ends_with_the_file_error_alone(run_parlai, goemotions_dir, tmp_path, case, expected):
    """What a user types and sees: the one message naming the file, no traceback, exit status 1."""
    folder = _small_release(goemotions_dir, tmp_path / 'ge')
    if case != 'missing split':
        with open(os.path.join(folder, 'dev.tsv'), 'wb') as f:
            f.write(HOSTILE_SPLITS[case][0])
    done = run_parlai(
        'display_data',
        '-t',
        'empathy_goemotions',
        '-dt',
        'valid',
        '--goemotions-datapath',
        folder,
        '--datapath',
        tmp_path / 'dp',
        check=False,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert 'Traceback' not in done.stdout + done.stderr
    assert done.stderr.strip() == expected.format(dev=os.path.join(folder, 'dev.tsv'))
