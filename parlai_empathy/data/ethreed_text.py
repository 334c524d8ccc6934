"""The ETHREED reference's text: what its vocabulary, perplexity and Distinct-n are counted on.

The reference (outsider-lj/ethreed) prepares ED text in three stages:

1. before lowercasing, a few contractions written without an apostrophe get one back ("dont" ->
   "don't", only between spaces), then MoEL's contraction list (plus "haven't") is expanded by
   plain substring replacement. Both are case-sensitive, so "i'm" becomes "i am" but "I'm" stays;
2. the utterance is lowercased and passed through a character filter (anything but letters,
   digits and ``,!?'`.`` becomes a space) that also splits off clitics ('s 've n't 're 'd 'll),
   commas, ! and ? and puts a space before "...";
3. spaCy's English tokenizer (``en_core_web_sm``) splits what is left.

:func:`ethreed_tokens` does all three offline. Stage 3 is our own implementation of spaCy's
tokenizer algorithm (special cases, then prefixes, suffixes and infixes, repeated) with the rules
that can still fire on the alphabet stage 2 leaves: lowercase letters, digits, ``, ! ? ' ` .``.
On every utterance of ED (train, valid and test) it gives spaCy 3.8's tokens for all but a handful
of utterances (the test compares it with tokens spaCy produced, on real ED text).

One deliberate departure: the reference's table maps " whats " to "what's" without the spaces
around it, gluing the word to its neighbours ("so whats up" -> "sowhat isup"); here the spaces
are kept.
"""

import re
from functools import lru_cache
from typing import List, Tuple

from parlai_empathy.data.moel_text import CONTRACTIONS

# 1. apostrophes restored between spaces, then contractions expanded (case-sensitive)
_RESTORED = tuple(
    (f' {bare} ', f' {full} ')
    for bare, full in (
        ('thats', "that's"),
        ('dont', "don't"),
        ('doesnt', "doesn't"),
        ('didnt', "didn't"),
        ('youd', "you'd"),
        ('youre', "you're"),
        ('youll', "you'll"),
        ('im', "i'm"),
        ('theyre', "they're"),
        ('whats', "what's"),
        ('couldnt', "couldn't"),
        ('souldnt', "souldn't"),
        ('ive', "i've"),
        ('cant', "can't"),
        ('arent', "aren't"),
        ('isnt', "isn't"),
        ('wasnt', "wasn't"),
        ('werent', "weren't"),
        ('wont', "won't"),
        ('theres', "there's"),
        ('therere', "there're"),
        ('its', "it's"),
    )
)
EXPANSIONS = CONTRACTIONS + (("haven't", 'have not'),)

# 2. character filter and clitic/punctuation splits
_NOT_KEPT = re.compile(r"[^A-Za-z0-9,!?'`.]")
_SPACED = [
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r'\.{3}', ' ...'),
        (r"'s", " 's"),
        (r"'ve", " 've"),
        (r"n't", " n't"),
        (r"'re", " 're"),
        (r"'d", " 'd"),
        (r"'ll", " 'll"),
        (r',', ' , '),
        (r'!', ' ! '),
        (r'\?', ' ? '),
        (r'\s{2,}', ' '),
    )
]

# 3. spaCy's English rules that can fire on that alphabet
_PREFIX = re.compile(r"^(?:\.\.+|[,!?'`])")
_UNITS = 'km|m|cm|mm|dm|ha|nm|yd|in|ft|kg|g|mg|t|lb|oz|mph|kmh|mb|kb|gb|tb'
_SUFFIX = re.compile(r"(?:\.\.+$|[,!?'`]$|'s$|(?<=[0-9])(?:" + _UNITS + r")$|(?<=[0-9a-z,!?'`])\.$)")
_INFIX = re.compile(r"\.\.+|(?<=[a-z'`])\.(?=['`])")


