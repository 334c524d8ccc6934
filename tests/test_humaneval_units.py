"""Human evaluation: inputs, sampling, assignment, votes, kappa, DB rules and analysis."""

import json
import os
import random
import statistics

import numpy as np
import pandas as pd
import pytest

from humaneval_helpers import REPO, cached_world_logs
from parlai_empathy.humaneval import analysis, inputs, sampling, votes
from parlai_empathy.humaneval.build import build_task
from parlai_empathy.humaneval.db import TaskError


@pytest.fixture(scope='module')
def logs(tmp_path_factory):
    return cached_world_logs(tmp_path_factory)


# -- inputs ----------------------------------------------------------------------------------
def test_world_log_parsing_matches_parlai_output(logs):
    gold = inputs.read_world_log(logs['gold'])
    echo = inputs.read_world_log(logs['echo'])
    assert gold.model == 'gold' and len(gold.items) == 5259  # ParlAI's ED test count
    items, names = inputs.align([gold, echo])
    assert names == ['gold', 'echo'] and len(items) == 5259
    assert all(gold.responses[k] == items[k].gold for k in items)  # repeat_label = reference
    first = next(i for i in items.values() if i.context[0][1].startswith('Yeah about 10 years'))
    assert first.emotion == 'guilty' and first.gold == 'Did you suffer any injuries?'
    assert echo.responses[first.item_id] == first.context[-1][1]  # repeat_query parrots
    second = next(i for i in items.values() if i.gold.startswith('Why did you feel guilty'))
    assert [r for r, _ in second.context] == ['speaker', 'listener', 'speaker']
    assert second.context[1][1] == 'Did you suffer any injuries?'
    assert len({i.emotion for i in items.values()}) == 32


def test_world_log_conv_id_fields_and_errors(tmp_path):
    teacher = {
        'id': 'empathy_ed',
        'text': 'I lost my job.',
        'eval_labels': ['Oh no!'],
        'emotion': 'sad',
        'conv_id': 'hit:1_conv:2',
        'turn': 0,
        'episode_done': True,
    }
    good = tmp_path / 'm.jsonl'
    good.write_text(json.dumps({'dialog': [[teacher, {'id': 'm', 'text': 'Sorry.'}]]}) + '\n')
    out = inputs.read_world_log(str(good))
    assert list(out.items) == ['hit:1_conv:2#0'] and out.responses['hit:1_conv:2#0'] == 'Sorry.'
    bad = tmp_path / 'bad.jsonl'
    bad.write_text(
        json.dumps({'dialog': [[teacher, {'id': 'm', 'text': 'x'}]]})
        + '\n'
        + json.dumps({'dialog': [[{'id': 't', 'text': 'hi'}, {'text': 'x'}]]})
        + '\n'
    )
    with pytest.raises(
        inputs.InputError,
        match=r"bad.jsonl:2: 'dialog'\[0\] teacher message has "
        "no 'eval_labels'",
    ):
        inputs.read_world_log(str(bad))
    bad.write_text('{"dialog": 3}\n')
    with pytest.raises(inputs.InputError, match="bad.jsonl:1: field 'dialog'"):
        inputs.read_world_log(str(bad))


# Every shape of world log the project's teachers and ParlAI's own write, from real eval_model
# runs (repeat_label: the log's shape depends on the teacher, not on the model):
# name -> eval_model arguments, and whether to drop our teachers' extra fields afterwards
SHAPES = {
    'episodes': (['-t', 'empathy_ed_clean', '--ed-history-length', '0'], False),
    'flat_mime': (['-t', 'empathy_ed_clean', '--ed-history-length', '1000'], False),
    'flat_ed_paper': (['-t', 'empathy_ed_clean', '--ed-history-length', '4'], False),
    'episodes_bare': (['-t', 'empathy_ed_clean', '--ed-history-length', '0'], True),
    'flat_bare': (['-t', 'empathy_ed_clean', '--ed-history-length', '1000'], True),
    'train_both_sides': (['-t', 'empathy_ed_clean', '-dt', 'train:evalmode'], False),
    'parlai_ed': (['-t', 'empathetic_dialogues'], False),
}
EXTRA_FIELDS = ('context_utterances', 'context_roles', 'conv_id', 'turn', 'label_role')


