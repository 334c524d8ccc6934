"""``-m empathy/ethreed``: ETHREED (Li et al.) as a ParlAI TorchGeneratorAgent.

The model is ``parlai_empathy.models.ethreed.Ethreed``. What this agent adds:

* Batches carry the dialogue, not one flattened string: every context utterance is vectorized on
  its own, ending with the end token as in the reference (``utt_tokens``/``utt_lengths``), with
  ``dialogue_lengths`` and per-turn party ids (``roles``: 0 speaker, 1 listener). From the ED
  teachers' ``context_utterances`` / ``context_roles`` fields when present; otherwise
  (interactive) from ParlAI's history, the last utterance being the user's (the speaker) and
  turns alternating backwards.
* An extended vocabulary per example: the out-of-vocabulary words of the answered utterance get
  ids after the dictionary's (``source_tokens``); a gold response word that is one of them is
  scored against that id (``label_ext``), and a generated one is written back as the word.
* Text is the reference's (``--dict-tokenizer ethreed``, :mod:`parlai_empathy.data.ethreed_text`:
  its contraction handling, character filter and spaCy's English tokenizer rules); the
  vocabulary is every train word seen at least 3 times (the reference also counts valid).
* L1 labels: the speaker's from the ED ``emotion`` field, the listener's from an ED 32-way
  classifier's labels of every utterance: by default those of the ``li_ethreed/ed32_utterance``
  row, shipped with the package (``--listener-emotions ed32-utterance``,
  :mod:`parlai_empathy.emotions.listener_labels`, checked against the text of the ED files in
  use), or any classifier's tag cache (see :class:`ListenerEmotionTags`); ``--listener-emotions
  conversation`` gives the listener the conversation's label too (a diagnostic upper bound, not
  the paper's setup).
* Loss = the reference's: L3 averaged over each response's tokens, then over responses, plus the
  model's L1 + L2 + L4 (``loss_emo``, ``loss_kl``, ``loss_cov``). Perplexity both ways: ``ppl``
  (ParlAI's, token-weighted) and ``ppl_ex`` (exp of the mean per-response mean NLL, the
  reference's); Distinct-n of generated replies also on nltk word tokens (``dist-1_nltk``,
  ``dist-2_nltk``), the reference's tokens, beside the suite's ``dist-n``. ``emo_acc``/
  ``emo_acc@k`` for the speaker's emotion come from the project's metrics suite.
* Every reply carries ``predicted_emotion`` (the speaker emotion tracked over the turns),
  ``predicted_listener_emotion`` (the policy's planned emotion for the reply, through the
  classifier) and ``emotion_scores`` (speaker label -> probability).
* An empty turn (in evaluation; in chat one gets the short request of ``SafeAgentMixin``), or a
  conversation of one utterance, is answered.

The paper's and reference's setup is the default (``parser.set_defaults`` below): hidden and
embedding sizes 300, dropout 0.5, plain Adam 5e-4 (not ParlAI's AMSGrad: ``--amsgrad``), gradient
clip 1.0, 7 epochs with the learning rate times 0.3 after the 4th and the 5th
(``--lr-milestones``), batches of 16 responses (about the 8 conversations of a reference batch),
responses of at most 40 tokens, greedy decoding.
"""

import os

import numpy as np
import torch
from parlai.core.loader import register_agent
from parlai.core.metrics import AverageMetric
from parlai.nn.lr_scheduler import FixedLRScheduler
from parlai.utils.misc import warn_once

