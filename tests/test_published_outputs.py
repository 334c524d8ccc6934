"""Other papers' released ED test outputs: each format's reader, the alignment with ED test, the
scoring and the evidence of a ``published`` row, through ``parlai empathy_score`` as a user runs it.

The released files themselves are not in the repository: each format is written here in its
paper's layout from the embedded ED sample (MoEL's preprocessing: lower case, contractions
expanded, nltk tokens), and a test that needs the real files runs where
``$PARLAI_EMPATHY_RELEASED_DIR`` holds them.
"""

import gzip
import json
import os

import pytest

from conftest import REPO
from parlai_empathy.data.moel_text import moel_tokens
from parlai_empathy.evidence import artifacts as evidence
from parlai_empathy.metrics import released
from parlai_empathy.metrics.alignment import align, context_key, ed_test_examples, example_id
from parlai_empathy.metrics.released import ReleasedFormatError, ReleasedOutput, read_released

SEPARATOR = '-' * 70


def moel(text):
    return ' '.join(moel_tokens(text))


@pytest.fixture(scope='module')
def sample_examples():
    return ed_test_examples('sample')


def mime_block(example, reply='i am sorry to hear that .'):
    context = [moel(t) for t in example.context_utterances]
    return (
        f'emotion:{example.emotion}\tvader-score: 0.0129\tpredicted_emotion: sad\n'
        f'Context:{context!r}\nTopk:{reply} topk \nBeam: {reply} \nGreedy:{reply} greedy \n'
        f'Ref:{moel(example.label)}\n{SEPARATOR}\n'
    )


def write_mime(path, examples, header=True):
    with open(path, 'w', encoding='utf-8') as f:
        if header:
            f.write(
                '### COMMENT: vader ### \nEVAL\tLoss\tPPL\tAccuracy\tBleu_g\tBleu_b\tBleu_t\n'
                'test\t3.6253\t37.5363\t0.3488\t2.76\t3.13\t1.76\n'
            )
        for example in examples:
            f.write(mime_block(example))
    return str(path)


# ----- readers ------------------------------------------------------------------------------------
def test_mime_reader_takes_each_decoding_with_context_reference_emotion_and_line(tmp_path, sample_examples):
    path = write_mime(tmp_path / 'output.txt', sample_examples[:3])
    beam = read_released(path, 'mime-beam')
    greedy = read_released(path, 'mime-greedy')
    assert [o.response for o in beam] == ['i am sorry to hear that .'] * 3
    assert greedy[0].response == 'i am sorry to hear that . greedy'
    assert beam[0].context == tuple(moel(t) for t in sample_examples[0].context_utterances)
    assert beam[0].reference == moel(sample_examples[0].label) and beam[0].emotion == sample_examples[0].emotion
    assert beam[0].source == f'{path}:4' and beam[1].source == f'{path}:11'


@pytest.mark.parametrize(
    'damage,line,field',
    [
        (lambda text: text.replace('Ref:', 'Reference:', 1), 4, 'Ref'),
        (
            lambda text: text.replace('Context:[', 'Context:__import__("os").system("touch PWNED") or [', 1),
            5,
            'Context',
        ),
        (lambda text: text.replace('Context:[', 'Context:' + '[' * 5000, 1), 5, 'Context'),
        (lambda text: text.replace('Context:[', 'Context:[1, ', 1), 5, 'Context'),
        (lambda text: text.replace('emotion:', 'emotions ', 1), 4, 'emotion'),
    ],
)
def test_a_damaged_mime_block_is_refused_naming_file_line_and_field(tmp_path, sample_examples, damage, line, field):
    path = write_mime(tmp_path / 'output.txt', sample_examples[:2])
    with open(path) as f:
        text = f.read()
    with open(path, 'w') as f:
        f.write(damage(text))
    with pytest.raises(ReleasedFormatError) as err:
        read_released(path, 'mime-beam')
    assert f'{path}, line {line}, field {field!r}' in str(err.value)
    assert not os.path.exists('PWNED') and not (tmp_path / 'PWNED').exists()