@pytest.fixture(scope='module')
def shaped_logs(tmp_path_factory):
    """{shape: world log path}, each written by ParlAI's eval_model on the embedded ED sample."""
    import parlai.core.build_data as build_data
    from parlai.scripts.eval_model import EvalModel

    from parlai_empathy.data import ed_source

    root = tmp_path_factory.mktemp('shaped_logs')
    datapath = root / 'parlai_data'
    ed = datapath / 'empatheticdialogues'
    (ed / 'empatheticdialogues').mkdir(parents=True)
    for split in ('train', 'valid', 'test'):  # ParlAI's own ED teacher on the same sample
        (ed / 'empatheticdialogues' / f'{split}.csv').symlink_to(os.path.join(ed_source.sample_dir(), f'{split}.csv'))
    build_data.mark_done(str(ed), version_string='1.0')
    paths = {}
    for shape, (args, bare) in SHAPES.items():
        path = str(root / f'{shape}.jsonl')
        ours = ['--ed-datapath', 'sample'] if args[1].startswith('empathy_') else []
        dt = [] if '-dt' in args else ['-dt', 'test']
        EvalModel.main('-m', 'repeat_label', '--datapath', str(datapath), '--world-logs', path, *ours, *dt, *args)
        if bare:
            rows = [json.loads(line) for line in open(path, encoding='utf-8')]
            for row in rows:
                for teacher, _reply in row['dialog']:
                    for key in EXTRA_FIELDS:
                        teacher.pop(key, None)
            with open(path, 'w', encoding='utf-8') as f:
                f.writelines(json.dumps(row) + '\n' for row in rows)
        paths[shape] = path
    return paths


def _conversations_so_far(split, datapath):
    """{(first turn, gold reply), normalised: [(role, normalised text), ...]}: each Listener
    reply's context as the data has it, read straight from the teacher."""
    from conftest import ed_teacher_examples
    from parlai_empathy.tasks.ed import CleanTeacher

    def norm(text):  # ParlAI's own teacher keeps the doubled spaces our cleaned one removes
        return ' '.join(text.split())

    examples = ed_teacher_examples(CleanTeacher, split, datapath, '--ed-datapath', 'sample')
    truth = {}
    for m in examples:
        if m['label_role'] == 'listener':
            gold = (m.get('labels') or m['eval_labels'])[0]
            key = (norm(m['context_utterances'][0]), norm(gold))
            truth[key] = [(r, norm(u)) for r, u in zip(m['context_roles'], m['context_utterances'])]
    return norm, truth


@pytest.mark.parametrize('shape', list(SHAPES))
def test_world_log_context_shows_each_turn_once_in_order_with_its_role(shaped_logs, shape, tmp_path):
    args = SHAPES[shape][0]
    norm, truth = _conversations_so_far('train' if 'train:evalmode' in args else 'test', tmp_path)
    out = inputs.read_world_log(shaped_logs[shape])
    assert len(out.items) == len(truth)  # one item per Listener reply, the Speaker's skipped
    for item in out.items.values():
        key = (norm(item.context[0][1]), norm(item.gold))
        assert [(r, norm(t)) for r, t in item.context] == truth[key], item.item_id
        assert out.responses[item.item_id] == item.gold  # repeat_label
    assert any(len(i.context) >= 5 for i in out.items.values())


def test_world_log_context_fields_are_checked(shaped_logs, tmp_path):
    row = json.loads(open(shaped_logs['flat_mime'], encoding='utf-8').readline())
    teacher = row['dialog'][0][0]
    cases = [
        (
            'context_roles',
            ['speaker'] * (len(teacher['context_utterances']) + 1),
            "'context_roles' must give 'speaker' or 'listener' for each of",
        ),
        ('context_utterances', [], "'context_utterances' must be a non-empty list"),
        ('text', 'something else', "'text' does not end with the last of its 'context_utterances'"),
    ]
    for key, value, message in cases:
        bad = json.loads(json.dumps(row))
        bad['dialog'][0][0][key] = value
        path = tmp_path / 'bad.jsonl'
        path.write_text('\n' + json.dumps(bad) + '\n')
        with pytest.raises(
            inputs.InputError, match=r"bad.jsonl:2: 'dialog'\[0\] teacher field " + message.replace('[', r'\[')
        ):
            inputs.read_world_log(str(path))


