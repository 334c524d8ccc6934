"""The ETHREED reference's text (``--dict-tokenizer ethreed``), against tokens spaCy 3.8's English
tokenizer produced for the reference's preprocessing of real ED utterances (the embedded sample)."""

import pytest

from parlai_empathy.data.ethreed_text import ethreed_tokens, prepare

# (ED utterance, the reference pipeline's tokens: its clean(), lower(), clean_str(), then spaCy)
SPACY = [
    ('dont you feel so.. its a wonder', ['do', 'nt', 'you', 'feel', 'so', '..', 'it', 'is', 'a', 'wonder']),
    (
        'Im good, trying to understand how someone can feel like hitting a blank wall when they see the darkness',
        [
            'i',
            'm',
            'good',
            ',',
            'trying',
            'to',
            'understand',
            'how',
            'someone',
            'can',
            'feel',
            'like',
            'hitting',
            'a',
            'blank',
            'wall',
            'when',
            'they',
            'see',
            'the',
            'darkness',
        ],
    ),
    (
        'And thats something you should never do, good on you.',
        ['and', 'that', 'is', 'something', 'you', 'should', 'never', 'do', ',', 'good', 'on', 'you', '.'],
    ),
    (
        'Thats a sweet man, I hope you acknowledged his kind gesture.',
        ['that', 's', 'a', 'sweet', 'man', ',', 'i', 'hope', 'you', 'acknowledged', 'his', 'kind', 'gesture', '.'],
    ),
    ("Don't be nervous. Just be prepared.", ['do', "n't", 'be', 'nervous', '.', 'just', 'be', 'prepared', '.']),
    (
        "It's hard to stay clam. How do you do it?",
        ['it', "'s", 'hard', 'to', 'stay', 'clam', '.', 'how', 'do', 'you', 'do', 'it', '?'],
    ),
    (
        "Well pleased. You should be having brains,man!That's a tough course,i hear.",
        [
            'well',
            'pleased',
            '.',
            'you',
            'should',
            'be',
            'having',
            'brains',
            ',',
            'man',
            '!',
            'that',
            "'s",
            'a',
            'tough',
            'course',
            ',',
            'i',
            'hear',
            '.',
        ],
    ),
    (
        'Wow, that must be terrible, I cannot imagine, I lvoe christmas',
        [
            'wow',
            ',',
            'that',
            'must',
            'be',
            'terrible',
            ',',
            'i',
            'can',
            'not',
            'imagine',
            ',',
            'i',
            'lvoe',
            'christmas',
        ],
    ),
    (
        'The other night I was alone and heard a nose coming from the kitchen... it was creepy.',
        [
            'the',
            'other',
            'night',
            'i',
            'was',
            'alone',
            'and',
            'heard',
            'a',
            'nose',
            'coming',
            'from',
            'the',
            'kitchen',
            '...',
            'it',
            'was',
            'creepy',
            '.',
        ],
    ),
    (
        'So happy everyone was fine!! Everything else can be fixed.',
        ['so', 'happy', 'everyone', 'was', 'fine', '!', '!', 'everything', 'else', 'can', 'be', 'fixed', '.'],
    ),
    (
        'It was very tense. The other game with England and Sweden was not nearly as nerve-wracking.',
        [
            'it',
            'was',
            'very',
            'tense',
            '.',
            'the',
            'other',
            'game',
            'with',
            'england',
            'and',
            'sweden',
            'was',
            'not',
            'nearly',
            'as',
            'nerve',
            'wracking',
            '.',
        ],
    ),
    (
        "You're right. I prefer nerve-wrecking matches.",
        ['you', "'re", 'right', '.', 'i', 'prefer', 'nerve', 'wrecking', 'matches', '.'],
    ),
]


@pytest.mark.parametrize('text,tokens', SPACY)
def test_tokens_are_the_reference_pipelines(text, tokens):
    assert ethreed_tokens(text) == tokens


def test_spacy_rules_beyond_the_sample():
    # special cases spaCy applies to lowercase text, prefixes/suffixes peeled until one is left
    assert ethreed_tokens('gonna see him at 3pm, idk') == ['gon', 'na', 'see', 'him', 'at', '3', 'pm', ',', 'idk']
    assert ethreed_tokens('He got an A. I wouldve cried') == ['he', 'got', 'an', 'a.', 'i', 'would', 've', 'cried']
    assert ethreed_tokens("in the 90's.") == ['in', 'the', '90', "'", 's.']
    assert ethreed_tokens('I ran 10km... wow..ok') == ['i', 'ran', '10', 'km', '...', 'wow', '..', 'ok']


def test_contractions_are_expanded_before_lowercasing_as_the_reference_does():
    assert prepare("i'm sure i'm") == 'i am sure i am'
    assert ethreed_tokens("I'm sure") == ['i', "'m", 'sure']  # "I'm" is not in the case-sensitive list
    # the one departure: " whats " keeps its spaces (the reference glues it to its neighbours)
    assert prepare('so whats up') == 'so what is up'