def test_files_that_are_not_released_outputs_are_refused(tmp_path, monkeypatch):
    empty = tmp_path / 'empty.txt'
    empty.write_text('')
    with pytest.raises(ReleasedFormatError, match='not a MIME output.txt'):
        read_released(str(empty), 'mime-beam')
    binary = tmp_path / 'binary.txt'
    binary.write_bytes(b'emotion:sad\nContext:[\xff\xfe]\n')
    with pytest.raises(ReleasedFormatError, match=r'line 2, field .file.: not UTF-8'):
        read_released(str(binary), 'mime-beam')
    monkeypatch.setenv('PARLAI_EMPATHY_CAP_DATA_BYTES', '10')
    with pytest.raises(ValueError, match=r'binary.txt: 25 bytes, over the cap of 10 \(PARLAI_EMPATHY_CAP_DATA_BYTES\)'):
        read_released(str(binary), 'mime-beam')
    with pytest.raises(ValueError, match='unknown released-outputs format'):
        read_released(str(binary), 'nonsense')


def write_moel(path, examples, swap_at=None):
    with open(path, 'w', encoding='utf-8') as f:
        for i, example in enumerate(examples):
            lines = [
                f'Emotion: {example.emotion}',
                f'Context: {[moel(t) for t in example.context_utterances]!r}',
                'trs: trs reply .',
                'trs+multitask: multitask reply .',
                'MOE: moe reply .',
                'MOE+oracle: oracle reply .',
                f'ref: {moel(example.label)}',
            ]
            if i == swap_at:  # MoEL's own file has one block with ref before MOE+oracle
                lines[5], lines[6] = lines[6], lines[5]
            f.write('\n'.join(lines) + '\n\n')
    return str(path)


def write_kemp(path, examples, emotion_label='Emotion', extra="Concept:[defaultdict(<class 'list'>, {})] "):
    with open(path, 'w', encoding='utf-8') as f:
        for example in examples:
            f.write(
                f'{emotion_label}:{example.emotion} \nContext:{[moel(t) for t in example.context_utterances]!r} \n'
                f'{extra}\nPred:kemp reply .  \nRef:{moel(example.label)} \n'
            )
    return str(path)


def test_moel_reader_takes_each_of_its_four_systems_by_label(tmp_path, sample_examples):
    path = write_moel(tmp_path / 'generation_result.txt', sample_examples[:3], swap_at=1)
    replies = {
        fmt: [o.response for o in read_released(path, fmt)]
        for fmt in ('moel', 'moel-oracle', 'moel-multitask', 'moel-transformer')
    }
    assert replies == {
        'moel': ['moe reply .'] * 3,
        'moel-oracle': ['oracle reply .'] * 3,
        'moel-multitask': ['multitask reply .'] * 3,
        'moel-transformer': ['trs reply .'] * 3,
    }
    second = read_released(path, 'moel')[1]
    assert second.reference == moel(sample_examples[1].label) and second.source == f'{path}:9'


def test_kemp_and_empdg_readers_take_pred_lines_and_skip_their_extra_fields(tmp_path, sample_examples):
    kemp = read_released(write_kemp(tmp_path / 'KEMP.txt', sample_examples[:2]), 'kemp')
    empdg = read_released(
        write_kemp(tmp_path / 'EmpDG.txt', sample_examples[:2], 'emotion', "Emotion_context:['a'] \nFeedback:['b'] "),
        'empdg',
    )
    for outputs in (kemp, empdg):
        assert [o.response for o in outputs] == ['kemp reply .'] * 2
        assert outputs[1].emotion == sample_examples[1].emotion
        assert outputs[1].reference == moel(sample_examples[1].label)


