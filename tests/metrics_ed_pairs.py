"""Real ED test listener responses for the metric tests (imported by tests/test_metrics_*.py).

The "model" answers every example with the gold response of the previous example: real
responses, unrelated to the context, so every metric gets a meaningful non-trivial value.
"""

import os

import pytest

from parlai_empathy.data.ed_raw import read_faithful


def listener_turns(ed_dir):
    """(context utterance, gold listener response, emotion) per ED test example, ParlAI's order."""
    turns = []
    for conv in read_faithful(os.path.join(ed_dir, 'test.csv')):
        for prev, utt in zip(conv.utterances, conv.utterances[1:]):
            if utt.utterance_idx % 2 == 0:
                turns.append((prev.text, utt.text.strip(), conv.emotion))
    return turns


@pytest.fixture(scope='session')
def ed_shifted_pairs(ed_dir):
    """(golds, responses) with responses = golds shifted by one example."""
    golds = [gold for _, gold, _ in listener_turns(ed_dir)]
    return golds, golds[-1:] + golds[:-1]
