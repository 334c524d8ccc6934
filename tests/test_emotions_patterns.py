"""Interaction patterns, pattern subsets and the empathy_ed_patterns teacher on real ED train.

The tags come from a transparent keyword rule (written in the real cache format) instead of a
trained classifier, so the expected transitions are known: Speakers who say "sorry"/"sad" words
get 'sadness', Listeners who answer "sorry" get 'caring', and so on.
"""

import json
import os

import numpy as np
import pytest

from parlai_empathy.emotions import patterns, subsets, tag_cache
from parlai_empathy.emotions.patterns import PatternParams

RULES = {
    'sadness': ('sad', 'lost', 'died', 'cry', 'miss'),
    'caring': ('sorry', 'hope', 'hug'),
    'curiosity': ('?',),
    'joy': ('happy', 'great', 'awesome', 'fun'),
    'gratitude': ('thank',),
    'fear': ('scared', 'afraid', 'nervous'),
}
CLASSES = list(RULES) + ['neutral']


@pytest.fixture(scope='module')
def rule_tags(ed_dir, tmp_path_factory):
    utterances = tag_cache.ed_utterances(ed_dir, ('train', 'valid', 'test'))
    probs = np.full((len(utterances), len(CLASSES)), 0.05, dtype=np.float32)
    for row, u in enumerate(utterances):
        text = u.text.lower()
        hit = False
        for col, (_label, words) in enumerate(RULES.items()):
            if any(w in text for w in words):
                probs[row, col], hit = 0.9, True
        if not hit:
            probs[row, -1] = 0.9
    root = str(tmp_path_factory.mktemp('tags'))
    classifier = {'key': 'rules-v1' + '0' * 56, 'classes': CLASSES, 'multilabel': True, 'threshold': 0.3}
    directory = tag_cache.cache_dir(root, classifier['key'], tag_cache.data_key(ed_dir))
    tag_cache.write_complete(directory, utterances, probs, classifier, tag_cache.data_key(ed_dir))
    return tag_cache.TagTable(directory)


@pytest.fixture(scope='module')
def train_pairs(rule_tags, ed_dir):
    return patterns.ed_turn_pairs(rule_tags, ed_dir, 'train')


def test_transition_statistics(train_pairs):
    assert 30000 < len(train_pairs) < 45000 and train_pairs['conv_id'].nunique() > 19000
    assert set(train_pairs['turn'] % 2) == {1}
    trans = patterns.transitions(train_pairs, CLASSES).set_index(['speaker', 'listener'])
    # counts add up: every (speaker label, listener label) of every pair
    expected = sum(len(s) * len(lst) for s, lst in zip(train_pairs['speaker_labels'], train_pairs['listener_labels']))
    assert trans['count'].sum() == expected
    sad_to_caring = trans.loc[('sadness', 'caring')]
    assert sad_to_caring['lift'] > 1.5  # "I lost my dog" -> "I'm so sorry"
    speaker_sad = sum('sadness' in s for s in train_pairs['speaker_labels'])
    assert sad_to_caring['rate'] == pytest.approx(sad_to_caring['count'] / speaker_sad)
    assert sad_to_caring['pmi'] == pytest.approx(np.log2(sad_to_caring['lift']))


def test_pattern_set_is_parametric(train_pairs):
    trans = patterns.transitions(train_pairs, CLASSES)
    loose = patterns.select_patterns(trans, PatternParams(min_lift=1.1, min_support=20))
    strict = patterns.select_patterns(trans, PatternParams(min_lift=2.0, min_support=200))
    assert len(strict) < len(loose)
    assert set(map(tuple, strict[['speaker', 'listener']].values)) <= set(
        map(tuple, loose[['speaker', 'listener']].values)
    )
    assert (loose['lift'] >= 1.1).all() and (loose['count'] >= 20).all() and 'neutral' not in set(loose['speaker'])
    with_neutral = patterns.select_patterns(trans, PatternParams(min_lift=1.1, min_support=20, exclude_neutral=False))
    assert len(with_neutral) >= len(loose)


