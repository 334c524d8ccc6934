"""Generated replies as plain text: undo the spacing of ParlAI's ``re`` dictionary tokenizer.

The generators' dictionary splits "I'm sorry." into ``I ' m sorry .`` (ParlAI's ``re``
tokenizer) or ``i am sorry .`` (MoEL's nltk tokens, where "shouldn't" is ``should n't``), and ParlAI joins the
generated tokens with spaces. Left that way, a reply reads oddly in chat and every metric compares
it with the plain-text gold ("I'm sorry.") under a different tokenization: sacrebleu's 13a keeps
"I'm" whole, so BLEU and Distinct-n would count the model's own spacing against it. Rankers return
plain-text candidates already; with this, every model hands the metric suite plain text.
"""

import re

_CONTRACTION = re.compile(r"(\w) ' (\w)")  # I ' m -> I'm, dog ' s -> dog's
_JOINED = re.compile(r'(\w) ([-/]) (?=\w)')  # co - worker -> co-worker, and / or -> and/or
_REPEATED = re.compile(r'([.!?]) (?=[.!?])')  # . . . -> ...
_BEFORE_PUNCTUATION = re.compile(r' ([.,!?;:%)\]}])')  # sad . -> sad.
_AFTER_OPENING = re.compile(r'([(\[{$#]) ')  # ( really -> (really
# nltk/Treebank word tokens (the MoEL/MIME text): should n't, dog 's, `` hi '' -> "hi"
_CLITIC = re.compile(r"(\w) (n't|'s|'re|'ve|'ll|'d|'m)\b", re.IGNORECASE)
_OPEN_QUOTE = re.compile(r'`` ')
_CLOSE_QUOTE = re.compile(r" ''")


def detokenize(text: str) -> str:
    text = _CLITIC.sub(r'\1\2', text)
    text = _OPEN_QUOTE.sub('"', text)
    text = _CLOSE_QUOTE.sub('"', text)
    text = _CONTRACTION.sub(r"\1'\2", text)
    text = _JOINED.sub(r'\1\2', text)
    text = _REPEATED.sub(r'\1', text)
    text = _BEFORE_PUNCTUATION.sub(r'\1', text)
    return _AFTER_OPENING.sub(r'\1', text)