@pytest.mark.parametrize(
    'damage,line,field',
    [
        (lambda text: text.replace('Emotion:', 'Emotion', 1), 1, 'line'),
        (lambda text: text.replace('Emotion:', 'Note:', 2), 1, 'note'),
        (lambda text: text.replace('Pred:', 'Prediction:', 1), 1, 'pred'),
        (lambda text: text.replace('Context:[', 'Context:{', 1), 2, 'context'),
    ],
)
def test_a_damaged_labelled_file_is_refused_naming_file_line_and_field(tmp_path, sample_examples, damage, line, field):
    path = write_kemp(tmp_path / 'KEMP.txt', sample_examples[:2])
    with open(path) as f:
        text = f.read()
    with open(path, 'w') as f:
        f.write(damage(text))
    with pytest.raises(ReleasedFormatError) as err:
        read_released(path, 'kemp')
    assert f'{path}, line {line}, field {field!r}' in str(err.value)


def test_a_block_missing_its_emotion_line_is_refused_not_merged(tmp_path, sample_examples):
    path = write_kemp(tmp_path / 'KEMP.txt', sample_examples[:3])
    lines = open(path).read().split('\n')
    del lines[5]  # the second block's Emotion: line
    open(path, 'w').write('\n'.join(lines))
    with pytest.raises(ReleasedFormatError, match=r"line 6, field 'context': a second \"context:\" line"):
        read_released(path, 'kemp')


def write_cem(path, examples):
    """CEM's results.txt layout: its two header lines, then one block per example."""
    with open(path, 'w', encoding='utf-8') as f:
        f.write('EVAL\tLoss\tPPL\tAccuracy\n3.5411285986002006\t34.5058\t1.6093\t0.5119\n')
        for example in examples:
            context = [moel(t) for t in example.context_utterances]
            f.write(
                f'Emotion: {example.emotion}\nPred Emotions: sad, lonely, afraid\nContext:{context!r}\n'
                f'Beam:i am sorry to hear that . \nGreedy:that is awesome . \nRef:{moel(example.label)}\n'
                f'{"-" * 63}\n'
            )
    return str(path)


def test_cem_reader_takes_each_decoding_with_context_reference_emotion_and_line(tmp_path, sample_examples):
    path = write_cem(tmp_path / 'CEM.txt', sample_examples[:3])
    beam, greedy = read_released(path, 'cem-beam'), read_released(path, 'cem-greedy')
    assert [o.response for o in beam] == ['i am sorry to hear that .'] * 3
    assert [o.response for o in greedy] == ['that is awesome .'] * 3
    assert [o.emotion for o in greedy] == [e.emotion for e in sample_examples[:3]]
    assert greedy[1].source == f'{path}:10' and greedy[0].reference == moel(sample_examples[0].label)
    assert align(greedy, sample_examples).counts()['matched'] == 3


@pytest.mark.parametrize(
    'damage,line,field',
    [
        (lambda text: text.replace('EVAL\tLoss', 'EVAL Loss', 1), 1, 'EVAL'),
        (lambda text: text.replace('\t34.5058', '\tppl', 1), 2, 'EVAL'),
        (lambda text: text.replace('Ref:', 'Reference:', 1), 3, 'Ref'),
        (lambda text: text.replace('Context:[', 'Context:{', 1), 5, 'Context'),
    ],
)
def test_a_damaged_cem_file_is_refused_naming_file_line_and_field(tmp_path, sample_examples, damage, line, field):
    path = write_cem(tmp_path / 'CEM.txt', sample_examples[:2])
    text = open(path).read()
    open(path, 'w').write(damage(text))
    with pytest.raises(ReleasedFormatError) as err:
        read_released(path, 'cem-greedy')
    assert f'{path}, line {line}, field {field!r}' in str(err.value)