def _pair_counts(pairs):
    """{(speaker label, listener label): pairs showing it}, counted here without the module."""
    counts = {}
    for speaker, listener in zip(pairs['speaker_labels'], pairs['listener_labels']):
        for key in {(a, b) for a in speaker for b in listener}:
            counts[key] = counts.get(key, 0) + 1
    return counts


def test_report_files(train_pairs, tmp_path):
    import pandas as pd

    params = PatternParams()
    figures = patterns.write_report(train_pairs, CLASSES, params, str(tmp_path))
    counts = _pair_counts(train_pairs)
    # transitions.csv: every (speaker, listener) with the count of pairs that show it
    written = pd.read_csv(tmp_path / 'transitions.csv')
    assert len(written) == len(CLASSES) ** 2
    rows_written = list(zip(written['speaker'], written['listener'], written['count'], written['lift']))
    assert {(a, b): n for a, b, n, _ in rows_written} == {
        (a, b): counts.get((a, b), 0) for a in CLASSES for b in CLASSES
    }
    # patterns.csv: exactly the transitions passing the thresholds, strongest lift first
    chosen = pd.read_csv(tmp_path / 'patterns.csv')
    expected = {
        (a, b)
        for a, b, n, lift in rows_written
        if lift >= params.min_lift and n >= params.min_support and 'neutral' not in (a, b)
    }
    assert set(zip(chosen.speaker, chosen.listener)) == expected and len(chosen) == figures['patterns']
    assert list(chosen['lift']) == sorted(chosen['lift'], reverse=True)
    # the lift matrix is the transitions' lift, speaker rows by listener columns
    lift = pd.read_csv(tmp_path / 'lift_matrix.csv', index_col=0)
    sad_caring = written.set_index(['speaker', 'listener']).loc[('sadness', 'caring')]
    assert list(lift.index) == list(lift.columns) == CLASSES
    assert lift.loc['sadness', 'caring'] == pytest.approx(sad_caring['lift'])
    # per ED emotion: the group's own pair count and its transitions counted within the group
    per_emotion = pd.read_csv(tmp_path / 'per_ed_emotion.csv')
    devastated = train_pairs[train_pairs['ed_emotion'] == 'devastated']
    rows = per_emotion[per_emotion['ed_emotion'] == 'devastated']
    assert 1 <= len(rows) <= 3 and (rows['pairs'] == len(devastated)).all()
    group_counts = _pair_counts(devastated)
    assert list(rows['count']) == [group_counts[key] for key in zip(rows['speaker'], rows['listener'])]
    # the summary's headline figures, recomputed from the pairs
    with_pattern = [
        any((a, b) in expected for a in s for b in lst)
        for s, lst in zip(train_pairs['speaker_labels'], train_pairs['listener_labels'])
    ]
    assert figures['pairs_with_pattern'] == pytest.approx(sum(with_pattern) / len(train_pairs))
    summary = (tmp_path / 'summary.md').read_text()
    assert f'{len(train_pairs)} turn pairs in {train_pairs["conv_id"].nunique()} conversations.' in summary
    assert f'**{len(expected)} transitions**; {sum(with_pattern) / len(train_pairs):.1%} of turn pairs' in summary
    # each heatmap a PNG of the size it is drawn at (11 x 9 inches at 110 dpi)
    for column in ('count', 'rate', 'lift'):
        with open(tmp_path / f'heatmap_{column}.png', 'rb') as f:
            head = f.read(24)
        assert head[:8] == b'\x89PNG\r\n\x1a\n'
        assert (int.from_bytes(head[16:20], 'big'), int.from_bytes(head[20:24], 'big')) == (1210, 990)


