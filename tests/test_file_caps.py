"""Every file a user hands us is read through one bounded reader (parlai_empathy.files): regular
files only, sizes checked before reading, JSON within nesting/digit/string caps, archives checked
before unpacking; each refusal is one line naming the file (and line, field) and the cap.

Hostile inputs here are fresh ones: FIFOs and devices in place of files, deep and wide JSON,
inflating checkpoints and archives, NUL bytes, broken literals. A hang would show as the guard
thread (or the subprocess timeout) expiring, never as a time measured.
"""

import io
import json
import os
import re
import subprocess
import sys
import tarfile
import threading
import zipfile
from dataclasses import fields

import pytest
import torch

from parlai_empathy.files import bounded
from parlai_empathy.files.caps import FileCaps, caps, env_name

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(os.path.dirname(HERE), 'docs', 'security.md')
VENV_BIN = os.path.dirname(sys.executable)


def finishes(fn, *args):
    """``fn(*args)``'s exception or result, failing the test if it blocks (a FIFO read hangs)."""
    box = {}

    def target():
        try:
            box['value'] = fn(*args)
        except BaseException as err:  # noqa: BLE001 - handed back to the test
            box['error'] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), f'{fn.__name__} blocked on {args}'
    return box


def refused(fn, *args) -> str:
    box = finishes(fn, *args)
    assert 'error' in box, f'accepted: {box.get("value")!r:.200}'
    message = str(box['error'])
    assert '\n' not in message and 'Traceback' not in message, message
    return message


# ----- the caps --------------------------------------------------------------------------------------
def test_every_cap_is_in_the_docs_table_with_its_default():
    text = open(DOC, encoding='utf-8').read()
    rows = dict(re.findall(r'^\| `(PARLAI_EMPATHY_CAP_[A-Z_]+)` \| ([^|]+) \|', text, re.M))
    expected = {env_name(f.name): f'{f.default:,}' for f in fields(FileCaps)}
    assert {name: value.strip() for name, value in rows.items()} == expected


def test_a_cap_is_set_by_its_one_variable_and_a_bad_value_is_refused(monkeypatch):
    monkeypatch.setenv('PARLAI_EMPATHY_CAP_OPT_BYTES', '1_000')
    assert caps().opt_bytes == 1000 and caps().json_depth == FileCaps().json_depth
    for bad in ('-1', '0', 'lots', '1e9', '9' * 30):
        monkeypatch.setenv('PARLAI_EMPATHY_CAP_OPT_BYTES', bad)
        with pytest.raises(ValueError, match='PARLAI_EMPATHY_CAP_OPT_BYTES=.*not a positive whole number'):
            caps()


def test_the_defaults_fit_the_real_data(ed_dir):
    limits = FileCaps()
    for split in ('train', 'valid', 'test'):
        path = os.path.join(ed_dir, f'{split}.csv')
        assert os.path.getsize(path) < limits.data_bytes
        with open(path, 'rb') as f:
            assert max(len(line) for line in f) < limits.line_bytes
    list(bounded.iter_lines(os.path.join(ed_dir, 'train.csv'), 'EmpatheticDialogues CSV'))


# ----- regular files only, size before reading ---------------------------------------------------
def test_a_fifo_a_device_a_folder_and_a_link_to_a_device_are_refused_at_once(tmp_path):
    fifo = tmp_path / 'model.opt'
    os.mkfifo(fifo)
    (tmp_path / 'zero').symlink_to('/dev/zero')
    cases = {
        fifo: 'a FIFO, not a regular file',
        '/dev/zero': 'a character device',
        tmp_path / 'zero': 'a character device',
        tmp_path: 'a folder',
    }
    for path, words in cases.items():
        for reader in (
            lambda p: bounded.read_bytes(p, 'an options file', 'opt_bytes'),
            lambda p: list(bounded.iter_lines(p, 'TSV')),
            lambda p: bounded.check_file(p, 'a dictionary', 'dict_bytes'),
        ):
            message = refused(reader, path)
            assert message.startswith(f'{path}: ') and words in message, message


