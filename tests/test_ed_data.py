"""EmpatheticDialogues readers and teachers on the real shared data and on hand-written quirks."""

import http.server
import io
import json
import os
import tarfile
import threading

import pytest

from conftest import ed_teacher_examples
from parlai_empathy.data import ed_episodes, ed_raw, ed_source
from parlai_empathy.data.file_errors import DataFileExit
from parlai_empathy.tasks.ed import CleanTeacher, FaithfulTeacher

FIXTURES = os.path.join(os.path.dirname(__file__), 'fixtures')
QUIRKS = os.path.join(FIXTURES, 'ed_quirks.csv')

# ParlAI's published counts: train (both sides) / valid / test (Listener-responding side).
PARLAI_COUNTS = {'train': 64636, 'valid': 5738, 'test': 5259}


@pytest.fixture(scope='module')
def parlai_datapath(tmp_path_factory, ed_dir):
    """A ParlAI datapath where ParlAI's own empathetic_dialogues teacher finds the shared files."""
    from parlai.core.build_data import mark_done

    root = tmp_path_factory.mktemp('parlai_data')
    folder = root / 'empatheticdialogues' / 'empatheticdialogues'
    folder.mkdir(parents=True)
    for split in ed_source.SPLITS:
        os.symlink(os.path.join(ed_dir, split + '.csv'), folder / (split + '.csv'))
    mark_done(str(root / 'empatheticdialogues'), version_string=ed_source.OFFICIAL_VERSION)
    return root


def _key(message):
    labels = message.get('labels', message.get('eval_labels'))
    return (message['text'], tuple(labels), message['emotion'], message['situation'], message['episode_done'])


@pytest.mark.parametrize('split', ['valid', 'test', 'train'])
def test_faithful_teacher_equals_parlai_teacher(split, parlai_datapath, ed_dir):
    from parlai.tasks.empathetic_dialogues.agents import EmpatheticDialoguesTeacher

    theirs = ed_teacher_examples(EmpatheticDialoguesTeacher, split, parlai_datapath)
    ours = ed_teacher_examples(FaithfulTeacher, split, parlai_datapath, '--ed-datapath', ed_dir)
    assert len(ours) == len(theirs) == PARLAI_COUNTS[split]
    assert [_key(m) for m in ours] == [_key(m) for m in theirs]


def test_faithful_teacher_also_reads_the_official_build_location(parlai_datapath, monkeypatch):
    monkeypatch.delenv(ed_source.ED_DIR_ENV, raising=False)
    examples = ed_teacher_examples(FaithfulTeacher, 'test', parlai_datapath)
    assert len(examples) == PARLAI_COUNTS['test']


def test_message_fields(parlai_datapath, ed_dir):
    first, second = ed_teacher_examples(CleanTeacher, 'valid', parlai_datapath, '--ed-datapath', ed_dir)[:2]
    assert first['conv_id'] == 'hit:3_conv:6' and first['turn'] == 2
    assert first['emotion'] == 'terrified'
    assert first['situation'].startswith('Today,as i was leaving for work')
    assert first['eval_labels'] == ['Are you fine now?']
    assert first['label_role'] == 'listener' and first['episode_done'] is False
    assert second['text'] == "Yeah,i'm doing alright now, but with minor injuries."
    assert second['context_roles'] == ['speaker', 'listener', 'speaker']
    assert second['context_utterances'][1] == 'Are you fine now?'


def test_train_experiencer_only_and_clean_counts(parlai_datapath, ed_dir):
    listener_only = ed_teacher_examples(
        CleanTeacher, 'train', parlai_datapath, '--ed-datapath', ed_dir, '--train-experiencer-only', 'true'
    )
    assert len(listener_only) == 40254
    assert {m['label_role'] for m in listener_only} == {'listener'}
    for split in ('valid', 'test'):
        examples = ed_teacher_examples(CleanTeacher, split, parlai_datapath, '--ed-datapath', ed_dir)
        assert len(examples) == PARLAI_COUNTS[split]


def test_history_length_gives_the_ed_papers_context(parlai_datapath, ed_dir):
    examples = ed_teacher_examples(
        CleanTeacher, 'valid', parlai_datapath, '--ed-datapath', ed_dir, '--ed-history-length', '4'
    )
    assert len(examples) == PARLAI_COUNTS['valid']
    assert all(m['episode_done'] for m in examples)
    long_one = next(m for m in examples if len(m['context_utterances']) > 4)
    assert long_one['text'].split('\n') == long_one['context_utterances'][-4:]


