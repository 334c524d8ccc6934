"""Tagging ED with a GoEmotions classifier: resumable cache, the real command killed mid-run,
the tagged teacher, and bad input (missing/corrupt cache, label-set mismatch, empty texts).
Real ED (the embedded real sample and the shared data), tiny random classifiers."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from parlai_empathy.data import ed_source, goemotions
from parlai_empathy.data.file_errors import DataFileExit
from parlai_empathy.emotions import inference, tag_cache
from parlai_empathy.emotions.classifier_files import load_classifier
from parlai_empathy.emotions.label_check import LabelSetMismatch, check_goemotions_classifier, check_tagging_classifier
from test_emotions_support import make_tiny_bert, make_tiny_classifier

SAMPLE = ed_source.sample_dir()


@pytest.fixture(scope='module')
def classifier_file(tmp_path_factory, goemotions_dir):
    base = tmp_path_factory.mktemp('clf')
    bert = make_tiny_bert(str(base / 'bert'))
    classes = goemotions.read_taxonomy(goemotions_dir).classes('none')
    return make_tiny_classifier(str(base / 'goemo' / 'model'), bert, classes)


def test_partial_cache_resumes_without_recomputing(classifier_file, tmp_path):
    first = tag_cache.tag_ed(classifier_file, SAMPLE, str(tmp_path / 'a'), chunk_size=300, max_chunks=2, progress=False)
    assert first.tagged == 600 and first.reused == 0
    assert not os.path.exists(os.path.join(first.directory, 'meta.json'))  # partial: not complete
    second = tag_cache.tag_ed(classifier_file, SAMPLE, str(tmp_path / 'a'), chunk_size=300, progress=False)
    assert second.reused == 600 and second.tagged == second.total - 600
    third = tag_cache.tag_ed(classifier_file, SAMPLE, str(tmp_path / 'a'), chunk_size=300, progress=False)
    assert third.tagged == 0 and third.reused == third.total

    table = tag_cache.TagTable(second.directory)
    utterances = tag_cache.ed_utterances(SAMPLE)
    assert len(table.row) == len(utterances) == second.total
    # same numbers as tagging everything in one go, in input order
    probs, labels = inference.predict_all(load_classifier(classifier_file), [u.text for u in utterances])
    rows = [table.lookup(u.split, u.conv_id, u.utterance_idx) for u in utterances]
    np.testing.assert_allclose(table.probs[rows], probs, atol=1e-5)
    assert (table.labels[rows] == labels).all() and labels.dtype == bool
    assert table.meta['counts']['by_split'] == {
        s: sum(u.split == s for u in utterances) for s in ('test', 'train', 'valid')
    }


def test_bf16_tagging_is_recorded_close_and_never_mixed(classifier_file, tmp_path):
    exact = tag_cache.tag_ed(classifier_file, SAMPLE, str(tmp_path / 'fp32'), chunk_size=300, progress=False)
    partial = tag_cache.tag_ed(
        classifier_file, SAMPLE, str(tmp_path / 'bf16'), chunk_size=300, max_chunks=1, progress=False, bf16=True
    )
    with pytest.raises(tag_cache.TagCacheError, match='started in bf16.*--bf16 true'):
        tag_cache.tag_ed(classifier_file, SAMPLE, str(tmp_path / 'bf16'), chunk_size=300, progress=False)
    fast = tag_cache.tag_ed(classifier_file, SAMPLE, str(tmp_path / 'bf16'), chunk_size=300, progress=False, bf16=True)
    assert fast.reused == partial.tagged and fast.reused + fast.tagged == fast.total
    exact_table, fast_table = tag_cache.TagTable(exact.directory), tag_cache.TagTable(fast.directory)
    assert exact_table.meta['classifier']['precision'] == 'fp32'
    assert fast_table.meta['classifier']['precision'] == 'bf16'
    assert not np.array_equal(fast_table.probs, exact_table.probs)
    np.testing.assert_allclose(fast_table.probs, exact_table.probs, atol=0.02)


def test_command_killed_mid_run_resumes(classifier_file, tmp_path):
    args = [
        os.path.join(os.path.dirname(sys.executable), 'parlai'),
        'empathy_tag_ed',
        '-mf',
        classifier_file,
        '--ed-datapath',
        'sample',
        '--tag-cache-dir',
        str(tmp_path),
        '--chunk-size',
        '20',
        '--threads',
        '1',
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    parts = None
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        found = [
            os.path.join(r, f)
            for r, _, fs in os.walk(tmp_path)
            for f in fs
            if f.startswith('part-') and f.endswith('.npz')
        ]
        if len(found) >= 2:
            parts = found
            break
        time.sleep(0.05)
    assert proc.poll() is None, 'the run finished before it could be killed'
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert parts
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    reused = int(done.stdout.split(' already tagged')[0].split(': ')[-1])
    assert reused >= 40 and reused % 20 == 0
    assert 'cache complete' in done.stdout and 'tagging ED' in done.stderr  # tqdm progress bar


def test_empty_utterances_are_tagged_and_counted(classifier_file, tmp_path, monkeypatch):
    classifier = load_classifier(classifier_file)
    probs, _ = inference.predict_all(classifier, ['', '   ', 'so happy for you!'])
    assert probs.shape == (3, 28) and np.isfinite(probs).all()

    real_read = tag_cache.ed_raw.read_clean

    def read_with_an_empty_utterance(path, report=None):
        conversations, rep = real_read(path, report)
        conversations[0].utterances[1].text = ''
        return conversations, rep

    monkeypatch.setattr(tag_cache.ed_raw, 'read_clean', read_with_an_empty_utterance)
    run = tag_cache.tag_ed(classifier_file, SAMPLE, str(tmp_path), progress=False)
    assert run.empty == 3  # one per split
    with open(os.path.join(run.directory, 'meta.json')) as f:
        assert json.load(f)['counts']['empty_utterances'] == 3


def test_missing_and_corrupt_caches_say_what_to_run(classifier_file, tmp_path):
    with pytest.raises(tag_cache.TagCacheError, match='empathy_tag_ed'):
        tag_cache.TagTable(str(tmp_path / 'nothing'))
    run = tag_cache.tag_ed(classifier_file, SAMPLE, str(tmp_path), progress=False)
    with open(os.path.join(run.directory, 'tags.npz'), 'r+b') as f:
        f.truncate(100)
    with pytest.raises(tag_cache.TagCacheError, match='corrupt tag cache .*tags.npz.*empathy_tag_ed'):
        tag_cache.TagTable(run.directory)
    with open(os.path.join(run.directory, 'meta.json'), 'w') as f:
        f.write('{"version": 1, "compl')
    with pytest.raises(tag_cache.TagCacheError, match='corrupt tag cache metadata'):
        tag_cache.TagTable(run.directory)


def test_corrupt_partial_chunk_is_not_reused(classifier_file, tmp_path):
    run = tag_cache.tag_ed(classifier_file, SAMPLE, str(tmp_path), chunk_size=500, max_chunks=1, progress=False)
    part = os.path.join(run.directory, 'parts', 'part-00000.npz')
    with open(part, 'wb') as f:
        f.write(b'PK\x03\x04 half a zip')
    with pytest.raises(tag_cache.TagCacheError, match='corrupt tag cache chunk .*part-00000.npz'):
        tag_cache.tag_ed(classifier_file, SAMPLE, str(tmp_path), chunk_size=500, progress=False)


def test_label_set_mismatch(tmp_path, goemotions_dir, classifier_file):
    from parlai_empathy.data.emotions import ED_EMOTIONS

    with pytest.raises(LabelSetMismatch, match='single-label.*train_model -t empathy_goemotions'):
        check_goemotions_classifier(list(ED_EMOTIONS), False, 'ed.model', goemotions_dir)
    with pytest.raises(LabelSetMismatch, match='not the GoEmotions labels'):
        check_goemotions_classifier(['joy', 'anger'], True, 'x.model', goemotions_dir)
    check_goemotions_classifier(goemotions.read_taxonomy(goemotions_dir).classes('ekman'), True, 'ok', goemotions_dir)
    # tagging accepts either GoEmotions (multi-label) or the 32 ED emotions (single-label)
    check_tagging_classifier(list(ED_EMOTIONS), False, 'ed.model', goemotions_dir)
    with pytest.raises(LabelSetMismatch, match='not the 32 ED emotions'):
        check_tagging_classifier(['joy', 'anger'], False, 'x.model', goemotions_dir)
    with pytest.raises(FileNotFoundError, match='not a trained emotion classifier'):
        load_classifier(str(tmp_path / 'missing.model'))


def test_tagged_teacher_fields_and_prepend(classifier_file, tmp_path):
    from parlai.core.params import ParlaiParser

    from parlai_empathy.tasks.ed_goemotions import EDGoEmotionsTeacher

    def examples(*args):
        parser = ParlaiParser(True, False)
        EDGoEmotionsTeacher.add_cmdline_args(parser)
        opt = parser.parse_args(
            [
                '-dt',
                'valid',
                '--ed-datapath',
                'sample',
                '--datapath',
                str(tmp_path),
                '--goemotions-classifier',
                classifier_file,
            ]
            + list(args)
        )
        teacher = EDGoEmotionsTeacher(opt)
        out = []
        while not teacher.epoch_done():
            out.append(teacher.act())
        return out

    # through the teacher the error ends the command with its message alone, the cache error kept
    with pytest.raises(DataFileExit, match='run parlai empathy_tag_ed') as exited:
        examples()
    assert isinstance(exited.value.error, tag_cache.TagCacheError)
    tag_cache.tag_ed(classifier_file, SAMPLE, os.path.join(str(tmp_path), tag_cache.CACHE_SUBDIR), progress=False)
    plain, prepended = examples(), examples('--goemotions-prepend-k', '2')
    assert len(plain) == len(prepended) > 0
    ex = plain[0]
    assert len(ex['context_goemotions_probs']) == 28 and 'neutral' in ex['context_goemotions_probs']
    assert set(ex['context_goemotions']) <= set(ex['context_goemotions_probs'])
    assert all(0.0 <= p <= 1.0 for p in ex['response_goemotions_probs'].values())
    top2 = sorted(ex['context_goemotions_probs'], key=lambda c: -ex['context_goemotions_probs'][c])[:2]
    assert prepended[0]['text'].split(' ')[:2] == top2 and prepended[0]['text'].endswith(ex['text'])


@pytest.mark.parametrize(
    'name, content, words',
    [
        ('model.opt', b'', 'model.opt: empty file'),
        ('model.opt', b'{"classes": ["joy",\n"sad"\n', 'model.opt, line 3: not valid JSON'),
        ('model.opt', b'{"classes": ["j\xffoy"]}', 'model.opt, line 1: not UTF-8: byte 0xff at column 16'),
        ('model.opt', b'["joy"]', 'model.opt, line 1: not an options file (a JSON list, not an object of options)'),
        ('model.opt', __import__('random').Random(7).randbytes(3000), 'model.opt, line 1: not UTF-8'),
        ('model', b'', 'model: not the weights of a trained emotion classifier'),
        (
            'model',
            __import__('random').Random(7).randbytes(3000),
            'model: not the weights of a trained emotion classifier',
        ),
    ],
)
def test_hostile_classifier_files_name_the_file(classifier_file, tmp_path, name, content, words):
    import shutil

    from parlai_empathy.emotions.classifier_files import ClassifierFilesError

    folder = tmp_path / 'clf'
    shutil.copytree(os.path.dirname(classifier_file), folder)
    (folder / name).write_bytes(content)
    with pytest.raises(ClassifierFilesError) as err:
        load_classifier(str(folder / 'model'))
    assert str(err.value).startswith(str(folder / name)) and words in str(err.value), str(err.value)


def test_tagging_a_split_without_examples_names_the_file(classifier_file, tmp_path):
    folder = tmp_path / 'ed'
    folder.mkdir()
    for split in ed_source.SPLITS:
        with open(os.path.join(SAMPLE, split + '.csv'), 'rb') as f:
            (folder / (split + '.csv')).write_bytes(f.readline() if split == 'test' else f.read())
    with pytest.raises(tag_cache.ed_raw.DataFileError, match=r'test.csv: no examples \(header only\)'):
        tag_cache.tag_ed(classifier_file, str(folder), str(tmp_path / 'cache'), progress=False)
    assert not (tmp_path / 'cache').exists()


def test_tag_ed_on_a_folder_without_examples_ends_with_the_file_error_alone(classifier_file, tmp_path):
    ed = tmp_path / 'ed'
    ed.mkdir()
    for split in ('train', 'valid', 'test'):
        (ed / f'{split}.csv').write_text('conv_id,utterance_idx,context,prompt,speaker_idx,utterance,selfeval,tags\n')
    done = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), 'parlai'),
            'empathy_tag_ed',
            '-mf',
            classifier_file,
            '--ed-datapath',
            str(ed),
            '--tag-cache-dir',
            str(tmp_path / 'cache'),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert 'Traceback' not in done.stderr and 'no examples (header only)' in done.stderr, done.stderr[-3000:]
    assert str(ed) in done.stderr.strip().splitlines()[-1]