def test_world_log_without_generated_replies_says_how_to_fix_it(tmp_path):
    # what eval_model --world-logs writes for a generator whose saved options say
    # skip_generation true: the reply carries metrics and readouts, no text
    teacher = {
        'text': 'I lost my job.',
        'eval_labels': ['Oh no!'],
        'emotion': 'sad',
        'conv_id': 'hit:1_conv:2',
        'turn': 2,
        'episode_done': True,
    }
    reply = {'id': 'Mime', 'episode_done': False, 'predicted_emotion': 'sad', 'metrics': {'ppl': 3.0}}
    path = tmp_path / 'mime_test.jsonl'
    path.write_text(json.dumps({'dialog': [[teacher, reply]]}) + '\n')
    with pytest.raises(inputs.InputError) as err:
        inputs.read_world_log(str(path))
    message = str(err.value)
    assert '\n' not in message
    assert message.startswith(
        f"{path}:1: 'dialog'[0] model message (Mime) has no 'text': the log holds no generated replies"
    )
    assert message.endswith('rerun parlai eval_model with --skip-generation false')


# -- committed rows' outputs ------------------------------------------------------------------
def _outputs_of(world_log, path):
    """The outputs.jsonl.gz the leaderboard writes from this world log (its own functions)."""
    from parlai_empathy.evidence import artifacts as evidence
    from parlai_empathy.leaderboard.worldlogs import generation_rows

    evidence.write_outputs(str(path), generation_rows(world_log))
    return str(path)


@pytest.mark.parametrize('shape', ['flat_mime', 'episodes'])
def test_committed_outputs_give_the_items_and_replies_of_their_world_log(shaped_logs, shape, tmp_path):
    from parlai_empathy.data import ed_source

    log = inputs.read_world_log(shaped_logs[shape])
    row_dir = tmp_path / 'runs' / 'echo_row'
    row_dir.mkdir(parents=True)
    items = inputs.ed_items(ed_source.sample_dir())
    out = inputs.read_outputs(_outputs_of(shaped_logs[shape], row_dir / 'outputs.jsonl.gz'), items)
    assert out.model == 'echo_row'  # the row's folder
    assert out.items == log.items and out.responses == log.responses
    assert list(items) and set(items) == set(log.items)


def test_the_mime_rows_committed_outputs_are_its_replies_to_the_cleaned_ed_test(ed_dir):
    items = inputs.ed_items(ed_dir)
    path = os.path.join(REPO, 'projects', 'majumder2020_mime', 'runs', 'mime', 'outputs.jsonl.gz')
    out = inputs.read_outputs(path, items)
    assert out.model == 'mime' and len(out.items) == len(items) == 5259
    first = out.items['hit:0_conv:0#2']
    assert first.emotion == 'guilty' and first.gold == 'Did you suffer any injuries?'
    assert [r for r, _ in out.items['hit:0_conv:0#4'].context] == ['speaker', 'listener', 'speaker']
    assert out.responses['hit:0_conv:0#2'] == 'i am sorry to hear that. what happened?'


def test_committed_outputs_that_are_not_a_rows_replies_to_the_split_are_refused(shaped_logs, tmp_path):
    import gzip

    from parlai_empathy.data import ed_source

    items = inputs.ed_items(ed_source.sample_dir())
    good = _outputs_of(shaped_logs['flat_mime'], tmp_path / 'good.jsonl.gz')
    rows = [json.loads(line) for line in gzip.open(good, 'rt', encoding='utf-8')]
    first = json.dumps(rows[0])

    def gz(name, lines):
        path = tmp_path / name
        with gzip.open(path, 'wb') as f:
            f.write(lines if isinstance(lines, bytes) else '\n'.join(lines).encode('utf-8'))
        return str(path)

    def changed(**fields):
        return json.dumps({**rows[0], **fields})

    cases = [
        (gz('json.gz', [first, '{"id": ']), ':2: not valid JSON'),
        (gz('list.gz', ['[1, 2]']), ':1: a row must be a JSON object'),
        (gz('noid.gz', [json.dumps({'gold': 'x', 'reply': 'y'})]), ":1: field 'id' missing or not a string"),
        (gz('reply.gz', [changed(reply=7)]), ":1: field 'reply' missing or not a string"),
        (
            gz('other.gz', [first, changed(id='hit:9_conv:9/2')]),
            ":2: 'id' 'hit:9_conv:9/2' is no Listener reply of the cleaned ED split",
        ),
        (gz('speaker.gz', [changed(id=rows[0]['id'].rsplit('/', 1)[0] + '/1')]), ":1: 'id' .*/1' is no Listener reply"),
        (gz('gold.gz', [changed(gold='Something else.')]), ":1: 'gold' of .* is not the cleaned ED split's reply"),
        (gz('twice.gz', [first, first]), ":2: repeats 'id'"),
        (gz('utf8.gz', b'{"id": "\xff"}\n'), ':1: not UTF-8'),
        (gz('deep.gz', ['[' * 30000 + ']' * 30000]), ':1: nested deeper than the cap of 64'),
        # a gzip bomb (16 MB in one line from a 16 kB file) is inflated no further than the line cap
        (gz('bomb.gz', b'{"id": "' + b'a' * (1 << 24)), ':1: no line break within the cap of 16,777,216'),
        (gz('empty.gz', b''), 'no rows found'),
    ]
    plain = tmp_path / 'plain.jsonl.gz'
    plain.write_text(first + '\n')
    cases.append((str(plain), ':1: not a gzip file'))
    cut = tmp_path / 'cut.jsonl.gz'
    cut.write_bytes(open(good, 'rb').read()[:-20])
    cases.append((str(cut), ': not a gzip file, or a damaged one'))
    for path, message in cases:
        with pytest.raises(inputs.InputError, match=message) as err:
            inputs.read_outputs(path, items)
        assert str(err.value).startswith(path) and '\n' not in str(err.value), path


