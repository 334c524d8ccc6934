"""A ParlAI dictionary backed by a HuggingFace tokenizer, shared by the BERT-based agents.

Like ParlAI's hugging_face dictionaries, it is prebuilt (no ``build_dict`` pass) and maps
ParlAI's special tokens onto BERT's: start = [CLS], end = [SEP], null = [PAD], unk = [UNK].
``txt2vec`` never adds special tokens: each agent adds them itself, after truncation.
Agents subclass it and say where their tokenizer comes from (:meth:`tokenizer_source`).
"""

import os
from collections import defaultdict
from typing import List

from parlai.core.dict import DictionaryAgent
from parlai.core.opt import Opt

from parlai_empathy.files.cache_lock import atomic_write
from parlai_empathy.models.bi_encoder import load_tokenizer

BERT_SPECIAL_TOKENS = ('cls_token', 'sep_token', 'pad_token', 'unk_token')


def clean_text(text: str) -> str:
    """Text the tokenizer can take: undecodable bytes (surrogate escapes) become U+FFFD."""
    return text.encode('utf-8', 'surrogateescape').decode('utf-8', 'replace')


class HFTokenizerDictionary(DictionaryAgent):
    """ParlAI's dictionary interface (as TorchAgent uses it) over ``self.hf_tokenizer``."""

    @staticmethod
    def tokenizer_source(opt: Opt) -> str:
        """Hub name or directory to load the tokenizer from; each agent's subclass says which."""
        raise NotImplementedError('subclass HFTokenizerDictionary and define tokenizer_source(opt)')

    def __init__(self, opt: Opt, shared=None):
        self.opt = opt
        if shared:
            self.hf_tokenizer, self.source = shared['hf_tokenizer'], shared['source']
        else:
            self.source = self.tokenizer_source(opt)
            self.hf_tokenizer = load_tokenizer(self.source)
        tok = self.hf_tokenizer
        missing = [name for name in BERT_SPECIAL_TOKENS if getattr(tok, name) is None]
        if missing:
            raise ValueError(f'Tokenizer of {self.source!r} lacks BERT special tokens: {missing}')
        self.tok2ind = tok.get_vocab()
        self.ind2tok = {i: t for t, i in self.tok2ind.items()}
        self.freq = defaultdict(lambda: 1)
        self.null_token, self.start_token = tok.pad_token, tok.cls_token
        self.end_token, self.unk_token = tok.sep_token, tok.unk_token
        self._unk_token_idx = tok.unk_token_id
        self.tokenizer = 'hf'  # ParlAI's tokenizer *name*; the tokenizer itself is hf_tokenizer
        self.lower = False
        self.minfreq = 0
        self.maxtokens = -1

    def is_prebuilt(self):
        """Tells ``parlai train_model`` not to build a dictionary from the data."""
        return True

    def txt2vec(self, text: str, vec_type=list) -> List[int]:
        return vec_type(self.batch_txt2vec([text])[0])

    def batch_txt2vec(self, texts: List[str]) -> List[List[int]]:
        """Word-piece ids of many texts in one tokenizer call (much faster than one by one)."""
        encoded = self.hf_tokenizer([clean_text(t) for t in texts], add_special_tokens=False, verbose=False)
        return encoded['input_ids']

    def vec2txt(self, vec, **kwargs) -> str:
        ids = vec.tolist() if hasattr(vec, 'tolist') else list(vec)
        return self.hf_tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)

    def save(self, filename=None, append=False, sort=True):
        """ParlAI saves ``<model_file>.dict``; record where the tokenizer comes from instead."""
        if filename:
            # the first save (a checkpoint) may come before anything made the model's folder
            os.makedirs(os.path.dirname(os.path.abspath(filename)), exist_ok=True)
            atomic_write(filename, lambda f: f.write(f'# HuggingFace tokenizer of {self.source}\n'), binary=False)

    def share(self):
        return {'opt': self.opt, 'hf_tokenizer': self.hf_tokenizer, 'source': self.source, 'class': type(self)}

    def act(self):
        return {}