def test_subsets_fractions_disjoint_pools_and_reproducible(train_pairs, tmp_path):
    ids = sorted(set(train_pairs['conv_id']))
    params = PatternParams()
    m87 = subsets.select(train_pairs, ids, CLASSES, params, preset='p87', seed=3)
    m57 = subsets.select(train_pairs, ids, CLASSES, params, preset='p57', seed=3)
    assert m87['stats']['fraction'] == pytest.approx(0.87, abs=0.001)
    assert m57['stats']['fraction'] == pytest.approx(0.57, abs=0.001)
    assert set(m57['conv_ids']) <= set(m87['conv_ids'])  # ranked by pattern density
    assert m57['stats']['pattern_transitions_per_pair'] >= m87['stats']['pattern_transitions_per_pair']
    with_ = subsets.select(train_pairs, ids, CLASSES, params, preset='with43', seed=3)
    without = subsets.select(train_pairs, ids, CLASSES, params, preset='without43', seed=3)
    assert len(with_['conv_ids']) == len(without['conv_ids']) > 0
    assert not set(with_['conv_ids']) & set(without['conv_ids'])
    assert with_['stats']['conversations_with_pattern'] == 1.0 and without['stats']['pattern_transitions'] == 0
    # seeded: same inputs -> byte-identical manifest; another seed -> another draw
    first = subsets.write_manifest(with_, str(tmp_path / 'a'))
    again = subsets.write_manifest(
        subsets.select(train_pairs, ids, CLASSES, params, preset='with43', seed=3), str(tmp_path / 'b')
    )
    assert os.path.basename(first) == os.path.basename(again)
    assert open(first).read() == open(again).read()
    pools = with_['selection']['pool_sizes']
    size = len(with_['conv_ids'])
    assert size == min(round(0.43 * len(ids)), pools['with'], pools['without'])
    larger = 'with43' if pools['with'] > pools['without'] else 'without43'
    draw = lambda seed: subsets.select(train_pairs, ids, CLASSES, params, preset=larger, seed=seed)['conv_ids']  # noqa: E731
    assert draw(4) != draw(3)
    assert json.load(open(first))['pattern_params'] == params.as_dict()