def test_pairings_roundtrip_and_units(logs, tmp_path):
    build_task(
        str(tmp_path / 'ab.db'),
        'ab',
        [logs['gold'], logs['echo']],
        num_items=6,
        acute_pairings_out=str(tmp_path / 'pairs.jsonl'),
    )
    pairs = inputs.read_pairings(str(tmp_path / 'pairs.jsonl'))
    assert len(pairs) == 6 and all(p.models == ('echo', 'gold') for p in pairs)
    assert pairs[0].dialogues[1][-1]['id'] == 'gold'
    units = sampling.ab_units_from_pairings(pairs, 3, seed=1)
    items = inputs.read_world_log(logs['gold']).items
    assert any(len(items[p.dialogue_ids[0].rsplit(':', 1)[0]].context) > 1 for p in pairs)
    for unit, pair in zip(units, pairs):
        # the shared context is shown once, with the data's roles; each candidate is that
        # model's final turn
        item = items[pair.dialogue_ids[0].rsplit(':', 1)[0]]
        assert unit.display['context'] == [list(turn) for turn in item.context]
        for model, cand in zip(unit.models, unit.display['candidates']):
            assert cand == [['listener', pair.dialogues[pair.models.index(model)][-1]['text']]]


# -- sampling and assignment -----------------------------------------------------------------
def test_stratified_sample_is_mime_4_per_emotion_and_seeded(logs):
    items = inputs.read_world_log(logs['gold']).items
    chosen = sampling.stratified_sample(items, 4, seed=3)
    assert len(chosen) == 128 == len(set(chosen))
    per = pd.Series([items[i].emotion for i in chosen]).value_counts()
    assert len(per) == 32 and set(per) == {4}
    assert chosen == sampling.stratified_sample(items, 4, seed=3)
    assert chosen != sampling.stratified_sample(items, 4, seed=4)
    with pytest.raises(ValueError, match='has only'):
        sampling.stratified_sample(dict(list(items.items())[:50]), 4, seed=0)


def test_ab_sides_are_randomised_and_reproducible(logs):
    items = inputs.read_world_log(logs['gold']).items
    responses = {'gold': {k: i.gold for k, i in items.items()}, 'echo': {k: 'e' for k in items}}
    selected = sampling.uniform_sample(items, 200, seed=0)
    units = sampling.ab_units(items, responses, selected, [('echo', 'gold')], 3, seed=5)
    first_gold = sum(u.models[0] == 'gold' for u in units)
    assert 70 < first_gold < 130  # about half each way
    again = sampling.ab_units(items, responses, selected, [('echo', 'gold')], 3, seed=5)
    assert [u.models for u in units] == [u.models for u in again]
    for u in units:  # the candidate text follows the side the model was put on
        assert u.display['candidates'][u.models.index('gold')][0][1] == items[u.item_id].gold


def test_plan_assignment_rules():
    open_units = [sampling.OpenUnit(i, f'item{i % 5}', remaining=1 + (i == 7)) for i in range(10)]
    checks = [sampling.OpenUnit(100 + i, f'item{i}' if i < 3 else f'other{i}', 1) for i in range(5)]
    plan = sampling.plan_assignment(random.Random(0), open_units, checks, {'item3'}, 4, 1)
    eval_ids = [u for u in plan if u < 100]
    items_of = {u.unit_id: u.item_id for u in open_units + checks}
    assert len(eval_ids) == 4 and 7 in eval_ids  # neediest unit first
    assert len({items_of[u] for u in plan}) == len(plan) == 5  # no item twice, check included
    assert 'item3' not in {items_of[u] for u in plan}  # never an item seen before
    assert plan[0] < 100  # a check never opens the assignment
    assert sampling.plan_assignment(random.Random(0), open_units, checks, {f'item{i}' for i in range(5)}, 4, 1) == []


