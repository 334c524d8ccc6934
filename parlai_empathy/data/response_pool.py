"""The retrieval pool of Rashkin et al.: deduplicated listener responses of ED train.

Their BLEU protocol retrieves each response from every train listener response, keeping only
responses of at most 20 tokens. The pool is written one response per line (the format of
ParlAI's ``--fixed-candidates-path``), in first-seen order so the file is deterministic.
:func:`ensure_pool` is the one way tools get a pool file: its name carries the train.csv checksum
and the token limit, so another ED copy or limit never reuses a stale pool.
"""

import os
import re
from typing import List

from parlai_empathy.data.ed_raw import read_clean
from parlai_empathy.data.ed_source import file_checksum, resolve_ed_dir
from parlai_empathy.data.file_errors import DataNotFound, decode_line, no_examples, read_lines
from parlai_empathy.files.cache_lock import atomic_write, build_lock

RASHKIN_MAX_TOKENS = 20
# Rashkin et al.'s tokenizer splits punctuation off words; counting the same way keeps the filter
# close to theirs ("I'm fine." is 5 tokens, not 2).
_TOKEN_RE = re.compile(r'\w+|[^\w\s]')


def count_tokens(text: str) -> int:
    return len(_TOKEN_RE.findall(text))


def listener_responses(train_csv: str, max_tokens: int = RASHKIN_MAX_TOKENS) -> List[str]:
    """Every listener turn (the 2nd, 4th, ... utterance of a conversation), deduplicated.

    ``max_tokens`` <= 0 keeps responses of any length.
    """
    conversations, _ = read_clean(train_csv)
    seen, pool = set(), []
    for conv in conversations:
        for utterance in conv.utterances[1::2]:
            text = ' '.join(utterance.text.split())  # one line per candidate, always
            if not text or text in seen:
                continue
            if max_tokens > 0 and count_tokens(text) > max_tokens:
                continue
            seen.add(text)
            pool.append(text)
    if not pool:
        limit = f' of at most {max_tokens} tokens' if max_tokens > 0 else ''
        raise no_examples(train_csv, f'no listener responses{limit} to build a candidate pool from')
    return pool


def read_candidates(path: str) -> List[str]:
    """The candidates of a file of one response per line (``--fixed-candidates-path``), stripped,
    blank lines skipped; a file that is not UTF-8 text or holds none is an error naming it."""
    if not os.path.isfile(path):
        raise DataNotFound(f'candidate file not found: {path}')
    candidates = []
    for line_no, raw in read_lines(path, 'candidate (one response a line)'):
        text = decode_line(raw, path, line_no).strip()
        if text:
            candidates.append(text)
    if not candidates:
        raise no_examples(
            path, 'no candidates: empty file' if os.path.getsize(path) == 0 else 'no candidates: only blank lines'
        )
    return candidates


def write_pool(responses: List[str], out_path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    atomic_write(out_path, lambda f: f.writelines(text + '\n' for text in responses), binary=False)
    return out_path


def train_csv_path(ed_dir: str) -> str:
    """``train.csv`` of an ED folder (``sample`` = the embedded sample), as the teachers find it."""
    return os.path.join(resolve_ed_dir(ed_dir), 'train.csv')


def pool_file_name(train_csv: str, max_tokens: int) -> str:
    """``ed_train_listener_max<N>_<sha256[:12] of train.csv>.cands``."""
    return f'ed_train_listener_max{max_tokens}_{file_checksum(train_csv)[:12]}.cands'


def ensure_pool(ed_dir: str, max_tokens: int, out_dir: str) -> str:
    """Path of the pool of ``ed_dir``'s train.csv (a folder, or ``sample``; None = env var) in
    ``out_dir``, built (atomically) only if that file does not exist yet. Under a lock: when several
    ranks start together, one builds it and the others wait and use it."""
    train_csv = train_csv_path(ed_dir)
    path = os.path.join(out_dir, pool_file_name(train_csv, max_tokens))
    if os.path.exists(path):
        return path
    os.makedirs(out_dir, exist_ok=True)
    with build_lock(path, f'building the response pool {path}'):
        if not os.path.exists(path):
            write_pool(listener_responses(train_csv, max_tokens), path)
    return path