def _special_cases():
    """Whole strings that spaCy splits its own way, or never splits (the lowercase forms)."""
    cases = {}
    # a word + a verb, with no apostrophe ("im" -> i m, "thats" -> that s); forms that are
    # words of their own ("its", "ill", "well", "were", "hell", "shell", "shed", "whore") stay
    wh = ('s', 're', 'll', 'd', 've', 'dve', 'llve')
    verbs = {
        'i': ('m', 'll', 'd', 've', 'dve', 'llve'),
        **{word: ('re', 'll', 'd', 've', 'dve', 'llve') for word in ('you', 'we', 'they')},
        **{word: ('s', 'll', 'd', 'dve', 'llve') for word in ('he', 'she', 'it', 'that', 'this')},
        **{word: wh for word in ('what', 'who', 'there', 'how', 'why', 'where', 'when')},
    }
    words = {'its', 'ill', 'well', 'were', 'hell', 'shell', 'shed', 'whore'}
    for word, endings in verbs.items():
        for ending in endings:
            pieces = (word,) + (('d', 've') if ending == 'dve' else ('ll', 've') if ending == 'llve' else (ending,))
            if word + ending not in words:
                cases[word + ending] = pieces
    cases.update({"i'm": ('i', "'m"), "i'ma": ('i', "'m", 'a'), 'ima': ('i', 'm', 'a')})
    # verb + not (and + have) with no apostrophe: "dont" -> do nt, "couldve" -> could ve
    for verb, endings in (
        (('would', 'could', 'should', 'must', 'might'), ('nt', 've', 'ntve')),
        (('may', 'need', 'ought', 'do', 'does', 'did', 'had', 'sha', 'wo', 'ca'), ('nt', 'ntve')),
        (('is', 'was', 'are', 'were', 'have', 'has', 'ai', 'dare'), ('nt',)),
    ):
        for stem in verb:
            for ending in endings:
                cases[stem + ending] = (stem,) + (('nt', 've') if ending == 'ntve' else (ending,))
    # kept whole, or split their own way
    for whole in (
        "n't",
        "'s",
        "'d",
        "'ll",
        "'re",
        "'cause",
        "'em",
        "'bout",
        "ma'am",
        "o'clock",
        "ya'll",
        "y'know",
        "doin'",
        "goin'",
        "nothin'",
        "somethin'",
        "nuthin'",
        "havin'",
        "lovin'",
        "ol'",
        'a.m.',
        'p.m.',
        'e.g.',
        'i.e.',
        'vs.',
    ):
        cases[whole] = (whole,)
    cases.update(
        {
            'cannot': ('can', 'not'),
            'gonna': ('gon', 'na'),
            'gotta': ('got', 'ta'),
            "y'all": ("y'", 'all'),
            'yall': ('y', 'all'),
            "c'mon": ("c'm", 'on'),
        }
    )
    # single letters with a period ("a.") and times of day: 1am .. 12pm, 1a.m. .. 12p.m.
    cases.update({f'{letter}.': (f'{letter}.',) for letter in 'abcdefghijklmnopqrstuvwxyz'})
    for hour in range(1, 13):
        for period in ('am', 'pm', 'a.m.', 'p.m.'):
            cases[f'{hour}{period}'] = (str(hour), period)
    return cases


SPECIAL_CASES = _special_cases()


def _split_affixes(chunk: str) -> List[str]:
    """spaCy's loop: peel prefixes and suffixes until a special case or nothing is left."""
    prefixes, suffixes = [], []
    previous = -1
    while chunk and len(chunk) != previous and chunk not in SPECIAL_CASES:
        previous = len(chunk)
        prefix = _PREFIX.search(chunk)
        pre = prefix.end() if prefix else 0
        if pre and chunk[pre:] in SPECIAL_CASES:
            prefixes.append(chunk[:pre])
            chunk = chunk[pre:]
            break
        suffix = _SUFFIX.search(chunk[pre:])
        suf = len(chunk) - pre - suffix.start() if suffix else 0
        if suf and chunk[:-suf] in SPECIAL_CASES:
            suffixes.append(chunk[-suf:])
            chunk = chunk[:-suf]
            break
        if pre and suf and pre + suf <= len(chunk):
            prefixes.append(chunk[:pre])
            suffixes.append(chunk[-suf:])
            chunk = chunk[pre:-suf]
        elif pre:
            prefixes.append(chunk[:pre])
            chunk = chunk[pre:]
        elif suf:
            suffixes.append(chunk[-suf:])
            chunk = chunk[:-suf]
    return prefixes + _middle(chunk) + suffixes[::-1]


def _middle(chunk: str) -> List[str]:
    if not chunk:
        return []
    if chunk in SPECIAL_CASES:
        return list(SPECIAL_CASES[chunk])
    pieces, start = [], 0
    for infix in _INFIX.finditer(chunk):
        if infix.start() == 0:  # an infix never starts a token (spaCy skips it)
            continue
        pieces += [chunk[start : infix.start()], chunk[infix.start() : infix.end()]]
        start = infix.end()
    pieces.append(chunk[start:])
    return [piece for piece in pieces if piece]


def prepare(text: str) -> str:
    """Stages 1 and 2: the reference's cleaned, lowercased utterance (tokens not yet split)."""
    for short, long in _RESTORED + EXPANSIONS:
        text = text.replace(short, long)
    text = _NOT_KEPT.sub(' ', text.lower().strip())
    for pattern, replacement in _SPACED:
        text = pattern.sub(replacement, text)
    return text.strip()


def ethreed_tokens(text: str) -> List[str]:
    """The tokens the ETHREED reference trains and scores on (all three stages)."""
    return list(_cached_tokens(str(text)))


@lru_cache(maxsize=1 << 18)
def _cached_tokens(text: str) -> Tuple[str, ...]:
    """ParlAI tokenizes every example again each epoch: each distinct text is split once."""
    return tuple(token for chunk in prepare(text).split() for token in _split_affixes(chunk))
