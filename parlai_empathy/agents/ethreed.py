"""``-m empathy/ethreed``: ETHREED (Li et al.) as a ParlAI TorchGeneratorAgent.

The model is ``parlai_empathy.models.ethreed.Ethreed``. What this agent adds:

* Batches carry the dialogue, not one flattened string: every context utterance is vectorized on
  its own (``utt_tokens``/``utt_lengths``), with ``dialogue_lengths`` and per-turn party ids
  (``roles``: 0 speaker, 1 listener). From the ED teachers' ``context_utterances`` /
  ``context_roles`` fields when present; otherwise (interactive) from ParlAI's history, the last
  utterance being the user's (the speaker) and turns alternating backwards.
* L1 labels: the speaker's from the ED ``emotion`` field, the listener's from the emotions tagging
  cache, made once with an ED 32-way classifier (``--listener-emotions``, see
  :class:`ListenerEmotionTags`).
* Loss = ParlAI's token NLL (L3, also ``ppl``) + the model's L1 + L2 + L4, reported as
  ``loss_emo``, ``loss_kl``, ``loss_cov``; ``emo_acc``/``emo_acc@k`` for the speaker's emotion
  come from the project's metrics suite.
* Every reply carries ``predicted_emotion`` (speaker), ``predicted_listener_emotion`` (the
  policy's R_e_t through the classifier) and ``emotion_scores`` (speaker label -> probability).
* An empty turn, or a conversation of one utterance, is answered.

Paper training setup: ``-o empathy/ethreed``.
"""
import os

from parlai_empathy import compat  # noqa: F401

compat.apply()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from parlai.core.loader import register_agent  # noqa: E402
from parlai.core.metrics import AverageMetric  # noqa: E402
from parlai.utils.misc import warn_once  # noqa: E402

from parlai_empathy.agents.encoder_readout import EncoderReadoutAgent  # noqa: E402
from parlai_empathy.data.emotions import ED_EMOTIONS, emotion_to_id  # noqa: E402
from parlai_empathy.metrics.parlai_metrics import batch_emotion_metrics  # noqa: E402
from parlai_empathy.models.embeddings import WordEmbedding  # noqa: E402
from parlai_empathy.models.ethreed import (  # noqa: E402
    IGNORE, LISTENER, SPEAKER, Ethreed, EthreedConfig,
)

ROLE_IDS = {'speaker': SPEAKER, 'listener': LISTENER}
NO_TAGS = 'none'
TAG_COMMAND = (
    'parlai train_model -t empathy_ed_emotion --ed-emotion-input utterance '
    '-m empathy/emotion_classifier -mf CLF, then parlai empathy_tag_ed -mf CLF (it prints the '
    'tag cache folder to pass as --listener-emotions)'
)


class ListenerEmotionTags:
    """Listener utterances' ED emotions from the emotions issue's tagging cache.

    The cache (``parlai_empathy.emotions.tag_cache``) must come from a single-label classifier
    over the 32 ED emotions; an utterance's label is the argmax of its cached probabilities.
    Lookup is by (conv_id, utterance_idx): ED conversation ids are unique across splits.
    """

    def __init__(self, directory):
        from parlai_empathy.emotions import tag_cache

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