# -- votes and agreement ---------------------------------------------------------------------
def test_majority_vote_and_fourth_annotator_rule():
    assert votes.majority_vote(['a', 'a', 'b']) == 'a'
    assert votes.majority_vote(['tie', 'b', 'tie']) == 'tie'
    assert not votes.needs_extra_annotator(['a', 'a', 'b'])
    assert votes.needs_extra_annotator(['a', 'b', 'tie'])
    assert votes.majority_vote(['a', 'b', 'tie']) is None
    assert votes.majority_vote(['a', 'b', 'tie', 'b']) == 'b'
    assert votes.majority_vote(['a', 'a', 'b', 'b']) == 'a'  # a 4th vote cannot flip a majority
    assert votes.majority_vote(['a', 'b']) is None and votes.majority_vote(['a']) == 'a'


def test_cohen_kappa_hand_worked():
    # 10 items, 2 raters. Agree on 7 (4 yes/yes, 3 no/no): p_o = 0.7.
    # Rater 1 says yes 6 times, rater 2 yes 5 times: p_e = .6*.5 + .4*.5 = 0.5.
    # kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4
    r1 = ['y', 'y', 'y', 'y', 'y', 'y', 'n', 'n', 'n', 'n']
    r2 = ['y', 'y', 'y', 'y', 'n', 'n', 'y', 'n', 'n', 'n']
    assert analysis.cohen_kappa(r1, r2) == pytest.approx(0.4)
    assert analysis.cohen_kappa(r1, r1) == pytest.approx(1.0)


def test_weighted_cohen_kappa_for_likert_hand_worked():
    # 5 items rated 1..5; the raters swap the top two. Unweighted: p_o = 3/5, every marginal is
    # 1/5 so p_e = 5/25 -> (0.6 - 0.2) / 0.8 = 0.5. Quadratic weights w = (i - j)^2: observed
    # disagreement 1 + 1 = 2; expected 1/5 of the sum of (i - j)^2 over the 5 x 5 grid (100) = 20
    # -> 1 - 2/20 = 0.9: two adjacent swaps are a small disagreement on an ordinal scale.
    r1, r2 = [1, 2, 3, 4, 5], [1, 2, 3, 5, 4]
    assert analysis.cohen_kappa(r1, r2) == pytest.approx(0.5)
    assert analysis.cohen_kappa(r1, r2, **analysis.LIKERT_KAPPA) == pytest.approx(0.9)
    # labels fix the scale: a pair of raters who only used 4 and 5 is still judged on 1..5
    assert analysis.cohen_kappa([4, 5, 5], [5, 5, 4], **analysis.LIKERT_KAPPA) == pytest.approx(
        analysis.cohen_kappa([4, 5, 5], [5, 5, 4], weights='quadratic', labels=[1, 2, 3, 4, 5])
    )
    assert np.isnan(analysis.cohen_kappa(['A', 'A'], ['A', 'A']))  # chance agreement is total