def write_llm4ed(root, examples, answers=None):
    """LLM4ED's checkout layout: results/ED_chatgpt_stage1.txt beside data/ED/sys_dialog_texts.test.npy."""
    import numpy as np

    (root / 'results').mkdir(parents=True)
    (root / 'data' / 'ED').mkdir(parents=True)
    contexts = np.empty(len(examples), dtype=object)
    for i, example in enumerate(examples):
        contexts[i] = list(example.context_utterances)
    np.save(root / 'data' / 'ED' / 'sys_dialog_texts.test.npy', contexts, allow_pickle=True)
    answers = answers or [f'The user\'s emotion may be "{e.emotion}". The situation is a test.' for e in examples]
    (root / 'results' / 'ED_chatgpt_stage1.txt').write_text('\n'.join(answers) + '\n')
    return str(root / 'results' / 'ED_chatgpt_stage1.txt')


def test_llm4ed_reader_pairs_each_answer_with_its_context_and_names_its_emotion(tmp_path, sample_examples):
    answers = [
        'The user\'s emotion may be "Terrified". Afraid of it.',
        'The emotion is sad, then "joyful".',
        "The user's emotion is anger.",
    ]
    path = write_llm4ed(tmp_path / 'LLM4ED', sample_examples[:3], answers)
    outputs = read_released(path, 'llm4ed-stage1')
    assert [o.predicted_emotion for o in outputs] == ['terrified', 'joyful', '']
    assert outputs[2].context == tuple(sample_examples[2].context_utterances) and outputs[2].source == f'{path}:3'
    assert released.llm4ed_emotion('she felt apprehensive and afraid') == 'apprehensive'


def test_llm4ed_files_that_do_not_fit_are_refused(tmp_path, sample_examples):
    import pickle

    import numpy as np

    path = write_llm4ed(tmp_path / 'a', sample_examples[:3])
    open(path, 'a').write('one answer too many\n')
    with pytest.raises(ReleasedFormatError, match=r"line 4, field 'line': 4 answers for the 3 contexts"):
        read_released(path, 'llm4ed-stage1')
    path = write_llm4ed(tmp_path / 'b', sample_examples[:3], ['x "sad"', '', 'y "sad"'])
    with pytest.raises(ReleasedFormatError, match=r"line 2, field 'answer'"):
        read_released(path, 'llm4ed-stage1')
    path = write_llm4ed(tmp_path / 'c', sample_examples[:2])
    npy = tmp_path / 'c' / 'data' / 'ED' / 'sys_dialog_texts.test.npy'
    np.save(npy, np.arange(2))
    with pytest.raises(ReleasedFormatError, match=r"field 'header': a int64 array"):
        read_released(path, 'llm4ed-stage1')

    class Hostile:  # unpickling it would run a command
        def __reduce__(self):
            return (os.system, ('echo pwned > ' + str(tmp_path / 'pwned'),))

    contexts = np.empty(2, dtype=object)
    contexts[0], contexts[1] = Hostile(), ['hi']
    with open(npy, 'wb') as f:
        np.lib.format.write_array_header_1_0(f, {'descr': '|O', 'fortran_order': False, 'shape': (2,)})
        pickle.dump(contexts, f, protocol=2)
    with pytest.raises(ReleasedFormatError, match=r"field 'array': not an array of lists of strings \(posix.system"):
        read_released(path, 'llm4ed-stage1')
    assert not (tmp_path / 'pwned').exists()
    os.remove(npy)
    with pytest.raises(ReleasedFormatError, match=r'its contexts .* are missing'):
        read_released(path, 'llm4ed-stage1')


# ----- alignment ----------------------------------------------------------------------------------
def test_context_keys_agree_across_the_papers_preprocessings():
    raw = "I'm so happy_comma_ I didn't think I'd win!"
    assert context_key([raw]) == context_key([moel(raw)]) == context_key(["i 'm so happy , i did n't think i 'd win !"])
    assert context_key(['I was so happy']) != context_key(['I was so sad'])