from parlai_empathy.agents.batch_defaults import training_defaults
from parlai_empathy.agents.config_options import add_config_options, config_from_opt
from parlai_empathy.agents.detokenize import detokenize
from parlai_empathy.agents.encoder_readout import EncoderReadoutAgent
from parlai_empathy.agents.generator_common import (
    MoelDictionaryAgent,
    record_response_metrics,
    warn_unless_papers_word_table,
)
from parlai_empathy.agents.safety import is_blank_chat_message
from parlai_empathy.data.emotions import ED_EMOTIONS, emotion_to_id
from parlai_empathy.data.ethreed_text import ethreed_tokens
from parlai_empathy.emotions import listener_labels
from parlai_empathy.metrics import distinct
from parlai_empathy.metrics.parlai_metrics import DISTINCT_ORDERS, CorpusDistinctMetric, batch_emotion_metrics
from parlai_empathy.models.embeddings import WordEmbedding
from parlai_empathy.models.ethreed import (
    IGNORE,
    LISTENER,
    SPEAKER,
    Ethreed,
    EthreedConfig,
)
from parlai_empathy.models.glove import fill_std_value, glove_fill_std

ROLE_IDS = {'speaker': SPEAKER, 'listener': LISTENER}
NO_TAGS = 'none'
# Diagnostic upper bound: every listener utterance labelled with the conversation's ED emotion,
# as if the utterance classifier agreed with the conversation label on 100 % of them.
CONVERSATION_LABELS = 'conversation'
PACKAGED_LABELS = listener_labels.PACKAGED
TAG_COMMAND = (
    'parlai train_model -t empathy_ed_emotion --ed-emotion-input utterance '
    '-m empathy/emotion_classifier -mf CLF, then parlai empathy_tag_ed -mf CLF (it prints the '
    'tag cache folder to pass as --listener-emotions)'
)


class ListenerEmotionTags:
    """Listener utterances' ED emotions: a tag cache of the emotions issue, or a label folder.

    A tag cache (``parlai_empathy.emotions.tag_cache``) must come from a single-label classifier
    over the 32 ED emotions; an utterance's label is the argmax of its cached probabilities. A
    label folder (``parlai_empathy.emotions.listener_labels``: ``parlai empathy_tag_ed
    --export-labels``, or the ``ed32-utterance`` labels shipped with the package) holds that
    argmax already. Lookup is by (conv_id, utterance_idx): ED conversation ids are unique across
    splits.
    """

    def __init__(self, directory, folder=None):
        from parlai_empathy.emotions import tag_cache

        if folder is not None:  # a label folder, loaded and checked against the ED text by the agent
            self.labels = {key: emotion_to_id(emotion) for key, (emotion, _) in folder.labels.items()}
            self.path = folder.directory
            return
        try:
            table = tag_cache.TagTable(directory)
        except tag_cache.TagCacheError as err:
            raise tag_cache.TagCacheError(f'{err}. For ETHREED: {TAG_COMMAND}') from None
        if table.meta['classifier'].get('multilabel') or sorted(table.classes) != sorted(ED_EMOTIONS):
            raise ValueError(
                f'{directory} was tagged by a classifier over {", ".join(table.classes[:5])}, ...; '
                f'ETHREED needs the 32 ED emotions (single-label): {TAG_COMMAND}'
            )
        to_ed = np.array([emotion_to_id(c) for c in table.classes])
        best = to_ed[table.probs.argmax(axis=1)].tolist()
        self.labels = {(conv, idx): best[row] for (_, conv, idx), row in table.row.items()}
        self.path = directory

    def get(self, conv_id, utterance_idx):
        key = (str(conv_id), int(utterance_idx))
        if key not in self.labels:
            raise KeyError(
                f'the tag cache {self.path} has no utterance {utterance_idx} of {conv_id}: it was '
                f'made from other ED data; {TAG_COMMAND} on this data'
            )
        return self.labels[key]


def alternating_roles(n):
    """Party ids of ``n`` history utterances whose last one is the user's (the speaker)."""
    return [SPEAKER if (n - 1 - i) % 2 == 0 else LISTENER for i in range(n)]


class EthreedDictionaryAgent(MoelDictionaryAgent):
    """ParlAI's dictionary with ``--dict-tokenizer ethreed`` (and MIME's ``moel``)."""

    @staticmethod
    def ethreed_tokenize(text):
        return ethreed_tokens(text)