def test_a_file_over_its_cap_is_refused_before_it_is_read(tmp_path, monkeypatch):
    sparse = tmp_path / 'model.dict'
    with open(sparse, 'wb') as f:  # 20 GiB that take no disk: only the size is looked at
        f.truncate(20 << 30)
    message = refused(bounded.read_bytes, sparse, 'a dictionary', 'dict_bytes')
    assert message.startswith(
        f'{sparse}: 21,474,836,480 bytes, over the cap of 268,435,456 (PARLAI_EMPATHY_CAP_DICT_BYTES)'
    ), message
    monkeypatch.setenv('PARLAI_EMPATHY_CAP_LINE_BYTES', '100')
    long_line = tmp_path / 'long.tsv'
    long_line.write_bytes(b'ok\n' + b'x' * 500 + b'\n')
    message = refused(lambda p: list(bounded.iter_lines(p, 'TSV')), long_line)
    assert message.startswith(f'{long_line}, line 2: no line break within the cap of 100'), message


# ----- JSON ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    'text, words',
    [
        ('[' * 200_000 + ']' * 200_000, 'line 1: nested deeper than the cap of 64'),
        ('{"a":\n' * 70 + '1' + '}' * 70, 'line 65: nested deeper than the cap of 64'),
        ('{"n": ' + '7' * 5000 + '}', 'an integer of 5,000 digits, over the cap of 40'),
        ('{"score": NaN}', 'NaN is not a number a figure may have'),
        ('{"score": -Infinity}', '-Infinity is not a number a figure may have'),
        ('{"score": 1e999}', 'the number 1e999 overflows to infinity'),
        ('{"text": "' + 'x' * 200_000 + '"}', "field 'text': a string of 200,000 characters, over the cap of 100,000"),
        ('{"a": 1,}', 'not valid JSON for a JSON file (Expecting property name enclosed in double quotes at column 9)'),
    ],
)
def test_hostile_json_is_refused_naming_file_and_line(text, words):
    message = refused(bounded.loads_json, text, 'log.jsonl', None)
    assert message.startswith('log.jsonl') and words in message, message


def test_json_within_the_caps_reads_as_json():
    assert bounded.loads_json('{"a": [1, 2.5, "x", null, {"b": true}]}', 'f') == {'a': [1, 2.5, 'x', None, {'b': True}]}
    assert bounded.loads_json('null', 'f') is None


# ----- archives and checkpoints --------------------------------------------------------------------
@pytest.mark.parametrize(
    'members, words',
    [
        ([('model\0.opt', 10)], "field 'member name': 'model\\x00.opt' holds a NUL byte"),
        ([(f'f{i}', 1) for i in range(10_001)], 'over the cap of 10,000 (PARLAI_EMPATHY_CAP_ARCHIVE_MEMBERS) members'),
        ([('a/' * 20 + 'x', 1)], 'is nested 21 folders deep, over the cap of 16'),
        ([('model', 6 << 30), ('model.dict', 3 << 30)], 'unpacks to over the cap of 8,589,934,592'),
        ([('model', 1 << 50)], 'unpacks to over the cap'),
    ],
)
def test_archive_members_are_checked_before_unpacking(tmp_path, monkeypatch, members, words):
    monkeypatch.setenv('PARLAI_EMPATHY_CAP_ARCHIVE_RATIO', str(1 << 40))  # the size caps alone
    message = refused(bounded.check_archive, 'model.tar.gz', members, str(tmp_path))
    assert message.startswith('model.tar.gz') and words in message, message


def test_an_archive_that_would_fill_the_disk_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv('PARLAI_EMPATHY_CAP_ARCHIVE_BYTES', str(1 << 60))
    monkeypatch.setenv('PARLAI_EMPATHY_CAP_ARCHIVE_RATIO', str(1 << 40))
    free = __import__('shutil').disk_usage(tmp_path).free
    message = refused(bounded.check_archive, 'model.tar.gz', [('model', free - (1 << 20))], str(tmp_path / 'new'))
    assert 'bytes free; at least 268,435,456 (PARLAI_EMPATHY_CAP_DISK_HEADROOM_BYTES) bytes must stay free' in message