def test_rashkin_p_at_1_100_blocks(parlai_datapath, ed_dir):
    plain = ed_teacher_examples(CleanTeacher, 'test', parlai_datapath, '--ed-datapath', ed_dir)
    blocked = ed_teacher_examples(
        CleanTeacher, 'test', parlai_datapath, '--ed-datapath', ed_dir, '--ed-candidates', 'rashkin100'
    )
    assert len(blocked) == 5200  # 5,259 examples, the last partial block of 59 dropped
    assert [m['eval_labels'] for m in blocked] == [m['eval_labels'] for m in plain[:5200]]
    for start in (0, 100, 5100):
        block_labels = [m['eval_labels'][0] for m in blocked[start : start + 100]]
        for message in blocked[start : start + 100]:
            assert message['label_candidates'] == block_labels
    assert blocked[-1]['episode_done'] is True


def test_shuffled_p_at_1_100_blocks_mix_conversations_and_are_seeded(parlai_datapath, ed_dir):
    args = ('--ed-datapath', ed_dir, '--ed-candidates', 'rashkin100_shuffled', '--ed-candidates-seed', '1')
    shuffled = ed_teacher_examples(CleanTeacher, 'test', parlai_datapath, *args)
    again = ed_teacher_examples(CleanTeacher, 'test', parlai_datapath, *args)
    other_seed = ed_teacher_examples(CleanTeacher, 'test', parlai_datapath, *args[:-1], '2')
    plain = ed_teacher_examples(CleanTeacher, 'test', parlai_datapath, '--ed-datapath', ed_dir)
    assert len(shuffled) == 5200 and all(m['episode_done'] for m in shuffled)
    assert [m['eval_labels'] for m in shuffled] == [m['eval_labels'] for m in again]
    assert [m['eval_labels'] for m in shuffled] != [m['eval_labels'] for m in other_seed]
    # 5,200 distinct examples of the 5,259, each with its own context
    keys = {(m['conv_id'], m['turn']) for m in shuffled}
    assert len(keys) == 5200 and keys <= {(m['conv_id'], m['turn']) for m in plain}
    by_key = {(m['conv_id'], m['turn']): m for m in plain}
    for message in shuffled[:50]:
        assert message['context_utterances'] == by_key[(message['conv_id'], message['turn'])]['context_utterances']
        # what ParlAI's history would hold at this turn of the unshuffled episode
        assert message['text'] == '\n'.join(message['context_utterances'])
    assert any(len(m['context_utterances']) > 1 for m in shuffled[:50])
    for start in (0, 5100):
        block = shuffled[start : start + 100]
        labels = [m['eval_labels'][0] for m in block]
        assert all(m['label_candidates'] == labels for m in block)
        # a consecutive block spans ~50 conversations (two Listener turns each); a shuffled one ~100
        assert len({m['conv_id'] for m in block}) > 90


def test_random_candidates_are_seeded_and_hold_the_gold(parlai_datapath, ed_dir):
    args = ('--ed-datapath', ed_dir, '--ed-candidates', 'random100', '--ed-candidates-seed', '3')
    a = ed_teacher_examples(CleanTeacher, 'valid', parlai_datapath, *args)
    b = ed_teacher_examples(CleanTeacher, 'valid', parlai_datapath, *args)
    assert len(a) == PARLAI_COUNTS['valid']
    assert [m['label_candidates'] for m in a[:50]] == [m['label_candidates'] for m in b[:50]]
    for message in a[:200]:
        assert len(message['label_candidates']) == 100
        assert message['eval_labels'][0] in message['label_candidates']


def test_shared_data_needs_no_recovery_but_whitespace_and_quotes(ed_dir):
    """The shared files have 8 fields everywhere; cleaning finds only text-level fixes."""
    for split, rows in (('train', 84169), ('valid', 12078), ('test', 10973)):
        conversations, report = ed_raw.read_clean(os.path.join(ed_dir, split + '.csv'))
        assert report.rows_read == report.rows_kept == rows
        assert report.unrecoverable == []
        assert set(report.fixes) <= {
            'stray_quote',
            'csv_quoting',
            'edge_whitespace',
            'double_space',
            'short_conversation',
        }
        for conv in conversations:
            for utt in conv.utterances:
                assert utt.text == utt.text.strip() and '  ' not in utt.text and '_comma_' not in utt.text


# ----------------------------------------------------------------------------------------------
# Hand-written quirks (tests/fixtures/ed_quirks.csv). Lines:
#  3 prompt repeated + shift               4 raw comma in utterance   5 stray quote, double space
#  6 exact duplicate of 5                  7 utterance_idx gap        8 empty utterance
#  9 _comma_/_pipe_, free-text selfeval   11 9th-field candidates    12 repeated utterance_idx
# 13 CSV-quoted field                     14 row ended early         15 blank line
# 16 bad conv_id (unrecoverable)          17 no anchor (unrecoverable)  18 one-utterance conversation
# 19 invalid UTF-8 byte
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope='module')
def cleaned_quirks():
    return ed_raw.read_clean(QUIRKS)