def parse_milestones(value):
    """``"4,5"`` -> ``[4, 5]``; empty: none."""
    return [int(part) for part in str(value or '').replace(' ', '').split(',') if part]


@register_agent('empathy/ethreed')
class EthreedAgent(EncoderReadoutAgent):
    # parlai interactive shows the tracked speaker emotion and the planned reply emotion
    display_fields = ('predicted_emotion', 'predicted_listener_emotion')
    # what an ETHREED model whose options lack these was trained with (plain Adam came later);
    # kept while committed runs' options lack them
    OPT_MIGRATIONS = {1: {'amsgrad': True}}

    @classmethod
    def add_cmdline_args(cls, parser, partial_opt=None):
        super().add_cmdline_args(parser, partial_opt=partial_opt)
        group = parser.add_argument_group('ETHREED (parlai-empathy)')
        # the model's sizes, dropout, L2 weight and ablations: EthreedConfig's fields, under their names
        add_config_options(group, EthreedConfig)
        group.add_argument('--embedding-size', '-esz', type=int, default=300, help='word embedding size (paper: 300)')
        group.add_argument(
            '--glove-init',
            type='bool',
            default=True,
            help='initialize word embeddings from GloVe (missing columns random)',
        )
        group.add_argument(
            '--glove-path',
            type=str,
            default=None,
            help='GloVe text file (the paper: glove.840B.300d.txt) or a word table folder of parlai '
            'empathy_word_table; default: the '
            'offline 6B 50d vectors, padded to the embedding size',
        )
        group.add_argument(
            '--glove-fill-std',
            type=glove_fill_std,
            default='glove',
            help='the std of the random values GloVe does not give: the rows of words '
            'it lacks and, with vectors narrower than --embedding-size, the columns '
            "beyond their width. 'glove' (default, the rule of every ETHREED row so far): "
            'the std of the found GloVe values; a number: N(0, that std). Measured with the '
            'offline 50-d vectors (projects/li_ethreed/runs/diagnostics/glove_fill*): '
            '0.01 trains worse, '
            "1.0 (the reference's rule for words its 300-d vectors lack) about the same",
        )
        group.add_argument(
            '--utterance-truncate',
            type=int,
            default=40,
            help='tokens kept per context utterance, its end token included (reference: 40)',
        )
        group.add_argument(
            '--max-turns', type=int, default=8, help='most recent utterances kept as context (ED has at most 7)'
        )
        group.add_argument(
            '--lr-milestones',
            type=str,
            default='4,5',
            help='with --lr-scheduler fixed: the validations (one per epoch by '
            'default) after which the learning rate is multiplied by '
            '--lr-scheduler-decay (reference: MultiStepLR at epochs 4 and 5); '
            "empty: ParlAI's decay every --lr-scheduler-patience validations",
        )
        group.add_argument(
            '--listener-emotions',
            type=str,
            default=PACKAGED_LABELS,
            help='the listener labels of L1. Default "%(default)s": the labels that '
            'the ED 32-way utterance classifier of the li_ethreed/ed32_utterance row '
            'gave every utterance of ED, shipped with the package (they are checked '
            'against the text of your ED files). Else the ED 32-way classifier model '
            'file that parlai empathy_tag_ed tagged ED with (its cache is found in '
            '--tag-cache-dir or the default root), the tag cache folder itself, or a '
            'folder of parlai empathy_tag_ed --export-labels; '
            f'"{NO_TAGS}": speaker labels only; "{CONVERSATION_LABELS}": the '
            "conversation's ED label for every listener utterance too (an "
            'upper bound on what better listener tags can give, not the paper)',
        )
        group.add_argument(
            '--tag-cache-dir', type=str, default=None, help='tag cache root, as given to parlai empathy_tag_ed'
        )
        parser.set_defaults(
            dict_tokenizer='ethreed',
            dict_lower=False,
            dict_minfreq=3,
            dict_maxtokens=-1,
            label_truncate=40,
            text_truncate=256,
            truncate=256,
            train_experiencer_only=True,
            optimizer='adam',
            learningrate=5e-4,
            gradient_clip=1.0,
            lr_scheduler='fixed',
            lr_scheduler_decay=0.3,
            num_epochs=7,
            validation_every_n_epochs=1,
            validation_metric='ppl',
            validation_metric_mode='min',
            skip_generation=True,
            inference='greedy',
        )
        training_defaults(parser, partial_opt, 16)
        return parser

    @staticmethod
    def dictionary_class():
        return EthreedDictionaryAgent

    def __init__(self, opt, shared=None):
        if shared is not None:
            self.listener_tags = shared['listener_tags']
        else:
            self.listener_tags = self._load_listener_tags(opt)
        self._generated = None
        super().__init__(opt, shared)
        self.id = 'Ethreed'

    @staticmethod
    def _load_listener_tags(opt):
        path = opt.get('listener_emotions')
        if path == NO_TAGS or opt.get('interactive_mode'):  # chat has no listener turn to label
            return None
        if path == CONVERSATION_LABELS:
            return CONVERSATION_LABELS
        if path is None:
            if 'train' in opt.get('datatype', '') and not opt.get('interactive_mode'):
                raise ValueError(
                    'ETHREED trains L1 on listener emotion labels: pass --listener-emotions PATH, '
                    f'made once with {TAG_COMMAND}; or --listener-emotions {NO_TAGS} to use the '
                    'speaker labels only.'
                )
            return None
        if os.path.isfile(path):  # a classifier model file: its cache for this ED folder
            from parlai_empathy.data import ed_source
            from parlai_empathy.emotions import tag_cache

            ed_dir = ed_source.resolve_ed_dir(opt.get('ed_datapath'), opt['datapath'])
            path = tag_cache.locate_for_options(path, ed_dir, opt['datapath'], opt.get('tag_cache_dir'))
        training = 'train' in opt.get('datatype', 'train')
        if not os.path.isdir(listener_labels.resolve(path)) and not training:
            warn_once(f'{path} (listener emotions) is missing: L1 ignores listener turns here')
            return None
        if listener_labels.is_label_folder(listener_labels.resolve(path)):
            from parlai_empathy.data import ed_source

            folder = listener_labels.load(path)
            try:  # labels made from other text must not train (or score) anything
                folder.check_covers(ed_source.resolve_ed_dir(opt.get('ed_datapath'), opt['datapath']))
            except listener_labels.LabelFileError as err:
                if training:
                    raise
                warn_once(f'{err}: L1 ignores listener turns here')
                return None
            return ListenerEmotionTags(path, folder)
        return ListenerEmotionTags(path)

    def share(self):
        shared = super().share()
        shared['listener_tags'] = self.listener_tags
        return shared

    # ----- model and schedule ------------------------------------------------------------------
    def build_model(self):
        opt = self.opt
        vocab = [self.dict.ind2tok[i] for i in range(len(self.dict))]
        fresh = not (opt.get('init_model') or os.path.isfile(opt.get('model_file') or ''))
        if opt['glove_init'] and fresh:
            words, hit_rate = WordEmbedding.from_glove(
                vocab,
                opt['embedding_size'],
                self.NULL_IDX,
                opt.get('glove_path'),
                glove_fit='pad',
                fill_std=fill_std_value(opt.get('glove_fill_std')),
            )
            print(f'[ GloVe init: {hit_rate:.1%} of {len(vocab)} words found ]')
            warn_unless_papers_word_table(
                opt.get('model') or type(self).__name__,
                'glove.840B.300d.txt',
                opt.get('glove_path'),
                words.glove_dim,
                opt['embedding_size'],
            )
        else:
            words = WordEmbedding(len(vocab), opt['embedding_size'], self.NULL_IDX)
        config = config_from_opt(EthreedConfig, opt)
        unk = self.dict[self.dict.unk_token]
        return Ethreed(words, len(vocab), config, self.NULL_IDX, self.START_IDX, self.END_IDX, unk)

    def build_lr_scheduler(self, states=None, hard_reset=False):
        """ParlAI's ``fixed`` schedule decays every N validations; the reference's MultiStepLR
        decays after chosen epochs: with ``--lr-milestones`` the same scheduler steps on them."""
        super().build_lr_scheduler(states, hard_reset)
        milestones = parse_milestones(self.opt.get('lr_milestones'))
        if not milestones or not isinstance(self.scheduler, FixedLRScheduler):
            return
        inner = self.scheduler.scheduler
        inner = torch.optim.lr_scheduler.MultiStepLR(inner.optimizer, milestones, gamma=self.opt['lr_scheduler_decay'])
        if states and 'lr_scheduler' in states and not hard_reset:
            inner.load_state_dict({**states['lr_scheduler'], 'milestones': inner.milestones})
        self.scheduler.scheduler = inner

    # ----- vectorization: the dialogue as a sequence of utterances -----------------------------
    def _utterance(self, text):
        """``(tokens, in-vocabulary ids)`` of one utterance: truncated, then the end token."""
        limit = (self.opt.get('utterance_truncate') or 0) - 1
        tokens = self.dict.tokenize(str(text))
        tokens = tokens[:limit] if limit > 0 else tokens
        unk = self.dict[self.dict.unk_token]
        return tokens, [self.dict.tok2ind.get(token, unk) for token in tokens] + [self.END_IDX]

    def vectorize(self, obs, history, **kwargs):
        obs = super().vectorize(obs, history, **kwargs)
        if 'text' not in obs:
            return obs
        if obs.get('text_vec') is None:
            obs.force_set('text_vec', torch.LongTensor([self.NULL_IDX]))  # keeps an empty turn valid
        if 'utterance_vecs' not in obs:
            if obs.get('context_utterances') is not None:
                texts = list(obs['context_utterances'])
                roles = [ROLE_IDS[r] for r in obs['context_roles']]
                turns = list(range(1, len(texts) + 1))  # ED utterance_idx
            else:
                texts = list(history.history_raw_strings) if history is not None else [obs['text']]
                roles, turns = alternating_roles(len(texts)), [None] * len(texts)
            if not texts:
                texts, roles, turns = [''], [SPEAKER], [None]
            keep = self.opt.get('max_turns') or len(texts)
            vectorized = [self._utterance(text) for text in texts[-keep:]]
            obs.force_set('utterance_vecs', [torch.LongTensor(ids) for _, ids in vectorized])
            obs.force_set('utterance_roles', roles[-keep:])
            obs.force_set('utterance_turns', turns[-keep:])
            obs.force_set('source_vec', self._extend(vectorized[-1], obs))
        self._extend_label(obs)
        return obs

    def _extend(self, utterance, obs):
        """The answered utterance with ids ``len(dict) + k`` for its k-th new unknown word; the
        words are kept in ``obs['source_oov']``."""
        tokens, ids = utterance
        unk, oov = self.dict[self.dict.unk_token], []
        extended = list(ids)
        for position, token in enumerate(tokens):
            if ids[position] == unk and token not in self.dict.tok2ind:
                if token not in oov:
                    oov.append(token)
                extended[position] = len(self.dict) + oov.index(token)
        obs.force_set('source_oov', oov)
        return torch.LongTensor(extended)

    def _extend_label(self, obs):
        """The label vector with the answered utterance's unknown words as their extended ids."""
        for field in ('labels', 'eval_labels'):
            vec = obs.get(field + '_vec')
            if vec is None or not obs.get('source_oov') or obs.get(field + '_choice') is None:
                continue
            tokens = self.dict.tokenize(str(obs[field + '_choice']))
            extended = vec.clone()
            for position, token in enumerate(tokens[: len(vec)]):
                if token in obs['source_oov'] and int(vec[position]) == self.dict[self.dict.unk_token]:
                    extended[position] = len(self.dict) + obs['source_oov'].index(token)
            obs.force_set(field + '_ext_vec', extended)

    def batchify(self, obs_batch, sort=False):
        batch = super().batchify(obs_batch, sort=sort)
        if batch.text_vec is None:
            return batch
        observations = [obs_batch[i] for i in batch.valid_indices.tolist()]
        dialogues = [obs.get('utterance_vecs') or [obs['text_vec']] for obs in observations]
        utterances = [vec for dialogue in dialogues for vec in dialogue]
        lengths = torch.LongTensor([len(vec) for vec in utterances])
        tokens = self._padded(utterances)
        sources = self._padded([obs.get('source_vec', d[-1]) for obs, d in zip(observations, dialogues)])
        turns = max(len(d) for d in dialogues)
        roles = torch.zeros(len(dialogues), turns, dtype=torch.long)
        answered_labels = torch.full((len(dialogues),), IGNORE, dtype=torch.long)
        response_labels = torch.full((len(dialogues),), IGNORE, dtype=torch.long)
        speaker_emotions = []
        for row, obs in enumerate(observations):
            dialogue_roles = obs.get('utterance_roles') or [SPEAKER]
            roles[row, : len(dialogue_roles)] = torch.LongTensor(dialogue_roles)
            speaker = self._speaker_emotion(obs)
            speaker_emotions.append(speaker)
            last_turn = (obs.get('utterance_turns') or [None])[-1]
            answered_labels[row] = self._label(obs, dialogue_roles[-1], last_turn, speaker)
            response_labels[row] = self._label(obs, 1 - dialogue_roles[-1], obs.get('turn'), speaker)
        device = batch.text_vec.device
        batch['utt_tokens'] = tokens.to(device)
        batch['utt_lengths'] = lengths.to(device)
        batch['dialogue_lengths'] = torch.LongTensor([len(d) for d in dialogues]).to(device)
        batch['roles'] = roles.to(device)
        batch['source_tokens'] = sources.to(device)
        batch['source_oov'] = [obs.get('source_oov') or [] for obs in observations]
        batch['answered_labels'] = answered_labels.to(device)
        batch['response_labels'] = response_labels.to(device)
        batch['speaker_emotions'] = speaker_emotions
        batch['label_ext'] = None
        if batch.label_vec is not None:
            field = 'labels' if 'labels_vec' in observations[0] else 'eval_labels'
            extended = batch.label_vec.clone()
            for row, obs in enumerate(observations):
                vec = obs.get(field + '_ext_vec')
                if vec is not None:
                    extended[row, : len(vec)] = vec.to(device)
            batch['label_ext'] = extended
        return batch

    def _padded(self, vecs):
        out = torch.full((len(vecs), max(max(len(v) for v in vecs), 1)), self.NULL_IDX, dtype=torch.long)
        for row, vec in enumerate(vecs):
            out[row, : len(vec)] = vec
        return out

    def _speaker_emotion(self, obs):
        if obs.get('emotion') is None:
            return IGNORE
        try:
            return emotion_to_id(obs['emotion'])
        except ValueError as err:
            raise ValueError(f'bad "emotion" field in an {self.id} observation: {err}') from err

    def _label(self, obs, role, turn, speaker_emotion):
        """L1 label of one utterance: the ED label for the speaker, the tag for the listener
        (with ``--listener-emotions conversation``, the ED label for both)."""
        if role == SPEAKER or self.listener_tags == CONVERSATION_LABELS:
            return speaker_emotion
        if self.listener_tags is None or turn is None or obs.get('conv_id') is None:
            return IGNORE
        return self.listener_tags.get(obs['conv_id'], turn)

    def _model_input(self, batch):
        return (batch.utt_tokens, batch.utt_lengths, batch.dialogue_lengths, batch.roles, batch.source_tokens)

    # ----- losses, metrics and replies ---------------------------------------------------------
    def compute_loss(self, batch, return_output=False):
        """The reference's objective: L3 averaged per response then over the batch, + L1 L2 L4."""
        if batch.label_vec is None:
            raise ValueError('Cannot compute loss without a label.')
        targets = batch.label_ext if batch.get('label_ext') is not None else batch.label_vec
        response, _, encoder_states = self.model(*self._model_input(batch), ys=targets, loss_smoothing=0.0)
        if not self.model.training:
            self.keep_readout(encoder_states)
        record_response_metrics(self, response)
        l3 = (response.nll / response.tokens.clamp(min=1)).mean()
        extra, parts = self.core_model.extra_losses(encoder_states, batch.answered_labels, batch.response_labels)
        size = targets.size(0)
        for key, value in parts.items():
            self.record_local_metric(f'loss_{key}', AverageMetric.many([float(value)] * size))
        known = [i for i, gold in enumerate(batch.speaker_emotions) if gold != IGNORE]
        if known:
            logits = encoder_states.aux.speaker_logits.detach().float().cpu()[known]
            metrics = batch_emotion_metrics(logits, [batch.speaker_emotions[i] for i in known])
            for key, values in metrics.items():
                full = [AverageMetric(0, 0)] * size  # adds nothing to the average
                for i, value in zip(known, values):
                    full[i] = value
                self.record_local_metric(key, full)
        loss = l3 + extra
        return (loss, (None, None, encoder_states)) if return_output else loss

    def _treesearch_factory(self, device, verbose=False):
        search = super()._treesearch_factory(device, verbose)
        # ParlAI's greedy search ignores --beam-min-length; here it counts, so that the end token
        # (which the pointer can also copy from the source) never makes an empty reply
        search.min_length = self.beam_min_length
        return search

    def _generate(self, batch, beam_size, max_ts, prefix_tokens=None):
        result = super()._generate(batch, beam_size, max_ts, prefix_tokens=prefix_tokens)
        self._generated = ([tokens for tokens, _, _ in result[0]], batch.source_oov)
        return result

    def eval_step(self, batch):
        self._generated = None
        output = super().eval_step(batch)
        if output is None or self._generated is None or not output.get('text'):
            return output
        # copied unknown words back into the replies, and Distinct-n on nltk tokens
        replies = [self._reply_text(tokens, words) for tokens, words in zip(*self._generated)]
        output['text'] = replies
        words = [distinct.nltk_tokens(reply) for reply in replies]
        for n in DISTINCT_ORDERS:
            self.record_local_metric(f'dist-{n}_nltk', [CorpusDistinctMetric.of_tokens(w, n) for w in words])
        return output

    def _reply_text(self, tokens, oov):
        """A generated token vector as plain text; extended ids become the copied words."""
        words = []
        for token in tokens.tolist():
            if token == self.END_IDX:
                break
            if token != self.START_IDX:
                words.append(oov[token - len(self.dict)] if token >= len(self.dict) else self.dict[token])
        return detokenize(' '.join(words))

    def add_readout_fields(self, output, readout):
        speaker_probs = torch.softmax(readout.speaker_logits.float(), dim=-1).cpu()
        output['predicted_emotion'] = [ED_EMOTIONS[i] for i in speaker_probs.argmax(-1).tolist()]
        # label -> probability, what ``parlai empathy_score`` reads from world logs (emo_acc offline)
        output['emotion_scores'] = [dict(zip(ED_EMOTIONS, row)) for row in speaker_probs.tolist()]
        output['predicted_listener_emotion'] = [ED_EMOTIONS[i] for i in readout.responder_logits.argmax(-1).tolist()]

    def observe(self, observation):
        # in chat an empty message is answered without the model (SafeAgentMixin)
        if (
            'text' in observation
            and not str(observation.get('text') or '').strip()
            and not is_blank_chat_message(self.opt, observation)
        ):
            warn_once(f'{self.id}: empty message; answering from the dialogue state alone')
        return super().observe(observation)