def test_a_zoo_archive_over_the_unpacked_cap_is_refused_and_nothing_is_installed(tmp_path, monkeypatch):
    from parlai_empathy.serving import model_zoo

    monkeypatch.setenv('PARLAI_EMPATHY_CAP_ARCHIVE_BYTES', str(1 << 20))
    bomb = tmp_path / 'bomb.tar.gz'
    with tarfile.open(bomb, 'w:gz') as tar:
        opt = json.dumps({'model': 'empathy/mime'}).encode()
        info = tarfile.TarInfo('model.opt')
        info.size = len(opt)
        tar.addfile(info, io.BytesIO(opt))
        info = tarfile.TarInfo('model')
        info.size = 8 << 20  # zeros: a few KB packed
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    assert os.path.getsize(bomb) < 100_000
    target = tmp_path / 'zoo' / 'mime'
    with pytest.raises(model_zoo.ZooError) as err:
        model_zoo.install_archive(str(bomb), str(target), 'v1', 'empathy/mime')
    assert str(err.value).startswith(f'{bomb}: unpacks to over the cap of 1,048,576'), str(err.value)
    assert not target.exists() and [p.name for p in (tmp_path / 'zoo').iterdir()] == ['mime.lock']


def test_an_archive_bomb_is_refused_by_its_ratio_under_the_default_caps(tmp_path):
    from parlai_empathy.serving import model_zoo

    bomb = tmp_path / 'bomb.tar.gz'
    with tarfile.open(bomb, 'w:gz') as tar:
        info = tarfile.TarInfo('model.opt')
        opt = json.dumps({'model': 'empathy/mime'}).encode()
        info.size = len(opt)
        tar.addfile(info, io.BytesIO(opt))
        info = tarfile.TarInfo('model')
        info.size = 200 << 20  # zeros: under the 8 GiB cap, but 1,000 times the archive's size
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    target = tmp_path / 'zoo' / 'mime'
    with pytest.raises(model_zoo.ZooError) as err:
        model_zoo.install_archive(str(bomb), str(target), 'v1', 'empathy/mime')
    assert str(err.value).startswith(f'{bomb}: unpacks to over 100 (PARLAI_EMPATHY_CAP_ARCHIVE_RATIO) times its own')
    assert not target.exists()


