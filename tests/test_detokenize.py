"""Generated replies reach the metric suite as plain text, like the gold responses."""

import csv
import os

from parlai_empathy.agents.detokenize import detokenize


def test_undoes_the_re_tokenizer_spacing():
    assert detokenize("I ' m so sorry to hear that .") == "I'm so sorry to hear that."
    assert detokenize("that ' s great ! did you win ?") == "that's great! did you win?"
    assert detokenize('my co - worker and / or me') == 'my co-worker and/or me'
    assert detokenize("well . . . i don ' t know , ( maybe ) .") == "well... i don't know, (maybe)."
    assert detokenize('') == ''


def test_round_trip_on_real_ed_listener_responses(ed_dir):
    """ParlAI's own tokenizer, then detokenize: nearly every real response comes back verbatim."""
    from parlai.core.dict import DictionaryAgent

    responses = []
    with open(os.path.join(ed_dir, 'valid.csv'), encoding='utf-8') as f:
        for row in csv.DictReader(f):
            if int(row['utterance_idx']) % 2 == 0:
                responses.append(row['utterance'].replace('_comma_', ','))
            if len(responses) == 2000:
                break
    same = sum(detokenize(' '.join(DictionaryAgent.re_tokenize(r))) == ' '.join(r.split()) for r in responses)
    assert same / len(responses) > 0.9