def test_every_output_is_matched_or_counted(sample_examples):
    outputs = [
        ReleasedOutput(tuple(moel(t) for t in e.context_utterances), 'ok', moel(e.label), e.emotion, f'f:{i}')
        for i, e in enumerate(sample_examples)
    ]
    stranger = ReleasedOutput(('a context no ed conversation has',), 'ok', 'ref', 'sad', 'f:900')
    again = outputs[3]
    alignment = align(outputs + [stranger, again], sample_examples)
    counts = alignment.counts()
    assert counts['matched'] == len(sample_examples) and counts['unmatched'] == 1 and counts['duplicate'] == 1
    assert counts['outputs'] == len(outputs) + 2 and counts['ed_test_examples_without_output'] == 0
    assert [example_id(e) for _, e in alignment.pairs] == [example_id(e) for e in sample_examples]
    report = alignment.to_json()
    assert report['unmatched'] == [{'source': 'f:900'}]
    assert report['duplicate'] == [{'source': 'f:3', 'example': example_id(sample_examples[3])}]


def test_the_reference_tells_apart_two_conversations_with_one_context(sample_examples):
    import dataclasses

    first = sample_examples[0]
    twin = dataclasses.replace(first, conv_id='hit:twin', label='Something else entirely.')
    same = dataclasses.replace(first, conv_id='hit:same')
    context = tuple(moel(t) for t in first.context_utterances)
    told = align([ReleasedOutput(context, 'ok', moel(twin.label), None, 'f:1')], [first, twin])
    assert [e.conv_id for _, e in told.pairs] == ['hit:twin']
    untold = align([ReleasedOutput(context, 'ok', moel(first.label), None, 'f:1')], [first, same])
    assert untold.counts()['ambiguous'] == 1
    assert untold.to_json()['ambiguous'][0]['candidates'] == [example_id(first), example_id(same)]


def test_a_conversation_read_differently_is_matched_by_its_last_turn_and_reference(sample_examples):
    example = next(e for e in sample_examples if len(e.context_utterances) > 1)
    merged = ('hello there',) + tuple(moel(t) for t in example.context_utterances)
    alignment = align([ReleasedOutput(merged, 'ok', moel(example.label), None, 'f:1')], sample_examples)
    assert alignment.counts()['matched'] == 1 and alignment.counts()['matched_by_last_turn'] == 1
    assert alignment.pairs[0][1] is example


# ----- the command --------------------------------------------------------------------------------
def test_empathy_score_scores_a_released_file_and_writes_a_published_row(tmp_path, run_parlai, sample_examples):
    path = write_mime(tmp_path / 'output.txt', sample_examples[:-1])
    artifacts = tmp_path / 'runs'
    done = run_parlai(
        'empathy_score',
        '-o',
        path,
        '--outputs-format',
        'mime-beam',
        '--ed-datapath',
        'sample',
        '--bertscore-model',
        'none',
        '--artifacts',
        artifacts,
        '--entry',
        'mime_beam',
    )
    n = len(sample_examples)
    assert (
        f'{n - 1} outputs: {n - 1} matched with ED test examples (0 by last turn and reference), 0 ambiguous, '
        f'0 unmatched, 0 duplicates; 1 of the {n} ED test examples have no output' in done.stdout
    )
    for key in ('avg_bleu', 'avg_bleu_lc', 'multi_bleu', 'dist-1', 'dist-2_nltk', 'reply_tokens', 'distinct_replies'):
        assert f'| {key} |' in done.stdout
    assert '| distinct_replies | 1.0000 |' in done.stdout and '| reply_tokens | 7.0000 |' in done.stdout
    row = artifacts / 'mime_beam'
    assert sorted(os.listdir(row)) == ['alignment.json', 'meta.json', 'outputs.jsonl.gz', 'report.json']
    report = evidence.read_report(str(row))
    meta = json.loads((row / 'meta.json').read_text())
    assert report['kind'] == 'published' and meta['alignment']['matched'] == n - 1 and meta['examples'] == n - 1
    assert report['commands'][0].startswith('parlai empathy_score -o ')
    rows = evidence.read_outputs(str(row / 'outputs.jsonl.gz'))
    assert [r['id'] for r in rows] == [example_id(e) for e in sample_examples[:-1]]
    with gzip.open(row / 'outputs.jsonl.gz', 'rt') as f:
        assert 'sorry' not in f.read(), 'the replies stay in their repository'
    assert evidence.recompute(rows)['reply_tokens'] == report['values']['reply_tokens']
    for name in ('report.json', 'meta.json', 'alignment.json'):
        assert not evidence.absolute_paths(json.loads((row / name).read_text())), name