def test_every_quirk_is_recovered_and_reported(cleaned_quirks):
    conversations, report = cleaned_quirks
    expected = {
        'prompt_repeated_shift': [3],
        'unescaped_comma': [4],
        'stray_quote': [5, 6],
        'duplicate_row': [6],
        'index_gap': [7, 9],
        'empty_utterance': [8],
        'inline_candidates': [11],
        'repeated_index': [12],
        'csv_quoting': [13],
        'missing_trailing_fields': [14],
        'blank_line': [15],
        'short_conversation': [18],
        'invalid_utf8': [19],
        'double_space': [5, 6],
        'edge_whitespace': [8],
        'candidates_missing_gold': [11],
    }
    assert {kind: entry['example_lines'] for kind, entry in report.fixes.items()} == expected
    assert [(bad['line'], bad['reason'].split(':')[0]) for bad in report.unrecoverable] == [
        (16, 'field conv_id'),
        (17, 'field utterance'),
    ]
    # nothing is lost silently: every data line is kept, or accounted for by a fix or a rejection
    dropped = report.count('duplicate_row') + report.count('empty_utterance') + report.count('blank_line')
    assert report.rows_read == report.rows_kept + dropped + len(report.unrecoverable)

    first = conversations[0]
    assert [u.text for u in first.utterances] == [
        'I used to be scared of the dark, it felt like hitting a blank wall',
        "Oh ya? I don't really see how",
        'dont you feel so, its a wonder',
        'I do actually hit blank walls a lot',
        'I virtually thought so.. and i used to get sweatings',
        'Wait, what are sweatings | lol',
    ]
    assert [u.utterance_idx for u in first.utterances] == [1, 2, 3, 4, 5, 6]
    assert first.utterances[5].selfeval == "1|5|5_I have clicked the 'End Chat' button thank you!|4|5"
    second = conversations[1]
    assert second.utterances[1].candidates == [
        'Save it for Spider-Man, next month!',
        'I never took chemistry| physics.',
        'Are you going to do something outside?',
        "I love it when it's nice out. Are you going to do something outside?",  # the gold, appended
    ]
    assert [u.text for u in second.utterances[2:]] == [
        'Yes, a picnic!',
        'That sounds lovely.',
        'We will bring sandwiches',
    ]
    assert conversations[3].utterances[0].text == 'Congrats! caf\ufffd time!'


def test_report_is_written_as_json_and_text(cleaned_quirks, tmp_path):
    _, report = cleaned_quirks
    path = ed_raw.write_report(report, str(tmp_path), 'train')
    saved = json.load(open(path))
    assert saved['fixes']['prompt_repeated_shift']['count'] == 1
    assert saved['unrecoverable'][0]['line'] == 16
    text = open(str(tmp_path / 'train.cleaning_report.txt')).read()
    assert 'UNRECOVERABLE line 17' in text and 'prompt_repeated_shift' in text


def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text('\n'.join([','.join(ed_raw.HEADER)] + lines) + '\n')
    return str(path)


def test_faithful_reader_names_file_line_and_field(tmp_path):
    with pytest.raises(ed_raw.EDFormatError) as err:
        ed_raw.read_faithful(QUIRKS)
    # lines 3-5 have 9 fields, which ParlAI's reading takes for inline candidates (and so mangles);
    # the first line it cannot read at all is the repeated utterance_idx of line 6
    assert (err.value.line_no, err.value.field_name) == (6, 'utterance_idx') and 'ed_quirks.csv' in str(err.value)
    too_many = _write(tmp_path, 'wide.csv', ['hit:1_conv:2,1,sad,p,1,a,b,c,d,e'])
    with pytest.raises(ed_raw.EDFormatError, match=r"wide.csv, line 2, field 'line': has 10 comma-separated fields"):
        ed_raw.read_faithful(too_many)
    gap = _write(tmp_path, 'gap.csv', ['hit:1_conv:2,1,sad,p,1,a,,', 'hit:1_conv:2,3,sad,p,2,b,,'])
    with pytest.raises(ed_raw.EDFormatError, match=r"gap.csv, line 3, field 'utterance_idx'"):
        ed_raw.read_faithful(gap)
    bad_idx = _write(tmp_path, 'bad.csv', ['hit:1_conv:2,one,sad,p,1,a,,'])
    with pytest.raises(ed_raw.EDFormatError, match=r"line 2, field 'utterance_idx': not an integer"):
        ed_raw.read_faithful(bad_idx)