@register_agent('empathy/ethreed')
class EthreedAgent(EncoderReadoutAgent):
    @classmethod
    def add_cmdline_args(cls, parser, partial_opt=None):
        super().add_cmdline_args(parser, partial_opt=partial_opt)
        group = parser.add_argument_group('ETHREED (parlai-empathy)')
        group.add_argument('--hidden-size', type=int, default=300,
                           help='size of every GRU state and of R_e (paper: 300)')
        group.add_argument('--embedding-size', '-esz', type=int, default=300,
                           help='word embedding size (paper: 300)')
        group.add_argument('--dropout', type=float, default=0.0)
        group.add_argument('--glove-init', type='bool', default=True,
                           help='initialize word embeddings from GloVe (missing columns random)')
        group.add_argument('--glove-path', type=str, default=None,
                           help='GloVe text file (e.g. glove.6B.300d.txt); default: offline 6B 50d')
        group.add_argument('--utterance-truncate', type=int, default=60,
                           help='tokens kept per utterance (its beginning)')
        group.add_argument('--max-turns', type=int, default=8,
                           help='most recent utterances kept as context (ED has at most 7)')
        group.add_argument('--listener-emotions', type=str, default=None,
                           help='the listener labels of L1: the ED 32-way classifier model file '
                           'that parlai empathy_tag_ed tagged ED with (its cache is found in '
                           '--tag-cache-dir or the default root), or the tag cache folder itself; '
                           f'"{NO_TAGS}": speaker labels only')
        group.add_argument('--tag-cache-dir', type=str, default=None,
                           help='tag cache root, as given to parlai empathy_tag_ed')
        group.add_argument('--emp-policy', type='bool', default=True,
                           help='empathetic policy network (ablation w/o emp-policy: false)')
        group.add_argument('--gps', type='bool', default=True,
                           help='KL constraint L2 (ablation w/o GPS: false)')
        group.add_argument('--party-gru', type='bool', default=True, help='ablation: false')
        group.add_argument('--emotion-gru', type='bool', default=True, help='ablation: false')
        group.add_argument('--emo-track', type='bool', default=True,
                           help='emotion states reach the decoder (ablation w/o emo-track: false)')
        parser.set_defaults(label_truncate=40, text_truncate=256, truncate=256)
        return parser

    def __init__(self, opt, shared=None):
        if shared is not None:
            self.listener_tags = shared['listener_tags']
        else:
            self.listener_tags = self._load_listener_tags(opt)
        super().__init__(opt, shared)
        self.id = 'Ethreed'

    @staticmethod
    def _load_listener_tags(opt):
        path = opt.get('listener_emotions')
        if path == NO_TAGS:
            return None
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
        if not os.path.isdir(path) and 'train' not in opt.get('datatype', 'train'):
            warn_once(f'{path} (listener emotions) is missing: L1 ignores listener turns here')
            return None
        return ListenerEmotionTags(path)

    def share(self):
        shared = super().share()
        shared['listener_tags'] = self.listener_tags
        return shared

    # ----- model -------------------------------------------------------------------------------
    def build_model(self):
        opt = self.opt
        vocab = [self.dict.ind2tok[i] for i in range(len(self.dict))]
        fresh = not (opt.get('init_model') or os.path.isfile(opt.get('model_file') or ''))
        if opt['glove_init'] and fresh:
            words, hit_rate = WordEmbedding.from_glove(vocab, opt['embedding_size'], self.NULL_IDX,
                                                       opt.get('glove_path'), glove_fit='pad')
            print(f'[ GloVe init: {hit_rate:.1%} of {len(vocab)} words found ]')
        else:
            words = WordEmbedding(len(vocab), opt['embedding_size'], self.NULL_IDX)
        config = EthreedConfig(
            hidden=opt['hidden_size'], dropout=opt['dropout'], policy=opt['emp_policy'],
            gps=opt['gps'], party_gru=opt['party_gru'], emotion_gru=opt['emotion_gru'],
            emotion_track=opt['emo_track'],
        )
        return Ethreed(words, len(vocab), config, self.NULL_IDX, self.START_IDX, self.END_IDX)

    # ----- vectorization: the dialogue as a sequence of utterances -----------------------------
    def vectorize(self, obs, history, **kwargs):
        obs = super().vectorize(obs, history, **kwargs)
        if 'text' not in obs:
            return obs
        if obs.get('text_vec') is None:
            obs.force_set('text_vec', torch.LongTensor([self.NULL_IDX]))  # keeps an empty turn valid
        if 'utterance_vecs' in obs:
            return obs
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
        limit = self.opt.get('utterance_truncate') or None
        vecs = [torch.LongTensor(self.dict.txt2vec(text)[:limit]) for text in texts[-keep:]]
        obs.force_set('utterance_vecs', vecs)
        obs.force_set('utterance_roles', roles[-keep:])
        obs.force_set('utterance_turns', turns[-keep:])
        return obs

    def batchify(self, obs_batch, sort=False):
        batch = super().batchify(obs_batch, sort=sort)
        if batch.text_vec is None:
            return batch
        observations = [obs_batch[i] for i in batch.valid_indices.tolist()]
        dialogues = [obs.get('utterance_vecs') or [obs['text_vec']] for obs in observations]
        utterances = [vec for dialogue in dialogues for vec in dialogue]
        lengths = torch.LongTensor([len(vec) for vec in utterances])
        tokens = torch.full((len(utterances), max(int(lengths.max()), 1)), self.NULL_IDX,
                            dtype=torch.long)
        for row, vec in enumerate(utterances):
            tokens[row, : len(vec)] = vec
        turns = max(len(d) for d in dialogues)
        roles = torch.zeros(len(dialogues), turns, dtype=torch.long)
        turn_labels = torch.full((len(dialogues), turns), IGNORE, dtype=torch.long)
        response_labels = torch.full((len(dialogues),), IGNORE, dtype=torch.long)
        speaker_emotions = []
        for row, obs in enumerate(observations):
            dialogue_roles = obs.get('utterance_roles') or [SPEAKER]
            roles[row, : len(dialogue_roles)] = torch.LongTensor(dialogue_roles)
            speaker = self._speaker_emotion(obs)
            speaker_emotions.append(speaker)
            for t, (role, turn) in enumerate(zip(dialogue_roles, obs.get('utterance_turns') or [None])):
                turn_labels[row, t] = self._label(obs, role, turn, speaker)
            responder = 1 - dialogue_roles[-1]
            response_labels[row] = self._label(obs, responder, obs.get('turn'), speaker)
        device = batch.text_vec.device
        batch['utt_tokens'] = tokens.to(device)
        batch['utt_lengths'] = lengths.to(device)
        batch['dialogue_lengths'] = torch.LongTensor([len(d) for d in dialogues]).to(device)
        batch['roles'] = roles.to(device)
        batch['turn_labels'] = turn_labels.to(device)
        batch['response_labels'] = response_labels.to(device)
        batch['speaker_emotions'] = speaker_emotions
        return batch

    def _speaker_emotion(self, obs):
        if obs.get('emotion') is None:
            return IGNORE
        try:
            return emotion_to_id(obs['emotion'])
        except ValueError as err:
            raise ValueError(f'bad "emotion" field in an {self.id} observation: {err}') from err

    def _label(self, obs, role, turn, speaker_emotion):
        """L1 label of one utterance: the ED label for the speaker, the tag for the listener."""
        if role == SPEAKER:
            return speaker_emotion
        if self.listener_tags is None or turn is None or obs.get('conv_id') is None:
            return IGNORE
        return self.listener_tags.get(obs['conv_id'], turn)

    def _model_input(self, batch):
        return (batch.utt_tokens, batch.utt_lengths, batch.dialogue_lengths, batch.roles)

    # ----- losses, metrics and replies ---------------------------------------------------------
    def compute_loss(self, batch, return_output=False):
        loss, model_output = super().compute_loss(batch, return_output=True)  # L3, ppl
        encoder_states = model_output[2]
        n_tokens = int(batch.label_vec.ne(self.NULL_IDX).sum())
        extra, parts = self.core_model.extra_losses(encoder_states, batch.turn_labels,
                                               batch.response_labels, n_tokens)
        loss = loss + extra
        size = batch.label_vec.size(0)
        for key, value in parts.items():
            self.record_local_metric(f'loss_{key}', AverageMetric.many([float(value)] * size))
        known = [i for i, gold in enumerate(batch.speaker_emotions) if gold != IGNORE]
        if known:
            logits = encoder_states.aux['speaker_logits'].detach().float().cpu()[known]
            metrics = batch_emotion_metrics(logits, [batch.speaker_emotions[i] for i in known])
            for key, values in metrics.items():
                full = [AverageMetric(0, 0)] * size  # adds nothing to the average
                for i, value in zip(known, values):
                    full[i] = value
                self.record_local_metric(key, full)
        return (loss, model_output) if return_output else loss

    def add_readout_fields(self, output, aux):
        speaker_probs = torch.softmax(aux['speaker_logits'].float(), dim=-1).cpu()
        output['predicted_emotion'] = [ED_EMOTIONS[i] for i in speaker_probs.argmax(-1).tolist()]
        # label -> probability, what ``parlai empathy_score`` reads from world logs (emo_acc offline)
        output['emotion_scores'] = [dict(zip(ED_EMOTIONS, row)) for row in speaker_probs.tolist()]
        output['predicted_listener_emotion'] = [
            ED_EMOTIONS[i] for i in aux['responder_logits'].argmax(-1).tolist()
        ]

    def observe(self, observation):
        if 'text' in observation and not str(observation.get('text') or '').strip():
            warn_once(f'{self.id}: empty message; answering from the dialogue state alone')
        return super().observe(observation)