def test_empathy_score_refuses_what_it_cannot_score(tmp_path, run_parlai):
    garbage = tmp_path / 'garbage.txt'
    garbage.write_text("emotion:sad\tvader-score: 1\tpredicted_emotion: sad\nContext:['hi']\n")
    done = run_parlai(
        'empathy_score',
        '-o',
        garbage,
        '--outputs-format',
        'mime-beam',
        '--ed-datapath',
        'sample',
        '--bertscore-model',
        'none',
        check=False,
    )
    assert done.returncode != 0 and f"{garbage}, line 1, field 'Beam'" in done.stderr + done.stdout
    assert 'Traceback' not in done.stderr
    done = run_parlai('empathy_score', '--released', 'nonsense', '--bertscore-model', 'none', check=False)
    assert done.returncode != 0 and 'not a known released file' in done.stderr + done.stdout
    done = run_parlai('empathy_score', '--bertscore-model', 'none', check=False)
    assert done.returncode != 0 and 'give -o/--outputs FILE or --released NAME' in done.stderr + done.stdout


def test_released_files_are_fetched_once_and_checked(tmp_path, monkeypatch, sample_examples):
    import urllib.error
    import urllib.request

    content = open(write_mime(tmp_path / 'src.txt', sample_examples[:2]), 'rb').read()
    import hashlib

    known = released.ReleasedFile(
        'x', 'X', 'greedy', 'owner/repo', 'a' * 40, 'out/output.txt', hashlib.sha256(content).hexdigest(), 'mime-greedy'
    )

    class Response:
        def __init__(self, data):
            self.data = data

        def read(self, n):
            return self.data[:n]

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    served = []
    monkeypatch.setattr(urllib.request, 'urlopen', lambda url, timeout: served.append(url) or Response(content))
    path = released.fetch_released(known, str(tmp_path / 'cache'))
    assert path == str(tmp_path / 'cache' / 'owner+repo' / ('a' * 40) / 'out' / 'output.txt')
    assert served == [f'https://raw.githubusercontent.com/owner/repo/{"a" * 40}/out/output.txt']
    assert released.fetch_released(known, str(tmp_path / 'cache')) == path and len(served) == 1
    with open(path, 'ab') as f:
        f.write(b'tampered')
    with pytest.raises(released.ReleasedFileError, match='not the released file'):
        released.fetch_released(known, str(tmp_path / 'cache'))
    monkeypatch.setattr(urllib.request, 'urlopen', lambda url, timeout: Response(content + b'x'))
    with pytest.raises(released.ReleasedFileError, match='expected'):
        released.fetch_released(known, str(tmp_path / 'other'))
    assert not os.path.exists(known.local_path(str(tmp_path / 'other')))

    def offline(url, timeout):
        raise urllib.error.URLError('no route')

    monkeypatch.setattr(urllib.request, 'urlopen', offline)
    with pytest.raises(released.ReleasedFileError, match='git clone https://github.com/owner/repo'):
        released.fetch_released(known, str(tmp_path / 'third'))


# ----- the real files, where they are ---------------------------------------------------------------
RELEASED_DIR = os.environ.get(released.RELEASED_ENV) or os.path.expanduser('~/.cache/parlai-empathy/released')