def test_the_faithful_teacher_shows_the_error_not_an_assert(tmp_path):
    folder = tmp_path / 'ed'
    folder.mkdir()
    for split in ed_source.SPLITS:
        (folder / (split + '.csv')).write_bytes(open(QUIRKS, 'rb').read())
    # through a teacher the error ends the command with its message alone, the reader's error kept
    with pytest.raises(DataFileExit, match='line 6') as exited:
        ed_teacher_examples(FaithfulTeacher, 'valid', tmp_path, '--ed-datapath', folder)
    assert isinstance(exited.value.error, ed_raw.EDFormatError) and exited.value.error.line_no == 6
    # candidates without the gold: ParlAI's teacher dies on a bare RuntimeError; ours names the line
    lacking = _write(
        tmp_path,
        'cands.csv',
        [
            'hit:1_conv:2,1,sad,p,1,My dog died,5|5|5_5|5|5,',
            'hit:1_conv:2,2,sad,p,2,So sorry,5|5|5_5|5|5,,Nice!|Great news',
        ],
    )
    for split in ed_source.SPLITS:
        (folder / (split + '.csv')).write_bytes(open(lacking, 'rb').read())
    with pytest.raises(DataFileExit, match=r"line 3, field 'candidates'"):
        ed_teacher_examples(FaithfulTeacher, 'valid', tmp_path, '--ed-datapath', folder)
    assert ed_teacher_examples(FaithfulTeacher, 'valid', tmp_path, '--ed-datapath', folder, '--ed-candidates', 'none')
    for split in ed_source.SPLITS:
        (folder / (split + '.csv')).write_bytes(open(QUIRKS, 'rb').read())
    examples = ed_teacher_examples(CleanTeacher, 'valid', tmp_path, '--ed-datapath', folder)
    assert [m['eval_labels'][0] for m in examples] == [
        "Oh ya? I don't really see how",
        'I do actually hit blank walls a lot',
        'Wait, what are sweatings | lol',
        "I love it when it's nice out. Are you going to do something outside?",
        'That sounds lovely.',
        'Thank you so much!',
    ]
    reports = list((tmp_path / 'empathy_ed_clean').glob('*/valid.cleaning_report.json'))
    assert len(reports) == 1


# ----------------------------------------------------------------------------------------------
# Real raw excerpts
# ----------------------------------------------------------------------------------------------


def test_raw_train_rows(raw_excerpts_dir):
    path = os.path.join(raw_excerpts_dir, 'train_raw_rows.csv')
    faithful = ed_raw.read_faithful(path)
    conversations, report = ed_raw.read_clean(path)
    assert [c.conv_id for c in conversations] == [c.conv_id for c in faithful]
    assert report.unrecoverable == [] and report.rows_kept == 21
    darkness = next(c for c in conversations if c.conv_id == 'hit:1_conv:2')
    assert darkness.situation == 'i used to scare for darkness'
    assert darkness.utterances[0].text == 'it feels like hitting to blank wall when i see the darkness'
    assert darkness.utterances[0].selfeval == '4|3|4_3|5|5' and darkness.utterances[0].speaker_idx == '2'
    assert report.count('edge_whitespace') >= 3 and report.count('double_space') >= 2
    # ParlAI's reading keeps the context's leading space: the faithful reader must too
    raw_darkness = next(c for c in faithful if c.conv_id == 'hit:1_conv:2')
    assert raw_darkness.utterances[0].text.startswith(' it feels')


def test_raw_ninth_field_candidates(raw_excerpts_dir, ed_dir, tmp_path):
    """Re-attach the real 9th fields to their valid/test rows and read them both ways."""
    wanted = {}
    with open(os.path.join(raw_excerpts_dir, 'valid_test_ninth_field.tsv'), encoding='utf-8') as f:
        next(f)
        for line in f:
            split, conv_id, idx, truncated, ninth = line.rstrip('\n').split('\t')
            wanted[(split, conv_id, idx)] = ninth
    for split in ('valid', 'test'):
        rows = open(os.path.join(ed_dir, split + '.csv'), encoding='utf-8').read().splitlines()
        out, attached = [rows[0]], 0
        for row in rows[1:]:
            parts = row.split(',')
            ninth = wanted.get((split, parts[0], parts[1]))
            if ninth is not None:
                row, attached = row + ',' + ninth, attached + 1
            out.append(row)
        path = tmp_path / f'{split}.csv'
        path.write_text('\n'.join(out) + '\n', encoding='utf-8')
        faithful = {(c.conv_id, u.utterance_idx): u for c in ed_raw.read_faithful(str(path)) for u in c.utterances}
        clean, report = ed_raw.read_clean(str(path))
        assert report.count('inline_candidates') == attached > 0
        for conv in clean:
            for utt in conv.utterances:
                key = (split, conv.conv_id, str(utt.utterance_idx))
                if key in wanted:
                    expected = [ed_raw.unescape_candidate(c).strip() for c in wanted[key].split('|')]
                    assert faithful[(conv.conv_id, utt.utterance_idx)].candidates == expected
                    assert len(utt.candidates) == len(expected)
                    assert all('_comma_' not in c and '_pipe_' not in c for c in utt.candidates)


# ----------------------------------------------------------------------------------------------
# Where the data comes from
# ----------------------------------------------------------------------------------------------