def test_a_nul_byte_in_an_archive_member_name_is_one_line(tmp_path):
    from parlai_empathy.serving import model_zoo

    evil = tmp_path / 'evil.tar.gz'
    with tarfile.open(evil, 'w:gz', format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo('model')
        info.pax_headers = {'path': 'mo\0del'}
        tar.addfile(info, io.BytesIO(b''))
    with pytest.raises(model_zoo.ZooError) as err:
        model_zoo.install_archive(str(evil), str(tmp_path / 'zoo' / 'x'), 'v1', 'empathy/mime')
    assert str(err.value).startswith(f'{evil}') and '\n' not in str(err.value)
    assert 'NUL' in str(err.value) or 'not a readable' in str(err.value), str(err.value)


def test_an_inflating_checkpoint_is_refused_before_it_is_loaded(tmp_path):
    from parlai_empathy.integration.safe_loading import ModelFileError, load_checkpoint

    honest = tmp_path / 'honest'
    torch.save({'model': {'w': torch.zeros(4 << 20)}}, honest)  # 16 MiB of zeros
    inflating = tmp_path / 'model'
    with zipfile.ZipFile(honest) as src, zipfile.ZipFile(inflating, 'w', zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
    assert os.path.getsize(inflating) < os.path.getsize(honest) // 10
    with pytest.raises(ModelFileError) as err:
        load_checkpoint(str(inflating))
    assert str(err.value).startswith(f'{inflating}: ') and 'compressed member(s)' in str(err.value), str(err.value)
    assert f'unpack to {16 << 20:,}' in str(err.value) or 'unpack to 16,' in str(err.value), str(err.value)
    assert load_checkpoint(str(honest))['model']['w'].numel() == 4 << 20
    os.remove(inflating)
    os.mkfifo(inflating)
    message = refused(load_checkpoint, str(inflating))
    assert message.startswith(f'{inflating}: a FIFO, not a regular file'), message


# ----- .opt files, through ParlAI's own Opt.load ---------------------------------------------------
def test_parlai_opt_load_refuses_a_fifo_a_device_and_an_oversized_opt_with_one_line(tmp_path):
    from parlai.core.opt import Opt

    from parlai_empathy.integration.safe_loading import ModelFileExit

    fifo = tmp_path / 'fifo.opt'
    os.mkfifo(fifo)
    zero = tmp_path / 'zero.opt'
    zero.symlink_to('/dev/zero')
    big = tmp_path / 'big.opt'
    big.write_text(json.dumps({'model': 'sideeffect:Agent', 'pad': 'x' * (5 << 20)}))
    for path, words in ((fifo, 'a FIFO'), (zero, 'a character device'), (big, 'over the cap of 4,194,304')):
        box = finishes(Opt.load, str(path))
        assert isinstance(box.get('error'), ModelFileExit), box
        assert str(box['error']).startswith(f'{path}: ') and words in str(box['error'])
    good = tmp_path / 'good.opt'
    Opt({'model': 'empathy/mime', 'n': 3}).save(str(good))
    assert Opt.load(str(good))['n'] == 3


def test_read_model_opt_is_bounded_too(tmp_path):
    from parlai_empathy.integration.model_opt import read_model_opt

    os.mkfifo(tmp_path / 'model.opt')
    assert 'a FIFO' in refused(read_model_opt, str(tmp_path / 'model'))
    os.remove(tmp_path / 'model.opt')
    (tmp_path / 'model.opt').write_text('[1]')
    assert 'line 1: not an options file' in refused(read_model_opt, str(tmp_path / 'model'))


# ----- the allowlist ------------------------------------------------------------------------------
def test_only_the_agent_class_of_each_module_is_ours():
    import parlai_empathy.agents.mime as mime_module
    from parlai_empathy.integration.safe_loading import our_agent

    assert our_agent('parlai_empathy.agents.mime:MimeAgent') == 'empathy/mime'
    assert our_agent('parlai.agents.empathy.bert_ranker:BertRankerAgent') == 'empathy/bert_ranker'
    # names importable from our agent modules that are not our agents: stock classes they import
    borrowed = [name for name in dir(mime_module) if name.endswith('Agent') and name != 'MimeAgent']
    assert borrowed, 'the mime module imports no other *Agent class: pick another example'
    for name in borrowed + ['SafeAgentMixin', 'os']:
        assert our_agent(f'parlai_empathy.agents.mime:{name}') is None, name
        assert our_agent(f'parlai.agents.empathy.mime:{name}') is None, name


# ----- saved outputs and released files --------------------------------------------------------------
def _episode(teacher=None, model=None):
    turn = {'text': 'hi', 'eval_labels': ['hello'], **(teacher or {})}
    return json.dumps({'dialog': [[turn, {'text': 'hey', **(model or {})}]]})


@pytest.mark.parametrize(
    'line, words',
    [
        (_episode(model={'emotion_scores': {'sad': float('nan')}}), 'line 1: NaN is not a number a figure may have'),
        (
            _episode(teacher={'context_utterances': 'not a list'}),
            "line 1, field 'context_utterances': expected a list of strings, got str",
        ),
        (_episode(model={'metrics': {'ppl': 'high'}}), "line 1, field 'metrics.ppl': not a number"),
        (
            _episode(model={'emotion_scores': {'sad': 'very'}}),
            "line 1, field 'emotion_scores': expected label -> number",
        ),
        ('{"dialog": ' + '[' * 200_000 + ']' * 200_000 + '}', 'line 1: nested deeper than the cap of 64'),
        (
            _episode(model={'n': 7}).replace('"n": 7', '"n": ' + '7' * 5000),
            'line 1: an integer of 5,000 digits, over the cap of 40',
        ),
    ],
)
def test_world_log_values_that_are_not_what_they_should_be_are_refused(tmp_path, line, words):
    from parlai_empathy.metrics.saved_outputs import read_outputs

    path = tmp_path / 'log.jsonl'
    path.write_text(line + '\n')
    message = refused(read_outputs, str(path))
    assert message.startswith(f'{path}, ') and words in message, message


@pytest.mark.parametrize(
    'content, words',
    [
        ('ctx\tgold\tréponse\n'.encode('latin-1'), 'line 1: not UTF-8: byte 0xe9 at column 11'),
        (b'ctx\tgo\0ld\treply\n', 'line 1: NUL byte at column 7'),
        (b'ctx\tgold\t' + b'x' * (10 << 20) + b'\n', 'line 1: no line break within the cap of 1,048,576'),
        (
            b'ctx\tgold\t' + b'x' * 200_000 + b'\n',
            "line 1, field 'response': 200,000 characters, over the cap of 100,000",
        ),
    ],
)
def test_tsv_outputs_that_are_not_text_or_too_large_are_refused_naming_the_line(tmp_path, content, words):
    from parlai_empathy.metrics.saved_outputs import read_outputs

    path = tmp_path / 'outputs.tsv'
    path.write_bytes(content)
    message = refused(read_outputs, str(path))
    assert message.startswith(f'{path}, ') and words in message, message


def test_a_released_context_list_is_read_token_by_token_within_its_cap(tmp_path):
    from parlai_empathy.metrics.released import _context_list

    assert _context_list("['I lost it.', \"It's gone\"]", 'f', 3, 'context') == ('I lost it.', "It's gone")
    huge = '[' + ', '.join(["'a'"] * 1_500_000) + ']'  # 6 MB: literal_eval would build ~2 GB of syntax tree
    message = refused(_context_list, huge, 'out.txt', 7, 'context')
    assert message.startswith(
        f"out.txt, line 7, field 'context': {len(huge):,} characters, over the cap of "
        '1,048,576 (PARLAI_EMPATHY_CAP_LITERAL_CHARS)'
    ), message
    for bad in ("['a', __import__('os')]", "['a'] + ['b']", "[['a']]", "['a',,]", "f'{x}'", "['a'"):
        assert 'not a non-empty list of strings' in refused(_context_list, bad, 'f', 1, 'c'), bad


# ----- through the commands a user types ------------------------------------------------------------
def parlai(*args, cwd, env=None, input=None):
    full_env = dict(os.environ, HF_HUB_OFFLINE='1', **(env or {}))
    return subprocess.run(
        [os.path.join(VENV_BIN, 'parlai'), *map(str, args)],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
        input=input,
    )


def one_line_exit(done):
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert 'Traceback' not in done.stderr, done.stderr[-3000:]
    return done.stderr.strip().splitlines()[-1]


def test_parlai_interactive_on_a_fifo_opt_ends_at_once_with_one_line(tmp_path):
    os.mkfifo(tmp_path / 'model.opt')
    (tmp_path / 'model').write_bytes(b'')
    for command in ('interactive', 'empathy_chat'):
        done = parlai(command, '-mf', tmp_path / 'model', cwd=tmp_path, input='')
        assert (
            one_line_exit(done) == f'{tmp_path}/model.opt: a FIFO, not a regular file; an options file must be '
            'a plain file'
        ), command


def test_an_over_limit_opt_naming_a_module_never_imports_it(tmp_path):
    modules = tmp_path / 'modules'
    modules.mkdir()
    marker = tmp_path / 'code-ran'
    (modules / 'sideeffect.py').write_text(f'import os\nos.mkdir({str(marker)!r})\nclass Agent: pass\n')
    (tmp_path / 'model.opt').write_text(json.dumps({'model': 'sideeffect:Agent', 'pad': 'x' * (5 << 20)}))
    (tmp_path / 'model').write_bytes(b'')
    for command in ('interactive', 'empathy_chat', 'eval_model'):
        extra = ['-t', 'empathy_ed_clean'] if command == 'eval_model' else []
        done = parlai(
            command, '-mf', tmp_path / 'model', *extra, cwd=tmp_path, input='', env={'PYTHONPATH': str(modules)}
        )
        line = one_line_exit(done)
        assert line.startswith(f'{tmp_path}/model.opt: 5,242,9') and 'over the cap of 4,194,304' in line, line
        assert not marker.exists(), f'{command} imported the module the file names'


def test_empathy_score_on_a_200000_deep_world_log_ends_with_one_line(tmp_path):
    (tmp_path / 'deep.jsonl').write_text('[' * 200_000 + ']' * 200_000 + '\n')
    done = parlai('empathy_score', '-o', tmp_path / 'deep.jsonl', '--bertscore-model', 'none', cwd=tmp_path)
    assert (
        one_line_exit(done) == f'empathy_score: {tmp_path}/deep.jsonl, line 1: nested deeper than the cap of 64 '
        '(PARLAI_EMPATHY_CAP_JSON_DEPTH) levels (at column 65), for a world-log line'
    )


@pytest.mark.parametrize(
    'line, words',
    [
        ('{"dialog": ' + '[' * 200_000 + ']' * 200_000 + '}', 'line 1: nested deeper than the cap of 64'),
        ('{"dialog": [], "n": ' + '7' * 5000 + '}', 'line 1: an integer of 5,000 digits'),
    ],
)
def test_humaneval_inputs_refuse_deep_and_huge_json_with_file_and_line(tmp_path, line, words):
    from parlai_empathy.humaneval.inputs import InputError, read_pairings, read_world_log

    path = tmp_path / 'log.jsonl'
    path.write_text(line + '\n')
    for reader in (read_world_log, read_pairings):
        box = finishes(reader, str(path))
        assert isinstance(box.get('error'), InputError), box
        assert str(box['error']).startswith(f'{path}:1: ') and words[len('line 1: ') :] in str(box['error']), str(
            box['error']
        )


# ----- readers of our own artifacts, handed over by a user: outputs, table.json, caches, packages ------
def _gz(path, data: bytes):
    import gzip

    path.write_bytes(gzip.compress(data, mtime=0))
    return path


def _hostile_files(tmp_path, name):
    """Fresh hostile stand-ins for the file ``name``: a FIFO, a link to /dev/zero, a gzip bomb
    (128 MiB of rows of zeros, packed into about 130 KB: over 100 times its size), a 200,000-deep
    JSON line and a NUL byte (both gzipped when ``name`` ends with .gz)."""
    import zlib

    made = {}
    for case in ('fifo', 'zero', 'bomb', 'deep', 'nul'):
        folder = tmp_path / case
        folder.mkdir()
        made[case] = folder / name
    os.mkfifo(made['fifo'])
    made['zero'].symlink_to('/dev/zero')
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # a gzip stream, written piece by piece
    with open(made['bomb'], 'wb') as f:
        # 16 MiB of short rows that are each valid: neither the line cap nor a parser stops it
        zeros = (b'{"id": "x", "gold": "' + b'0' * 990 + b'", "reply": "y"}\n') * (1 << 14)
        for _ in range(8):
            f.write(packer.compress(zeros))
        f.write(packer.flush())
    deep = ('[' * 200_000 + ']' * 200_000 + '\n').encode()
    nul = b'{"id": "a\x00b", "reply": "x"}\n'
    if name.endswith('.gz'):
        _gz(made['deep'], deep)
        _gz(made['nul'], nul)
    else:
        made['deep'].write_bytes(deep)
        made['nul'].write_bytes(nul)
    return made


HOSTILE_WORDS = {
    'fifo': ': a FIFO, not a regular file',
    'zero': ': a character device, not a regular file',
    'deep': ', line 1: nested deeper than the cap of 64',
    'nul': ', line 1: NUL byte at column 10',
}


def _check_refusals(made, reader, error_type, words=HOSTILE_WORDS, skip=()):
    for case, path in made.items():
        if case in skip:
            continue
        box = finishes(reader, str(path))
        assert isinstance(box.get('error'), error_type), (case, box)
        message = str(box['error'])
        assert '\n' not in message and message.startswith(str(path)), (case, message)
        assert words[case] in message, (case, message)


BOMB_WORDS = ': unpacks to over 100 (PARLAI_EMPATHY_CAP_ARCHIVE_RATIO) times its own'


def test_a_rows_outputs_file_is_read_within_the_caps(tmp_path):
    """``outputs.jsonl.gz`` (evidence, the leaderboard's comparisons, the rating build): a FIFO,
    /dev/zero, a gzip bomb, deep JSON and a NUL byte each end in one line naming the file."""
    from parlai_empathy.evidence import artifacts as evidence
    from parlai_empathy.humaneval.inputs import InputError, read_outputs
    from parlai_empathy.leaderboard.rows import read_entry_rows

    made = _hostile_files(tmp_path, 'outputs.jsonl.gz')
    words = dict(HOSTILE_WORDS, bomb=BOMB_WORDS)
    _check_refusals(made, evidence.read_outputs, evidence.ArtifactError, words)
    _check_refusals(made, read_entry_rows, ValueError, words)
    humaneval_words = {case: w.replace(', line 1: ', ':1: ') for case, w in words.items()}
    # (its bomb's first row is refused already: no item of the ED test split has id 'x')
    _check_refusals(made, lambda p: read_outputs(p, {}), InputError, humaneval_words, skip=('bomb',))
    assert evidence.read_outputs(str(_gz(tmp_path / 'ok.jsonl.gz', b'{"id": "a"}\n'))) == [{'id': 'a'}]


def test_a_table_json_or_meta_json_is_read_within_the_caps(tmp_path):
    from parlai_empathy.evidence import reproduce
    from parlai_empathy.evidence.artifacts import read_json

    made = _hostile_files(tmp_path, 'table.json')
    words = dict(HOSTILE_WORDS, bomb=': 2,1')  # not gzip: 2 MB of packed bytes are no JSON
    words['nul'] = ': NUL byte at column 10'
    words['deep'] = ', line 1: nested deeper than the cap of 64'
    _check_refusals(
        made, lambda p: read_json(p, reproduce.ReproduceSpecError), reproduce.ReproduceSpecError, words, skip=('bomb',)
    )


def test_a_tag_cache_and_listener_labels_are_read_within_the_caps(tmp_path):
    from parlai_empathy.emotions import listener_labels, tag_cache

    made = _hostile_files(tmp_path, 'meta.json')
    for case in ('fifo', 'zero', 'deep'):
        box = finishes(tag_cache.TagTable, str(made[case].parent))
        assert isinstance(box.get('error'), tag_cache.TagCacheError), (case, box)
        message = str(box['error'])
        assert '\n' not in message and str(made[case]) in message and HOSTILE_WORDS[case] in message, message
    (tmp_path / 'labels').mkdir()
    bomb = _hostile_files(tmp_path / 'labels', 'labels.csv.gz')['bomb']
    message = refused(bounded.read_gzip_bytes, bomb, 'a listener label file (gzipped CSV)')
    assert message.startswith(f'{bomb}, line ') and BOMB_WORDS in message, message
    assert hasattr(listener_labels, 'read_gzip_bytes')  # the reader the label files go through


def test_packaging_copies_only_regular_files_within_their_caps(tmp_path):
    """A model folder whose dictionary is /dev/zero or a FIFO, or whose encoder folder holds one,
    is refused before anything is copied: never read for ever, never hung."""
    made = _hostile_files(tmp_path, 'model.dict')
    for case in ('fifo', 'zero'):
        message = refused(bounded.copy_regular, made[case], tmp_path / 'copy', 'a dictionary', 'dict_bytes')
        assert message.startswith(f'{made[case]}{HOSTILE_WORDS[case]}'), message
    encoder = tmp_path / 'encoder'
    encoder.mkdir()
    (encoder / 'config.json').write_text('{}')
    os.mkfifo(encoder / 'vocab.txt')
    message = refused(bounded.copy_folder, encoder, tmp_path / 'staged', 'the encoder folder')
    assert message.startswith(f'{encoder}/vocab.txt: a FIFO, not a regular file'), message
    assert not (tmp_path / 'staged').exists()  # refused before anything was copied


def test_a_checksum_is_never_taken_of_a_fifo_or_a_device(tmp_path):
    from parlai_empathy.data.ed_source import file_checksum

    made = _hostile_files(tmp_path, 'train.csv')
    for case in ('fifo', 'zero'):
        message = refused(file_checksum, made[case])
        assert message.startswith(f'{made[case]}{HOSTILE_WORDS[case]}'), message