def test_patterns_teacher_serves_the_subset(rule_tags, ed_dir, tmp_path):
    from parlai.core.params import ParlaiParser

    from parlai_empathy.tasks.ed_patterns import EDPatternsTeacher

    def teacher(datatype, *args):
        parser = ParlaiParser(True, False)
        EDPatternsTeacher.add_cmdline_args(parser)
        opt = parser.parse_args(
            [
                '-dt',
                datatype,
                '--ed-datapath',
                ed_dir,
                '--datapath',
                str(tmp_path),
                '--goemotions-tags-dir',
                rule_tags.directory,
            ]
            + list(args)
        )
        return EDPatternsTeacher(opt)

    train = teacher('train:ordered', '--pattern-subset', 'p57')
    manifests = os.listdir(os.path.join(rule_tags.directory, 'subsets'))
    assert len(manifests) == 1 and manifests[0].startswith('p57-')
    with open(os.path.join(rule_tags.directory, 'subsets', manifests[0])) as f:
        kept = set(json.load(f)['conv_ids'])
    convs = set()
    while not train.epoch_done():
        convs.add(train.act()['conv_id'])
    assert convs == kept
    valid = teacher('valid')
    # the full clean split: every Listener turn of the cleaned valid file, counted here from it
    from parlai_empathy.data import ed_raw

    conversations, _ = ed_raw.read_clean(os.path.join(ed_dir, 'valid.csv'))
    assert valid.num_examples() == sum(len(c.utterances) // 2 for c in conversations)


def test_two_reports_compared(train_pairs, tmp_path):
    """A second tagger's report beside the first: fractions, top transitions, pattern-set changes."""
    import json

    old, new = tmp_path / 'old', tmp_path / 'new'
    # the stricter set's lift: the middle pattern's, so that the weaker half is dropped
    lifts = patterns.select_patterns(patterns.transitions(train_pairs, CLASSES), PatternParams())['lift']
    assert len(lifts) >= 2
    for folder, params in ((old, PatternParams()), (new, PatternParams(min_lift=float(lifts.iloc[len(lifts) // 2])))):
        figures = patterns.write_report(train_pairs, CLASSES, params, str(folder))
        (folder / 'figures.json').write_text(json.dumps(figures))
    text = patterns.compare(str(old), str(new))
    before, after = json.loads((old / 'figures.json').read_text()), json.loads((new / 'figures.json').read_text())
    assert f'| patterns | {before["patterns"]} | {after["patterns"]} |' in text
    # the pattern sets' difference, from the two reports' patterns.csv
    import pandas as pd

    def chosen(folder):
        frame = pd.read_csv(folder / 'patterns.csv')
        return set(zip(frame.speaker, frame.listener))

    gone, new_set = chosen(old) - chosen(new), chosen(new) - chosen(old)
    assert gone and not new_set  # a stricter lift only drops transitions
    assert f'Pattern set: {len(chosen(old) & chosen(new))} transitions in both, {len(gone)} gone, 0 new.' in text
    assert '- gone: ' + ', '.join(f'{s} -> {t}' for s, t in sorted(gone)) in text.splitlines()
    # rank 1 of the most frequent transitions: the largest non-neutral count, the same in both
    counts = {k: v for k, v in _pair_counts(train_pairs).items() if 'neutral' not in k}
    (speaker, listener), count = max(counts.items(), key=lambda item: item[1])
    trans = pd.read_csv(old / 'transitions.csv').set_index(['speaker', 'listener'])
    lift = f'{trans.loc[(speaker, listener), "lift"]:.2f}'
    assert f'| 1 | {speaker} -> {listener} | {count} | {lift} | {speaker} -> {listener} | {count} | {lift} |' in text


def test_min_lift_auto_is_the_lowest_grid_lift_leaving_43_percent_without(train_pairs, rule_tags, ed_dir, tmp_path):
    """``--pattern-min-lift auto``: the lowest grid lift with <= 57% of conversations showing a
    pattern; the teacher's subsets and the manifest use the resolved number."""
    from parlai.core.params import ParlaiParser

    from parlai_empathy.tasks.ed_patterns import EDPatternsTeacher, pattern_params

    base = PatternParams()
    lift, sweep = patterns.resolve_min_lift(train_pairs, CLASSES, base)
    assert list(sweep['min_lift']) == list(patterns.LIFT_GRID)
    assert (sweep['patterns'].diff().dropna() <= 0).all()  # a higher lift never adds a pattern
    row = sweep.set_index('min_lift').loc[lift]
    assert row['conversations_with_pattern'] <= patterns.MAX_PATTERN_FRACTION
    lower = sweep[sweep['min_lift'] < lift]
    assert lower.empty or lower['conversations_with_pattern'].iloc[-1] > patterns.MAX_PATTERN_FRACTION
    # the same figure from the report at that lift
    figures = patterns.write_report(train_pairs, CLASSES, PatternParams(min_lift=lift), str(tmp_path / 'r'))
    assert figures['conversations_with_pattern'] == pytest.approx(row['conversations_with_pattern'])
    with pytest.raises(ValueError, match='pattern-min-lift'):
        patterns.resolve_min_lift(train_pairs, CLASSES, base, max_fraction=0.0, grid=(1.0,))

    parser = ParlaiParser(True, False)
    EDPatternsTeacher.add_cmdline_args(parser)
    args = [
        '-dt',
        'train:ordered',
        '--ed-datapath',
        ed_dir,
        '--datapath',
        str(tmp_path),
        '--goemotions-tags-dir',
        rule_tags.directory,
    ]
    opt = parser.parse_args(args)
    assert opt['pattern_min_lift'] == 'auto'
    assert pattern_params(opt, train_pairs, CLASSES).min_lift == lift
    with pytest.raises(ValueError, match='needs the train turn pairs'):
        pattern_params(opt)
    assert pattern_params(parser.parse_args(args + ['--pattern-min-lift', '1.5'])).min_lift == 1.5
    with pytest.raises(SystemExit):
        parser.parse_args(args + ['--pattern-min-lift', 'high'])
