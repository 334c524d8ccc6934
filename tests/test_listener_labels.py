"""ETHREED's listener labels as a portable folder (``parlai_empathy.emotions.listener_labels``).

A tag cache of the embedded ED sample (written with the cache's own writer, probabilities drawn at
random) is exported, loaded back and checked against the text it was made from; malformed and
edited folders are named with file, line and field. The labels shipped with the package cover the
real ED files, every utterance with its own text.
"""

import gzip
import hashlib
import json
import shutil

import numpy as np
import pytest

from parlai_empathy.data import ed_source
from parlai_empathy.data.emotions import ED_EMOTIONS
from parlai_empathy.emotions import listener_labels, tag_cache


@pytest.fixture(scope='module')
def exported(tmp_path_factory):
    base = tmp_path_factory.mktemp('labels')
    ed_dir = ed_source.sample_dir()
    utterances = tag_cache.ed_utterances(ed_dir)
    probs = np.random.default_rng(0).dirichlet(np.ones(len(ED_EMOTIONS)), size=len(utterances)).astype(np.float32)
    cache = str(base / 'cache')
    classifier = {
        'key': 'k' * 64,
        'classes': list(ED_EMOTIONS),
        'multilabel': False,
        'threshold': 0.5,
        'model_file': '/somewhere/clf/model',
    }
    tag_cache.write_complete(cache, utterances, probs, classifier, tag_cache.data_key(ed_dir))
    out = str(base / 'labels')
    meta = listener_labels.export(cache, ed_dir, out, command='parlai empathy_tag_ed -mf /somewhere/clf/model')
    return {'dir': out, 'cache': cache, 'meta': meta, 'utterances': utterances, 'probs': probs, 'ed_dir': ed_dir}


def test_export_keeps_each_utterances_top_emotion_and_loads_back(exported):
    folder = listener_labels.load(exported['dir'])
    assert exported['meta']['counts']['utterances'] == len(exported['utterances']) == len(folder.labels)
    for u, p in zip(exported['utterances'], exported['probs']):
        assert folder.emotion(u.conv_id, u.utterance_idx) == ED_EMOTIONS[int(np.argmax(p))]
    folder.check_covers(exported['ed_dir'])  # made from this very text: nothing to report
    assert exported['meta']['classifier']['model_file'] == 'model'  # no machine path committed
    assert exported['meta']['format'] == listener_labels.FORMAT


def test_the_same_labels_give_the_same_bytes(exported, tmp_path):
    again = listener_labels.export(exported['cache'], exported['ed_dir'], str(tmp_path / 'again'))
    assert again['sha256'] == exported['meta']['sha256']


def test_labels_of_other_text_are_refused_naming_the_utterance(exported, tmp_path):
    ed_copy = tmp_path / 'ed'
    shutil.copytree(exported['ed_dir'], ed_copy)
    lines = (ed_copy / 'valid.csv').read_text(encoding='utf-8').splitlines(keepends=True)
    fields = lines[3].split(',')
    fields[5] = 'A sentence nobody labelled.'
    lines[3] = ','.join(fields)
    (ed_copy / 'valid.csv').write_text(''.join(lines), encoding='utf-8')
    with pytest.raises(listener_labels.LabelFileError) as err:
        listener_labels.load(exported['dir']).check_covers(str(ed_copy))
    message = str(err.value)
    assert f'valid {fields[0]} utterance {fields[1]}: other text' in message
    assert '1 utterances differ' in message and 'empathy_tag_ed --export-labels' in message


def _rewrite(folder, edit, fix_sha=True):
    path = folder / listener_labels.LABELS
    lines = gzip.decompress(path.read_bytes()).decode('utf-8').splitlines(keepends=True)
    lines = edit(lines)
    path.write_bytes(gzip.compress(''.join(lines).encode('utf-8')))
    if fix_sha:
        meta = json.loads((folder / listener_labels.META).read_text())
        meta['sha256'] = hashlib.sha256(path.read_bytes()).hexdigest()
        (folder / listener_labels.META).write_text(json.dumps(meta))


