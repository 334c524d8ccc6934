"""Distinct-n (Li et al., 2016): how varied the generated responses are.

* ``dist-n`` (corpus level, the paper's definition): distinct n-grams over *all* responses divided
  by the number of n-grams in all responses.
* ``utt_dist-n`` (per utterance): distinct n-grams of one response over its n-grams, averaged over
  the responses that have at least one n-gram. This is the variant some papers report under the
  same name; it is much higher than the corpus figure and is kept under its own name.

Tokenizer (fixed): the text is lowercased and split with sacrebleu's ``13a`` tokenizer -- the one
BLEU uses -- so punctuation marks are separate tokens and ``Great!`` / ``great !`` count as the
same n-grams. The text is never stripped of a prefix: ``str.strip('Pred:')`` removes any of the
*characters* ``P r e d :`` from both ends (EmpDG/KEMP/CEM/CASE), which is a bug.
"""

from collections import Counter
from functools import lru_cache
from typing import Callable, List, Sequence, Tuple

Ngram = Tuple[str, ...]


@lru_cache(maxsize=1)
def _tokenizer_13a():
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    return Tokenizer13a()


def tokens(text: str) -> List[str]:
    """The documented Distinct-n tokenization: lowercase, then sacrebleu 13a."""
    return _tokenizer_13a()(text.lower()).split()


def nltk_tokens(text: str) -> List[str]:
    """The second tokenization the suite reports (``dist-n_nltk``, ETHREED's): nltk word tokens
    of the lowercased text."""
    from parlai_empathy.data.moel_text import word_tokens

    return word_tokens(text.lower())


def ngrams(words: Sequence[str], n: int) -> List[Ngram]:
    if n < 1:
        raise ValueError(f'n-gram order must be >= 1, got {n}')
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def corpus_distinct(responses: Sequence[str], n: int, tokenize: Callable[[str], List[str]] = tokens) -> float:
    """Corpus-level Distinct-n; 0.0 when the responses have no n-gram at all."""
    counts = Counter()
    for response in responses:
        counts.update(ngrams(tokenize(response), n))
    total = sum(counts.values())
    return len(counts) / total if total else 0.0


def utterance_distinct(response: str, n: int, tokenize: Callable[[str], List[str]] = tokens) -> Tuple[int, int]:
    """(distinct n-grams, n-grams) of one response; the caller averages the ratio."""
    grams = ngrams(tokenize(response), n)
    return len(set(grams)), len(grams)


def mean_utterance_distinct(responses: Sequence[str], n: int, tokenize: Callable[[str], List[str]] = tokens) -> float:
    """Per-utterance Distinct-n averaged over responses that have at least one n-gram."""
    ratios = [d / t for d, t in (utterance_distinct(r, n, tokenize) for r in responses) if t]
    return sum(ratios) / len(ratios) if ratios else 0.0
