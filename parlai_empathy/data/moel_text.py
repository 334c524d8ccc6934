"""MoEL's text preprocessing, which the MIME paper's figures (and its perplexity) are counted on.

The MIME reference (declare-lab/MIME ``utils/data_reader.py``, taken from MoEL) lowercases each
utterance, expands a fixed list of contractions by plain substring replacement, and splits it
into nltk word tokens (``nltk.word_tokenize``: Punkt sentences, then the Treebank word rules).
Perplexity is a per-token figure, so it is only comparable with the paper's when it is counted
over these same tokens.

Offline difference: ``word_tokenize`` needs nltk's trained Punkt model (``punkt_tab``), which
cannot be downloaded here. An untrained ``PunktSentenceTokenizer`` stands in for it: it splits
after every ., ! or ? followed by a space, so the rare abbreviation in ED ("mr. smith") becomes
two sentences and its period a token of its own ("mr", ".") where trained Punkt keeps "mr.".
"""

from functools import lru_cache
from typing import List

# The reference's substitutions, applied in this order to lower-cased text.
CONTRACTIONS = (
    ("it's", 'it is'),
    ("don't", 'do not'),
    ("doesn't", 'does not'),
    ("didn't", 'did not'),
    ("you'd", 'you would'),
    ("you're", 'you are'),
    ("you'll", 'you will'),
    ("i'm", 'i am'),
    ("they're", 'they are'),
    ("that's", 'that is'),
    ("what's", 'what is'),
    ("couldn't", 'could not'),
    ("i've", 'i have'),
    ("we've", 'we have'),
    ("can't", 'cannot'),
    ("i'd", 'i would'),
    ("aren't", 'are not'),
    ("isn't", 'is not'),
    ("wasn't", 'was not'),
    ("weren't", 'were not'),
    ("won't", 'will not'),
    ("there's", 'there is'),
    ("there're", 'there are'),
)


@lru_cache(maxsize=1)
def _tokenizers():
    from nltk.tokenize import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    return PunktSentenceTokenizer(), NLTKWordTokenizer()


def moel_tokens(text: str) -> List[str]:
    """The tokens MoEL/MIME train and score on: lowercase, contractions expanded, nltk words."""
    return list(_cached_tokens(str(text)))


@lru_cache(maxsize=1 << 18)
def _cached_tokens(text: str):
    """nltk's tokenizers cost about a millisecond per utterance; ParlAI tokenizes every example
    again each epoch, so each distinct text is tokenized once."""
    text = text.lower()
    for short, long in CONTRACTIONS:
        text = text.replace(short, long)
    return tuple(word_tokens(text))


def word_tokens(text: str) -> List[str]:
    """nltk's word tokens of ``text`` as it is (``word_tokenize`` with the offline sentence splitter)."""
    sentences, words = _tokenizers()
    return [token for sentence in sentences.tokenize(text) for token in words.tokenize(sentence)]