@pytest.mark.parametrize(
    'line, field, value, named',
    [
        (5, 3, 'happyish', 'field "emotion"'),
        (7, 2, 'two', 'field "utterance_idx"'),
        (9, 4, '1.7', 'field "probability"'),
        (11, 0, 'dev', 'field "split"'),
        (13, 5, 'xyz', 'field "text_sha1"'),
    ],
)
def test_a_malformed_line_is_named_with_its_line_and_field(exported, tmp_path, line, field, value, named):
    folder = tmp_path / 'labels'
    shutil.copytree(exported['dir'], folder)

    def edit(lines):
        fields = lines[line - 1].rstrip('\n').split(',')
        fields[field] = value
        lines[line - 1] = ','.join(fields) + '\n'
        return lines

    _rewrite(folder, edit)
    with pytest.raises(listener_labels.LabelFileError) as err:
        listener_labels.load(str(folder))
    assert f'{listener_labels.LABELS}, line {line}, {named}' in str(err.value)


def test_an_edited_or_truncated_file_fails_its_checksum(exported, tmp_path):
    folder = tmp_path / 'labels'
    shutil.copytree(exported['dir'], folder)
    _rewrite(folder, lambda lines: lines[:-1], fix_sha=False)
    with pytest.raises(listener_labels.LabelFileError, match='does not match the sha256'):
        listener_labels.load(str(folder))
    (folder / listener_labels.META).write_text('{"format": ')
    with pytest.raises(listener_labels.LabelFileError, match='line 1: not valid JSON'):
        listener_labels.load(str(folder))


def _header_and_bad_byte(data):
    lines = data.splitlines(keepends=True)
    return (
        lines[0]
        + lines[1]
        + lines[2]
        + lines[3].replace(b'valid', b'val\xffid').replace(b'train', b'tr\xffain')
        + b''.join(lines[4:])
    )


@pytest.mark.parametrize(
    'content, named',
    [
        (lambda data: gzip.compress(data.splitlines(keepends=True)[0]), 'labels.csv.gz: no examples (header only)'),
        (
            lambda data: gzip.compress(_header_and_bad_byte(data)),
            'labels.csv.gz, line 4: not UTF-8: byte 0xff (invalid start byte)',
        ),
        (
            lambda data: __import__('random').Random(7).randbytes(3000),
            'labels.csv.gz, line 1: not a gzip file, or a damaged one (BadGzipFile',
        ),
    ],
)
def test_a_label_file_with_no_labels_or_no_text_is_named(exported, tmp_path, content, named):
    """Files that pass their checksum (meta.json rewritten along) but hold no labels or no text."""
    folder = tmp_path / 'labels'
    shutil.copytree(exported['dir'], folder)
    path = folder / listener_labels.LABELS
    path.write_bytes(content(gzip.decompress(path.read_bytes())))
    meta = json.loads((folder / listener_labels.META).read_text())
    meta['sha256'] = hashlib.sha256(path.read_bytes()).hexdigest()
    (folder / listener_labels.META).write_text(json.dumps(meta))
    with pytest.raises(listener_labels.LabelFileError) as err:
        listener_labels.load(str(folder))
    assert str(err.value).startswith(str(path)) and named in str(err.value), str(err.value)


def test_the_packaged_labels_cover_every_utterance_of_the_real_ed_files(ed_dir):
    """``--listener-emotions ed32-utterance`` (ETHREED's default) is the ed32_utterance row's
    classifier's top emotion for each utterance of the three ED files, made from their text."""
    folder = listener_labels.load(listener_labels.PACKAGED)
    folder.check_covers(ed_dir)
    assert folder.meta['counts']['utterances'] == len(folder.labels)
    assert set(folder.meta['counts']['by_split']) == {'train', 'valid', 'test'}
    folder.check_covers(ed_source.sample_dir())  # the embedded sample is a part of ED
