"""The bridge from our items to ParlAI's crowdsourcing inputs, in process (no Mephisto needed).

Released outputs of another paper take part as ``empathy_score --released`` aligns them: a file in
MoEL's released format is written from the embedded ED sample's test examples (with one reply to
a conversation that is not in ED, which must be dropped), and put beside a committed-outputs
style file of our own.
"""

import gzip
import json

import pytest

from parlai_empathy.data import ed_source
from parlai_empathy.humaneval.crowd import bridge
from parlai_empathy.humaneval.inputs import InputError
from parlai_empathy.metrics import alignment


@pytest.fixture(scope='module')
def examples():
    return alignment.ed_test_examples(ed_source.resolve_ed_dir('sample'))


def _moel_file(path, examples, extra_unmatched=True):
    blocks = [
        f'Emotion:{e.emotion}\nContext:{list(e.context_utterances)!r}\nmoe:reply to {e.conv_id}\nref:{e.label}\n'
        for e in examples
    ]
    if extra_unmatched:
        blocks.append("Emotion:sad\nContext:['a conversation ED never had']\nmoe:hm\nref:nothing\n")
    path.write_text('\n'.join(blocks), encoding='utf-8')
    return path


def _outputs_file(path, examples):
    with gzip.open(path, 'wt', encoding='utf-8') as f:
        for e in examples:
            f.write(json.dumps({'id': alignment.example_id(e), 'gold': e.label, 'reply': 'ours'}) + '\n')
    return path


def test_released_outputs_join_the_items_they_align_with(tmp_path, examples):
    released = _moel_file(tmp_path / 'generation_result.txt', examples[:30])
    (tmp_path / 'row').mkdir()
    ours = _outputs_file(tmp_path / 'row' / 'outputs.jsonl.gz', examples[10:50])
    built = bridge.build(
        str(tmp_path / 'in'),
        outputs=[f'ours={ours}'],
        released=[f'moel={released}'],
        ed_datapath='sample',
        onboarding=2,
        seed=3,
    )
    assert built.models == ['ours', 'moel'] and built.shared == 20  # examples 10..29
    assert built.dropped == {'ours': 20, 'moel': 10}
    rows = [json.loads(line) for line in open(built.paths[bridge.PAIRINGS], encoding='utf-8')]
    assert len(rows) == 20 + 2 and sum(r['is_onboarding'] for r in rows) == 2
    for row in rows:
        if row['is_onboarding']:
            assert row['correct_answer'] == bridge.GOLD and row['speakers_to_eval'] == [bridge.GOLD, bridge.MISMATCH]
            continue
        replies = {d['speakers'][-1]: d['dialogue'][-1]['text'] for d in row['dialogue_dicts']}
        conv = row['dialogue_ids'][0].split('#')[0]
        assert replies == {'ours': 'ours', 'moel': f'reply to {conv}'}
    manifest = json.loads(open(built.paths[bridge.MANIFEST]).read())
    assert manifest['sources']['released'] == [f'moel={released}']


def test_turn_annotation_data_keeps_every_turn_once_in_order_and_the_reply_last(tmp_path, examples):
    ours = _outputs_file(tmp_path / 'a.jsonl.gz', examples[:12])
    other = _outputs_file(tmp_path / 'b.jsonl.gz', examples[:12])
    built = bridge.build(
        str(tmp_path / 'in'), outputs=[f'a={ours}', f'b={other}'], ed_datapath='sample', annotate='b', onboarding=0
    )
    by_id = {f'{e.conv_id}#{e.turn}': e for e in examples}
    lines = [json.loads(line) for line in open(built.paths[bridge.TURNS], encoding='utf-8')]
    assert len(lines) + built.not_alternating == 12 and lines
    for line in lines:
        turns = [t for pair in line['dialog'] for t in pair]
        meta = turns[-1]['other_metadata']
        example = by_id[meta['item_id']]
        assert meta['model'] == 'b' and turns[-1]['text'] == 'ours'
        assert [t['text'] for t in turns[:-1]] == list(example.context_utterances)
        assert [t['id'] for t in turns] == ['Speaker', 'Listener'] * (len(turns) // 2)
    practice = json.loads(open(built.paths[bridge.TURNS_ONBOARDING]).read())
    assert sorted(a['relevance'] for a in practice['answers']) == [False, True]
    for conversation in practice['conversations']:
        assert [u['do_annotate'] for u in conversation] == [False] * (len(conversation) - 1) + [True]


def test_a_released_name_it_does_not_know_or_a_file_that_aligns_nowhere_is_refused(tmp_path, examples):
    ours = _outputs_file(tmp_path / 'a.jsonl.gz', examples[:5])
    with pytest.raises(InputError, match='--released nobody: not a released file this package knows'):
        bridge.build(str(tmp_path / 'in'), outputs=[f'a={ours}'], released=['nobody=x'], ed_datapath='sample')
    stranger = tmp_path / 'stranger.txt'
    stranger.write_text("Emotion:sad\nContext:['never said in ED']\nmoe:hm\nref:no\n", encoding='utf-8')
    with pytest.raises(InputError, match='none of its outputs matched an ED test example'):
        bridge.build(str(tmp_path / 'in'), outputs=[f'a={ours}'], released=[f'moel={stranger}'], ed_datapath='sample')