def test_missing_data_error_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.delenv(ed_source.ED_DIR_ENV, raising=False)
    with pytest.raises(ed_source.EDDataNotFound, match='lacks train.csv, valid.csv, test.csv'):
        ed_source.resolve_ed_dir(str(tmp_path))
    monkeypatch.setenv(ed_source.ED_DIR_ENV, str(tmp_path))
    with pytest.raises(ed_source.EDDataNotFound, match=r'\$PARLAI_EMPATHY_ED_DIR'):
        ed_source.resolve_ed_dir(None, str(tmp_path))
    assert ed_source.resolve_ed_dir('sample') == ed_source.sample_dir()
    monkeypatch.delenv(ed_source.ED_DIR_ENV)
    # no data and no network: the download to a closed local port fails with instructions
    with pytest.raises(ed_source.EDDataNotFound, match='--ed-datapath DIR or set PARLAI_EMPATHY_ED_DIR'):
        ed_source.build_official(str(tmp_path / 'dp'), url='http://127.0.0.1:9/empatheticdialogues.tar.gz')


@pytest.fixture
def tarball_server(tmp_path, ed_dir):
    """Serve a real empatheticdialogues.tar.gz (the sample files) on 127.0.0.1."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode='w:gz') as tar:
        folder = tarfile.TarInfo('empatheticdialogues')
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(folder)
        for split in ed_source.SPLITS:
            tar.add(os.path.join(ed_source.sample_dir(), split + '.csv'), arcname=f'empatheticdialogues/{split}.csv')
    payload = buffer.getvalue()
    (tmp_path / 'served').mkdir()
    (tmp_path / 'served' / 'empatheticdialogues.tar.gz').write_bytes(payload)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(tmp_path / 'served'), **kw)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    import hashlib

    yield f'http://127.0.0.1:{server.server_port}/empatheticdialogues.tar.gz', hashlib.sha256(payload).hexdigest()
    server.shutdown()


def test_official_build_downloads_verifies_and_marks_built(tarball_server, tmp_path):
    url, sha = tarball_server
    datapath = str(tmp_path / 'dp')
    folder = ed_source.build_official(datapath, url=url, sha256=sha)
    assert folder == ed_source.official_dir(datapath)
    assert sorted(os.listdir(folder)) == ['test.csv', 'train.csv', 'valid.csv']
    from parlai.core.build_data import built

    assert built(os.path.join(datapath, 'empatheticdialogues'), version_string='1.0')
    # a second build does not download again (the server is no longer needed)
    assert ed_source.build_official(datapath, url='http://127.0.0.1:9/x', sha256=sha) == folder


def test_official_build_rejects_a_corrupt_download(tarball_server, tmp_path):
    url, _ = tarball_server
    with pytest.raises(ed_source.EDDataNotFound, match='corrupt'):
        ed_source.build_official(str(tmp_path / 'dp'), url=url, sha256='0' * 64)
    assert not os.path.exists(tmp_path / 'dp' / 'empatheticdialogues')


def test_episode_builder_sides():
    conv = ed_raw.Conversation(
        'hit:0_conv:1',
        'proud',
        's',
        [ed_raw.Utterance(t, i, i + 1) for i, t in enumerate(['a', 'b', 'c', 'd', 'e'], start=1)],
    )
    listener_only = ed_episodes.build_episodes([conv], both_sides=False)
    assert [[(x.text, x.label) for x in ep] for ep in listener_only] == [[('a', 'b'), ('c', 'd')]]
    both = ed_episodes.build_episodes([conv], both_sides=True)
    assert [[(x.text, x.label) for x in ep] for ep in both][1] == [('b', 'c'), ('d', 'e')]


def test_streaming_caches_lengths_in_the_datapath_not_beside_the_source(tmp_path):
    folder = tmp_path / 'readonly'
    folder.mkdir()
    for split in ed_source.SPLITS:
        (folder / (split + '.csv')).write_bytes(open(os.path.join(ed_source.sample_dir(), split + '.csv'), 'rb').read())
    folder.chmod(0o555)
    try:
        from parlai.core.params import ParlaiParser

        parser = ParlaiParser(True, False)
        CleanTeacher.add_cmdline_args(parser)
        opt = parser.parse_args(
            ['-dt', 'train:stream', '--datapath', str(tmp_path / 'dp'), '--ed-datapath', str(folder)]
        )
        teacher = CleanTeacher(opt)
        count = teacher.num_examples()
        assert count == len(ed_teacher_examples(CleanTeacher, 'train', tmp_path / 'dp2', '--ed-datapath', folder))
        assert list((tmp_path / 'dp' / 'empathy_ed_clean').glob('*/train-*.lengths'))
        assert sorted(os.listdir(folder)) == ['test.csv', 'train.csv', 'valid.csv']
    finally:
        folder.chmod(0o755)


def test_candidate_modes_on_a_tiny_split():
    conv = ed_raw.Conversation(
        'hit:0_conv:1',
        'proud',
        's',
        [ed_raw.Utterance(t, i, i + 1) for i, t in enumerate(['a', 'same', 'c', 'same', 'e', 'f'], start=1)],
    )
    episodes = ed_episodes.build_episodes([conv], both_sides=True)
    with pytest.raises(ValueError, match='at least 100 examples, this split has 5'):
        ed_episodes.attach_rashkin_candidates(episodes)
    for example in ed_episodes._flat(ed_episodes.attach_random_candidates(episodes, seed=1)):
        # the gold and every other distinct response, once each, even though 'same' repeats
        assert sorted(example.label_candidates) == sorted({'same', 'c', 'e', 'f'} | {example.label})


# ----------------------------------------------------------------------------------------------
# Hostile files: every way a file can fail names the file and the line; none yields 0 examples
# ----------------------------------------------------------------------------------------------

HEADER_LINE = (','.join(ed_raw.HEADER) + '\n').encode()
ROW_1 = b'hit:1_conv:2,1,sad,My dog died,1,I lost my dog,5|5|5_5|5|5,\n'
ROW_2 = b'hit:1_conv:2,2,sad,My dog died,2,So sorry to hear that,5|5|5_5|5|5,\n'
GOOD = HEADER_LINE + ROW_1 + ROW_2
# random bytes, the same in every run: what a corrupt download or a wrong file looks like
GARBAGE = __import__('random').Random(7).randbytes(3000)
OVERSIZED = HEADER_LINE + b'hit:1_conv:2,1,sad,p,1,' + b'x' * (1 << 20) + b',,\n'

# case -> (content, the faithful reader's error: (line, field, words), the clean reader's error)
HOSTILE_ED = {
    'empty': (b'', (None, None, 'no examples (empty file)'), 'no examples (empty file)'),
    'header only': (HEADER_LINE, (None, None, 'no examples (header only)'), 'no examples (header only)'),
    'header and blank lines': (
        HEADER_LINE + b'\n\n',
        (2, 'line', 'has 1 comma-separated fields'),
        'no examples (header only)',
    ),
    'binary garbage': (GARBAGE, (1, 'conv_id', 'not UTF-8: byte 0x'), "line 1, field 'conv_id': NUL byte at column "),
    'not UTF-8 at line 3': (
        HEADER_LINE + ROW_1 + ROW_2.replace(b'So sorry', b'So \xff sorry'),
        (3, 'utterance', 'not UTF-8: byte 0xff at column 37'),
        None,
    ),
    'wrong header': (
        b'text\tids\tid\nhello\t1\tab\n',
        (1, 'conv_id', 'is not the EmpatheticDialogues header'),
        'no examples (none of its 2 rows can be read; the first, line 1, field conv_id',
    ),
    'wrong field count': (
        HEADER_LINE + ROW_1 + b'hit:1_conv:2,2,sad,p\n',
        (3, 'line', 'has 4 comma-separated fields'),
        None,
    ),
    'every row unreadable': (
        HEADER_LINE + b'nonsense,1,2\nmore,3,4\n',
        (2, 'line', 'has 3 comma-separated fields'),
        'no examples (none of its 2 rows can be read; the first, line 2, field conv_id',
    ),
    'oversized line': (
        OVERSIZED,
        (2, None, 'no line break within the cap of 1,048,576'),
        'line 2: no line break within the cap of 1,048,576',
    ),
    'NUL bytes': (
        HEADER_LINE + ROW_1.replace(b'lost', b'lo\0st') + ROW_2,
        (2, 'utterance', 'NUL byte at column 38'),
        "line 2, field 'utterance': NUL byte at column 38",
    ),
    'UTF-16': (GOOD.decode().encode('utf-16'), (1, None, 'UTF-16 text'), 'line 1: UTF-16 text'),
    'CRLF line ends': (GOOD.replace(b'\n', b'\r\n'), None, None),
    'UTF-8 byte order mark': (b'\xef\xbb\xbf' + GOOD, None, None),
}


@pytest.mark.parametrize('case', list(HOSTILE_ED))
def test_hostile_ed_files_name_file_and_line(tmp_path, case):
    content, faithful_error, clean_error = HOSTILE_ED[case]
    path = tmp_path / 'valid.csv'
    path.write_bytes(content)
    good = tmp_path / 'good.csv'
    good.write_bytes(GOOD)
    if faithful_error is None:
        assert _texts(ed_raw.read_faithful(str(path))) == _texts(ed_raw.read_faithful(str(good)))
    else:
        line_no, field, words = faithful_error
        with pytest.raises(ed_raw.DataFileError) as err:
            ed_raw.read_faithful(str(path))
        assert (err.value.line_no, err.value.field) == (line_no, field), str(err.value)
        assert str(err.value).startswith(str(path)) and words in str(err.value)
    if clean_error is None:
        conversations, report = ed_raw.read_clean(str(path))
        assert conversations and report.rows_kept >= 1
        if case == 'not UTF-8 at line 3':
            assert report.fixes['invalid_utf8']['example_lines'] == [3]
        elif case == 'wrong field count':
            assert [bad['line'] for bad in report.unrecoverable] == [3]
        else:
            assert _texts(conversations) == _texts(ed_raw.read_clean(str(good))[0])
            assert not report.fixes and not report.unrecoverable
    else:
        with pytest.raises(ed_raw.DataFileError) as err:
            ed_raw.read_clean(str(path))
        assert str(err.value).startswith(f'{path}, ' if clean_error.startswith('line ') else f'{path}: ')
        assert clean_error in str(err.value), str(err.value)


# Broken CSV quoting, which no ED release has: case -> (content, the clean reader's (line, field, words))
QUOTING = {
    # a CSV writer's quoted field holding a comma and a line break: the row ends early at the break
    'quoted field over two lines': (
        HEADER_LINE + ROW_1 + b'hit:1_conv:2,2,sad,My dog died,2,"So sorry, truly\nsorry",5|5|5_5|5|5,\n',
        (3, 'utterance', 'unbalanced double quote in a row of 7 comma-separated fields (the row ends early)'),
    ),
    'quote opening before raw commas': (
        HEADER_LINE + ROW_1 + b'hit:1_conv:2,2,sad,My dog died,2,"So sorry, so sorry,5|5|5_5|5|5,\n',
        (3, 'utterance', 'in a row of 9 comma-separated fields (raw commas after the quote)'),
    ),
    'quote in the emotion field': (
        HEADER_LINE + ROW_1 + b'hit:1_conv:2,2,"sad",My dog died,2,So sorry,5|5|5_5|5|5,\n',
        (3, 'context', 'holds a double quote (\'"sad"\')'),
    ),
    'tail of a quoted field': (
        HEADER_LINE + ROW_1 + b'the end",2,sad,x,2,y,5|5|5_5|5|5,\n',
        (3, 'conv_id', 'holds a double quote'),
    ),
}


@pytest.mark.parametrize('case', list(QUOTING))
def test_broken_csv_quoting_is_refused_naming_file_line_and_field(tmp_path, case):
    content, (line_no, field, words) = QUOTING[case]
    path = tmp_path / 'valid.csv'
    path.write_bytes(content)
    with pytest.raises(ed_raw.EDFormatError) as err:
        ed_raw.read_clean(str(path))
    assert (err.value.line_no, err.value.field) == (line_no, field), str(err.value)
    assert str(err.value).startswith(f'{path}, line {line_no}, field {field!r}: ') and words in str(err.value)
    assert '\n' not in str(err.value)


def test_the_release_pattern_of_a_stray_quote_stays_text_as_eds_own_reader_keeps_it(tmp_path):
    """The release's quotes sit in the prompt or utterance of a row whose 8 fields line up (86 rows
    of the shared train.csv have one unbalanced at a field's edge): read as before, never refused."""
    path = tmp_path / 'valid.csv'
    path.write_bytes(HEADER_LINE + ROW_1 + ROW_2.replace(b',So sorry', b',"So sorry').replace(b'died', b'di"ed'))
    faithful = ed_raw.read_faithful(str(path))
    assert faithful[0].utterances[1].text == '"So sorry to hear that' and faithful[0].situation == 'My dog died'
    conversations, report = ed_raw.read_clean(str(path))
    assert conversations[0].utterances[1].text == 'So sorry to hear that'
    assert report.fixes['stray_quote']['example_lines'] == [3]
    # a quote in a field that is never text is refused by the faithful reader too
    path.write_bytes(QUOTING['quote in the emotion field'][0])
    with pytest.raises(ed_raw.EDFormatError, match=r"line 3, field 'context': holds a double quote"):
        ed_raw.read_faithful(str(path))