@pytest.mark.parametrize('name', sorted(released.KNOWN))
def test_each_known_file_reads_whole_and_aligns_with_ed_test(name, ed_dir):
    known = released.KNOWN[name]
    if not os.path.isfile(known.local_path(RELEASED_DIR)):
        pytest.skip(f'{known.repo}@{known.commit[:7]}:{known.path} is not in {RELEASED_DIR}')
    outputs = read_released(released.fetch_released(known, RELEASED_DIR, download=False), known.format)
    alignment = align(outputs, ed_test_examples(ed_dir))
    committed = json.load(open(os.path.join(REPO, 'projects', 'published', 'runs', name, 'alignment.json')))
    assert alignment.to_json() == committed


@pytest.mark.parametrize('protocol', [2, 3, 4, 5])
def test_llm4ed_contexts_are_read_without_unpickling(tmp_path, sample_examples, monkeypatch, protocol):
    """The .npy's pickle is parsed opcode by opcode: with every unpickling entry point broken the
    contexts still come out, the same as numpy's own (unpickling) reader gives them."""
    import pickle

    import numpy as np

    path = write_llm4ed(tmp_path / 'a', sample_examples[:4])
    npy = tmp_path / 'a' / 'data' / 'ED' / 'sys_dialog_texts.test.npy'
    contexts = np.empty(4, dtype=object)
    for i, example in enumerate(sample_examples[:4]):
        contexts[i] = list(example.context_utterances) + ['caf\u00e9 _comma_ \u2019quoted\u2019']
    with open(npy, 'wb') as f:
        np.lib.format.write_array_header_1_0(f, {'descr': '|O', 'fortran_order': False, 'shape': (4,)})
        pickle.dump(contexts, f, protocol=protocol)
    expected = [tuple(c) for c in np.load(npy, allow_pickle=True)]

    def refuse(*args, **kwargs):
        raise AssertionError('unpickled')

    for name in ('Unpickler', 'load', 'loads', '_Unpickler', '_load', '_loads'):
        monkeypatch.setattr(pickle, name, refuse, raising=False)
    assert [o.context for o in read_released(path, 'llm4ed-stage1')] == expected


def test_llm4ed_contexts_that_are_not_lists_of_strings_are_refused_unbuilt(tmp_path, sample_examples):
    import pickle

    import numpy as np

    path = write_llm4ed(tmp_path / 'a', sample_examples[:2])
    npy = tmp_path / 'a' / 'data' / 'ED' / 'sys_dialog_texts.test.npy'

    def write(items, header_shape=(2,)):
        array = np.empty(len(items), dtype=object)
        for i, item in enumerate(items):
            array[i] = item
        with open(npy, 'wb') as f:
            np.lib.format.write_array_header_1_0(f, {'descr': '|O', 'fortran_order': False, 'shape': header_shape})
            pickle.dump(array, f, protocol=3)

    write([['hi'], {'a': 1}])  # a dict: an opcode an array of strings never holds
    with pytest.raises(ReleasedFormatError, match=r"field 'array': not an array of lists of strings \(pickle opcode"):
        read_released(path, 'llm4ed-stage1')
    write([['hi'], 3])
    with pytest.raises(ReleasedFormatError, match=r"line 1, field 'item 2': not a non-empty list of strings"):
        read_released(path, 'llm4ed-stage1')
    write([['hi'], ['a'], ['b']])
    with pytest.raises(ReleasedFormatError, match=r'not the array the header announces'):
        read_released(path, 'llm4ed-stage1')
    with open(npy, 'wb') as f:  # a truncated pickle
        np.lib.format.write_array_header_1_0(f, {'descr': '|O', 'fortran_order': False, 'shape': (2,)})
        f.write(pickle.dumps(np.array([['x'], ['y']], dtype=object), protocol=3)[:40])
    with pytest.raises(ReleasedFormatError, match=r"field 'array'"):
        read_released(path, 'llm4ed-stage1')