def test_krippendorff_alpha_hand_worked():
    # 3 units rated by 2, 2 and 3 raters (values 1..3); a 4th unit rated once adds nothing.
    # Coincidences (a pair of values in a unit of m values counts 1/(m - 1)): o11 = 2 (unit 1),
    # o13 = o31 = 1 (unit 2), o33 = o23 = o32 = 1 (unit 3); n = 7, n1 = 3, n2 = 1, n3 = 3.
    # nominal: 1 - (n - 1) * 4 / (2 * (3*1 + 3*3 + 1*3)) = 1 - 24/30 = 0.2
    # interval (squared differences): observed 4 + 4 + 1 + 1 = 10, expected 2 * (3*1*1 + 3*3*4
    # + 1*3*1) = 84 -> 1 - 6 * 10 / 84 = 2/7
    ratings = [
        ('a', 'u1', 1),
        ('b', 'u1', 1),
        ('a', 'u2', 1),
        ('c', 'u2', 3),
        ('a', 'u3', 2),
        ('b', 'u3', 3),
        ('c', 'u3', 3),
        ('a', 'u4', 2),
    ]
    assert analysis.krippendorff_alpha(ratings) == pytest.approx(0.2)
    assert analysis.krippendorff_alpha(ratings, 'interval') == pytest.approx(2 / 7)
    # Krippendorff's own worked example ("Computing Krippendorff's Alpha-Reliability", 2011):
    # 4 observers, 12 units, missing values; nominal 0.743, interval 0.849
    table = {
        'A': [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
        'B': [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
        'C': [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
        'D': [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
    }
    paper = [(rater, unit, v) for rater, values in table.items() for unit, v in enumerate(values) if v is not None]
    assert round(analysis.krippendorff_alpha(paper), 3) == 0.743
    assert round(analysis.krippendorff_alpha(paper, 'interval'), 3) == 0.849
    # nothing to compare, or one label only: no disagreement is expected
    assert np.isnan(analysis.krippendorff_alpha([('a', 'u', 1), ('b', 'v', 2)]))
    assert np.isnan(analysis.krippendorff_alpha([('a', 'u', 1), ('b', 'u', 1)]))


def test_agreement_counts_every_rater_of_a_unit():
    """Units with differing numbers of raters all count, with all their raters (an A/B task whose
    pairings got a fourth vote): the hand-worked nominal case above, as a rating frame."""
    rows = [
        ('a', 'u1', 'A'),
        ('b', 'u1', 'A'),
        ('a', 'u2', 'A'),
        ('c', 'u2', 'B'),
        ('a', 'u3', 'tie'),
        ('b', 'u3', 'B'),
        ('c', 'u3', 'B'),
        ('a', 'u4', 'tie'),
    ]
    frame = pd.DataFrame(
        [
            {'aspect': 'overall', 'worker_id': w, 'unit_id': u, 'winner': x, 'answer_id': i}
            for i, (w, u, x) in enumerate(rows)
        ]
    )
    row = analysis.agreement(frame, 'winner', **analysis.AB_KAPPA).iloc[0]
    assert (row['units'], row['ratings'], row['alpha_level']) == (3, 7, 'nominal')
    assert row['krippendorff_alpha'] == pytest.approx(0.2)


# -- DB rules and analysis end to end (no web) -----------------------------------------------
def _answer_all(db, worker, rate):
    """Claim, start and answer a whole assignment; ``rate(unit_models, display)`` answers."""
    aid = db.claim(worker['worker_id'])
    if aid is None:
        return None
    db.start(aid)
    conn_units = {r['slot_id']: r for r in db.slots(aid)}
    for slot in conn_units.values():
        models = json.loads(
            db._one(
                'SELECT u.models FROM slots s JOIN units u USING (unit_id) WHERE s.slot_id = ?', (slot['slot_id'],)
            )[0]
        )
        db.submit(worker['worker_id'], slot['slot_id'], rate(models, slot['display']))
    return aid


def test_ab_task_fourth_annotator_checks_and_analysis(logs, tmp_path):
    db = build_task(
        str(tmp_path / 'ab.db'),
        'ab',
        ['gold=' + logs['gold'], 'echo=' + logs['echo']],
        num_items=4,
        annotators=3,
        items_per_assignment=4,
        seed=2,
        acute_pairings_out=str(tmp_path / 'pairs.jsonl'),
    )
    side = {'choices': {'overall': 0}}
    # workers 1-2 prefer gold, worker 3 says tie; all three pass the gold-vs-mismatch checks
    prefs = ['gold', 'gold', 'tie']
    for n in range(3):
        w = db.add_worker('local')

        def rate(models, _display, pref=prefs[n]):
            if '__gold__' in models:
                return {'choices': {'overall': models.index('__gold__')}}
            if pref == 'tie':
                return {'choices': {'overall': 'tie'}}
            return {'choices': {'overall': models.index('gold')}}

        assert _answer_all(db, w, rate)
    assert [p['answered'] for p in db.progress()] == [12]
    assert db.claim(db.add_worker('local')['worker_id']) is None  # all units covered
    assert db.failed_workers() == []

    # A second task where 3 raters split A / B / tie on every unit: each unit gets a 4th rater.
    db2 = build_task(
        str(tmp_path / 'ab2.db'),
        'ab',
        ['gold=' + logs['gold'], 'echo=' + logs['echo']],
        num_items=2,
        annotators=3,
        items_per_assignment=2,
        checks_per_assignment=0,
    )
    for pref in ('gold', 'echo', 'tie'):
        _answer_all(
            db2,
            db2.add_worker('local'),
            lambda m, _d, p=pref: {'choices': {'overall': 'tie' if p == 'tie' else m.index(p)}},
        )
    assert sum(p['wanted'] for p in db2.progress()) == 8  # 2 units x 4
    fourth = db2.add_worker('local')
    _answer_all(db2, fourth, lambda m, _d: {'choices': {'overall': m.index('gold')}})
    table = analysis.ab_table(analysis.ab_frame(db2.answer_rows()), db2.config['models'])
    assert table.loc[0, 'Win %'] == 100.0 and table.loc[0, 'undecided'] == 0

    # Attention: a worker who picks side A always fails some gold-vs-mismatch checks.
    db3 = build_task(
        str(tmp_path / 'ab3.db'),
        'ab',
        ['gold=' + logs['gold'], 'echo=' + logs['echo']],
        num_items=10,
        annotators=1,
        items_per_assignment=5,
        checks_per_assignment=2,
    )
    bad = db3.add_worker('local')
    while _answer_all(db3, bad, lambda m, _d: side):
        pass
    rows = db3.answer_rows()
    check_rows = [r for r in rows if r['is_check']]
    expected_fail = any(r['models'][0] != '__gold__' for r in check_rows)
    assert bool(db3.failed_workers()) == expected_fail
    out = analysis.analyze(str(tmp_path / 'ab.db'), str(tmp_path / 'out'))
    result = pd.read_csv(out['csv'])
    assert result.loc[0, 'Comparison'] == 'gold vs echo'
    assert result.loc[0, 'Win %'] == 100.0 and result.loc[0, 'items'] == 4
    assert set(pd.read_csv(out['agreement'])['cohen_weights']) == {'none'}  # A/B is nominal
    acute = pd.read_csv(out['acute_overall'])
    assert len(acute) == 8 and set(acute['winner']) == {'gold'}  # ties are not ACUTE votes
    assert set(acute['matchup']) == {'echo__vs__gold'}
    pairs = inputs.read_pairings(str(tmp_path / 'pairs.jsonl'))
    assert all(pairs[i].models == ('echo', 'gold') for i in acute['pairing_id'])


def test_db_rejects_foreign_repeated_and_out_of_order_answers(logs, tmp_path):
    db = build_task(
        str(tmp_path / 'l.db'),
        'likert',
        ['gold=' + logs['gold'], 'echo=' + logs['echo']],
        num_items=3,
        annotators=1,
        items_per_assignment=3,
        checks_per_assignment=0,
    )
    w1, w2 = db.add_worker('local'), db.add_worker('local')
    a1 = db.claim(w1['worker_id'])
    slots = db.slots(a1)
    rating = {'ratings': {'empathy': 4, 'relevance': 4, 'fluency': 5}}
    with pytest.raises(TaskError) as e:
        db.submit(w2['worker_id'], slots[0]['slot_id'], rating)
    assert e.value.status == 403
    with pytest.raises(TaskError, match='in order'):
        db.submit(w1['worker_id'], slots[1]['slot_id'], rating)
    db.submit(w1['worker_id'], slots[0]['slot_id'], rating)
    with pytest.raises(TaskError, match='already answered'):
        db.submit(w1['worker_id'], slots[0]['slot_id'], dict(rating))
    assert len(db.answer_rows()) == 1
    # the same item never comes back to a worker, whichever model it is paired with
    while db.claim(w1['worker_id']) is not None:  # the open assignment first, then new ones
        aid = db.open_assignment(w1['worker_id'])['assignment_id']
        for s in db.slots(aid):
            if not s['answered']:
                db.submit(w1['worker_id'], s['slot_id'], rating)
    rows = db._all(
        'SELECT u.item_id FROM slots s JOIN assignments x USING (assignment_id) '
        'JOIN units u USING (unit_id) WHERE x.worker_id = ?',
        (w1['worker_id'],),
    )
    assert len(rows) == 3 == len({r[0] for r in rows})


def test_a_task_without_answers_is_analysed_with_every_pair_listed(logs, tmp_path):
    """What the analysis step shows before the first worker: each comparison with 0 items."""
    db = str(tmp_path / 'ab.db')
    build_task(
        db, 'ab', ['gold=' + logs['gold'], 'echo=' + logs['echo']], num_items=4, annotators=3, items_per_assignment=4
    )
    paths = analysis.analyze(db, str(tmp_path / 'out'))
    report = open(paths['markdown'], encoding='utf-8').read()
    assert '| gold vs echo | overall | – | – | – | 0 | 0 | 0 |' in report
    assert os.path.getsize(paths['plot']) > 0
    table = pd.read_csv(paths['csv'])
    assert list(table['Comparison']) == ['gold vs echo'] and table['items'].tolist() == [0]


def test_likert_analysis_mean_sem(logs, tmp_path):
    db = build_task(
        str(tmp_path / 'l.db'),
        'likert',
        ['gold=' + logs['gold'], 'echo=' + logs['echo']],
        num_items=6,
        annotators=2,
        items_per_assignment=6,
        checks_per_assignment=1,
    )
    scores = {'gold': 5, 'echo': 2}
    given = []  # gold empathy ratings as handed in

    def rate(models, _display, n):
        empathy = scores.get(models[0], 1) - (n % 2)
        if models[0] == 'gold':
            given.append(empathy)
        return {'ratings': {'empathy': empathy, 'relevance': scores.get(models[0], 1), 'fluency': 4}}

    for n in range(4):
        _answer_all(db, db.add_worker('local'), lambda m, d, n=n: rate(m, d, n))
    out = analysis.analyze(db.path, str(tmp_path / 'out'))
    table = pd.read_csv(out['csv']).set_index('Model')
    assert list(table.index) == ['gold', 'echo'] and len(given) == 12
    assert table.loc['gold', 'empathy_mean'] == pytest.approx(statistics.mean(given))
    assert table.loc['gold', 'empathy_sem'] == pytest.approx(statistics.stdev(given) / 12**0.5)
    assert table.loc['echo', 'Relevance'] == '2.00 ± 0.00' and table.loc['echo', 'ratings'] == 12
    md = open(out['markdown']).read()
    assert '| Model | Empathy | Relevance | Fluency | ratings |' in md
    assert open(out['plot'], 'rb').read(4) == b'\x89PNG'
    kappa = pd.read_csv(out['agreement']).set_index('aspect')
    # every unit rated twice; relevance follows the model alone (both raters agree), fluency is
    # always 4 (no disagreement to expect: no alpha)
    assert (kappa['ratings'] == 2 * kappa['units']).all() and set(kappa['alpha_level']) == {'interval'}
    assert kappa.loc['relevance', 'krippendorff_alpha'] == pytest.approx(1.0)
    assert np.isnan(kappa.loc['fluency', 'krippendorff_alpha'])
    assert set(kappa['cohen_weights']) == {'quadratic'}  # Likert ratings are ordinal


def test_likert_checks_need_the_relevance_aspect(logs, tmp_path):
    """Likert checks are scored on relevance: building one without it must fail up front,
    not with a KeyError when the first check is answered."""
    worlds = ['gold=' + logs['gold'], 'echo=' + logs['echo']]
    with pytest.raises(ValueError, match='--aspects.*relevance.*--checks-per-assignment 0'):
        build_task(
            str(tmp_path / 'bad.db'),
            'likert',
            worlds,
            num_items=3,
            checks_per_assignment=1,
            aspects=['empathy', 'fluency'],
        )
    db = build_task(
        str(tmp_path / 'ok.db'), 'likert', worlds, num_items=3, checks_per_assignment=0, aspects=['empathy', 'fluency']
    )
    assert db.config['aspects'] == ['empathy', 'fluency']


def test_external_ref_is_resumed_only_by_its_own_worker(logs, tmp_path):
    db = build_task(
        str(tmp_path / 'l.db'),
        'likert',
        ['gold=' + logs['gold'], 'echo=' + logs['echo']],
        num_items=4,
        annotators=2,
        items_per_assignment=2,
        checks_per_assignment=0,
    )
    owner, other = db.add_worker('mturk', 'A1'), db.add_worker('mturk', 'A2')
    first = db.claim(owner['worker_id'], 'mturk:HIT1', 'https://workersandbox.mturk.com')
    assert db.claim(owner['worker_id'], 'mturk:HIT1') == first  # the same HIT resumes
    with pytest.raises(TaskError) as e:
        db.claim(other['worker_id'], 'mturk:HIT1')
    assert e.value.status == 403 and 'another worker' in str(e.value)
    assert db.open_assignment(other['worker_id']) is None  # nothing was handed out


def test_likert_table_counts_ratings_per_aspect():
    df = pd.DataFrame(
        [
            {'model': 'gold', 'aspect': 'empathy', 'score': 5},
            {'model': 'gold', 'aspect': 'empathy', 'score': 4},
            {'model': 'gold', 'aspect': 'empathy', 'score': 3},
            {'model': 'gold', 'aspect': 'fluency', 'score': 4},  # fewer fluency ratings
            {'model': 'echo', 'aspect': 'empathy', 'score': 2},
        ]
    )
    table = analysis.likert_table(df, ['empathy', 'fluency'], ['gold', 'echo']).set_index('Model')
    assert table.loc['gold', 'empathy_n'] == 3 and table.loc['gold', 'fluency_n'] == 1
    assert table.loc['gold', 'ratings'] == 1  # the smallest count, not the last aspect's
    assert table.loc['echo', 'fluency_n'] == 0 and table.loc['echo', 'ratings'] == 0