def _texts(conversations):
    return [(c.conv_id, c.emotion, c.situation, [u.text for u in c.utterances]) for c in conversations]


def test_a_file_of_one_utterance_conversations_yields_no_examples(tmp_path):
    folder = tmp_path / 'ed'
    folder.mkdir()
    for split in ed_source.SPLITS:
        (folder / (split + '.csv')).write_bytes(HEADER_LINE + ROW_1)
    with pytest.raises(DataFileExit, match=r'valid.csv: no examples \(1 conversations, none with a reply'):
        ed_teacher_examples(CleanTeacher, 'valid', tmp_path, '--ed-datapath', folder)


def _ed_folder(tmp_path, name, valid=None, **others):
    """An ED folder whose valid.csv holds ``valid`` (train and test a good file), or lacks a split."""
    folder = tmp_path / name
    folder.mkdir()
    for split in ed_source.SPLITS:
        content = valid if split == 'valid' else others.get(split, GOOD)
        if content is not None:
            (folder / (split + '.csv')).write_bytes(content)
    return folder


@pytest.mark.parametrize(
    'task, case, expected',
    [
        ('empathy_ed', 'empty', '{valid}: no examples (empty file)'),
        ('empathy_ed_clean', 'header only', '{valid}: no examples (header only)'),
        (
            'empathy_ed_clean',
            'binary garbage',
            "{valid}, line 1, field 'conv_id': NUL byte at column 69: not text (a "
            'binary file, or UTF-16 without a byte order mark?)',
        ),
        (
            'empathy_ed_clean',
            'NUL bytes',
            "{valid}, line 2, field 'utterance': NUL byte at column 38: not text (a binary "
            'file, or UTF-16 without a byte order mark?)',
        ),
        (
            'empathy_ed',
            'not UTF-8 at line 3',
            "{valid}, line 3, field 'utterance': not UTF-8: byte 0xff at column 37 "
            '(invalid start byte); the file must be UTF-8 text',
        ),
        (
            'empathy_ed_clean',
            'quoted field over two lines',
            "{valid}, line 3, field 'utterance': unbalanced double quote in a row of 7 comma-separated fields (the row "
            'ends early): CSV quoting of a field that holds commas or a line break, which EmpatheticDialogues files do '
            'not use (commas are written _comma_); rewrite the row without CSV quoting',
        ),
        (
            'empathy_ed',
            'missing split',
            "--ed-datapath points at '{folder}', which lacks valid.csv. It must be a folder "
            "holding EmpatheticDialogues' train.csv, valid.csv and test.csv (as unpacked from "
            'empatheticdialogues.tar.gz).',
        ),
    ],
)
def test_parlai_display_data_ends_with_the_file_error_alone(run_parlai, tmp_path, task, case, expected):
    """What a user types and sees: the one message naming the file, no traceback, exit status 1."""
    content = None if case == 'missing split' else (HOSTILE_ED.get(case) or QUOTING[case])[0]
    folder = _ed_folder(tmp_path, 'ed', content)
    if case == 'binary garbage':
        assert GARBAGE.count(b'\n') == 15  # 16 lines, as the message says
    done = run_parlai(
        'display_data',
        '-t',
        task,
        '-dt',
        'valid',
        '--ed-datapath',
        folder,
        '--datapath',
        tmp_path / 'dp',
        check=False,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert 'Traceback' not in done.stdout + done.stderr
    assert done.stderr.strip() == expected.format(valid=folder / 'valid.csv', folder=folder)


@pytest.mark.parametrize(
    'content, words',
    [
        (b'', 'no examples (no candidates: empty file)'),
        (b'\n  \n', 'no examples (no candidates: only blank lines)'),
        (b'fine\nso \xff sorry\n', 'line 2: not UTF-8: byte 0xff at column 4'),
        (b'fine\nNUL\0 here\n', 'line 2: NUL byte at column 4'),
        (GARBAGE, 'line 1: not UTF-8: byte 0xb4 at column 2'),
        ('one\ntwo\n'.encode('utf-16'), 'line 1: UTF-16 text'),
    ],
)
def test_hostile_candidate_files_name_file_and_line(tmp_path, content, words):
    from parlai_empathy.data import response_pool

    path = tmp_path / 'pool.cands'
    path.write_bytes(content)
    with pytest.raises(ed_raw.DataFileError) as err:
        response_pool.read_candidates(str(path))
    assert str(err.value).startswith(str(path)) and words in str(err.value), str(err.value)
    path.write_bytes(b'\xef\xbb\xbfone\r\n\r\ntwo \r\n')
    assert response_pool.read_candidates(str(path)) == ['one', 'two']


def test_build_candidates_ends_with_the_file_error_alone(run_parlai, tmp_path):
    folder = _ed_folder(tmp_path, 'ed', GOOD, train=HEADER_LINE)
    done = run_parlai('empathy_build_candidates', '--ed-datapath', folder, '-o', tmp_path / 'pool.cands', check=False)
    assert (done.returncode, done.stderr.strip()) == (1, f'{folder / "train.csv"}: no examples (header only)')
    assert 'Traceback' not in done.stdout + done.stderr and not (tmp_path / 'pool.cands').exists()
    (folder / 'train.csv').write_bytes(GOOD)
    done = run_parlai(
        'empathy_build_candidates',
        '--ed-datapath',
        folder,
        '--max-tokens',
        '1',
        '-o',
        tmp_path / 'pool.cands',
        check=False,
    )
    assert (done.returncode, done.stderr.strip()) == (
        1,
        f'{folder / "train.csv"}: no examples (no listener responses of at most 1 tokens to build a candidate '
        'pool from)',
    )
