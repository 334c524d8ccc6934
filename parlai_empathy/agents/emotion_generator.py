"""Shared ParlAI plumbing of the emotion-aware transformer generators (MIME, Multi-TR).

A ``TorchGeneratorAgent`` whose model (``parlai_empathy.models``) takes ``(tokens, speakers,
emotion)``:

* speakers: each history utterance's tokens are tagged 0 (the user / ED Speaker, who said the
  last utterance) or 1 (the model / ED Listener), alternating backwards from the last one;
* emotion: the ED 32-way ``emotion`` field of the observation, the gold label used in training;
* the loss is the MIME reference's: the label-smoothed (``--label-smoothing`` 0.1) response
  loss summed over the batch's tokens, plus the model's ``extra_losses`` (batch-mean emotion
  cross-entropy, MIME's KL summed over the batch);
* perplexity two ways: ``ppl`` (ParlAI's, token-weighted over the corpus) and ``ppl_ex`` (exp of
  the mean over examples of each example's mean token NLL: what the reference prints, since it
  scores its test set one example per batch); MIME adds ``ppl_gold``/``ppl_ex_gold``, the same
  with the gold user polarity, as the reference scores (it generates with the predicted one);
* ``emo_acc``/``emo_acc@2``/``emo_acc@5`` come from the project's metrics suite;
* every reply carries ``predicted_emotion`` and ``emotion_polarity`` (the user polarity the
  model conditioned on).

Text is MoEL's (``--dict-tokenizer moel``: lowercase, contractions expanded, nltk word tokens;
``parlai_empathy.data.moel_text``), so perplexity counts the paper's units. Word embeddings start
from GloVe (``--glove-init``): by default the offline 6B 50d vectors, padded to the model size;
``--glove-path`` takes the paper's 300d text file, or a substitute table folder that ``parlai
empathy_word_table`` built for the model's dictionary. Every value GloVe does not give (the words it
lacks, the columns beyond its width) starts at randn * 0.01, the reference's rule for the words
its GloVe lacks (``--glove-fill-std``; ``glove`` draws them at the found vectors' std instead, the
rule of the MIME and Multi-TR rows trained before this default).

The MIME paper's training setup is the default of both agents (``parser.set_defaults`` below):
plain Adam (0.9, 0.98, eps 1e-9; not ParlAI's AMSGrad, see ``--amsgrad``) under the Noam schedule
(warmup 8,000, peak 300^-0.5 * 8000^-0.5 = 6.455e-4: ParlAI's ``invsqrt``), batch 16, no gradient
clipping (the reference's ``max_grad_norm`` is never applied), Listener turns only, validation on
perplexity every 1,000 updates with patience 3 (MIME: counted only after 10,000 updates,
``--count-validations-after``; the early-stopping figure is the reference's own, the exp of the mean
of per-pair mean token NLLs: ``ppl_ex``, and for MIME ``ppl_ex_gold``, since the reference's
validation pass conditions on the gold polarity), beam 5 without length penalty and with the
reference's stopping rule (``--beam-stop top``), at most 50 generated tokens.

Training batches are drawn example by example, as the reference's shuffled loader draws its
pairs: ``--ed-history-length 1000`` (the ED teachers' option) makes every example its own episode
with its whole context in one text, which :func:`history_turns` splits back into turns for the
speaker ids. With ParlAI's episodes instead (``--ed-history-length 0``), a batch world walks 16
conversations turn by turn, so consecutive updates see the same 16 conversations and emotion
labels; measured in ``projects/majumder2020_mime/NOTEBOOK.md``.
"""

import contextlib
import math

import torch
from parlai.core.metrics import AverageMetric
from parlai.utils.misc import warn_once

from parlai_empathy.agents.batch_defaults import training_defaults
from parlai_empathy.agents.config_options import add_config_options, config_from_opt
from parlai_empathy.agents.encoder_readout import EncoderReadoutAgent

# MoelDictionaryAgent also by this module's name: saved models' options name their dictionary
# class as parlai_empathy.agents.emotion_generator:MoelDictionaryAgent (--dict-class)
from parlai_empathy.agents.generator_common import (
    MoelDictionaryAgent,
    record_response_metrics,
    warn_unless_papers_word_table,
)
from parlai_empathy.agents.safety import is_blank_chat_message
from parlai_empathy.data.emotions import ED_EMOTIONS, emotion_to_id, polarity
from parlai_empathy.metrics.parlai_metrics import batch_emotion_metrics
from parlai_empathy.models.embeddings import WordEmbedding
from parlai_empathy.models.generator_interface import EmotionTransformerConfig
from parlai_empathy.models.glove import fill_std_value, glove_fill_std
from parlai_empathy.models.mime import MimeReadout
from parlai_empathy.models.precision import bf16_option, resolve_bf16_option
from parlai_empathy.models.transformer_blocks import TransformerSize

USER, MODEL = 0, 1
# the one source of the layer-size defaults (MIME's and Multi-TR's): the options are its fields
SIZE = EmotionTransformerConfig().size
NOAM_PEAK_LR = SIZE.embedding_size**-0.5 * 8000**-0.5  # the reference's NoamOpt(300, 1, 8000) at its peak
REFERENCE_FILL_STD = 0.01  # common_layer.gen_embeddings: randn * 0.01 for what GloVe does not give
# config fields whose option is unset by default: a new model takes the field's default, a saved
# one what its options say (``_new_model_flag``)
NEW_MODEL_FLAGS = ('ffn_final_relu', 'reference_tags')


def history_turns(strings, vecs, parse, delimiter, delimiter_len):
    """ParlAI's history messages as turns. A message whose text joins several turns with the
    history delimiter (a flattened example: ``--ed-history-length N``, each example its own
    episode with its context in one text) counts as those turns, when its pieces tokenize to
    exactly its tokens; every other message is one turn."""
    turns = []
    for text, vec in zip(strings, vecs):
        if delimiter and delimiter in text:
            pieces = [parse(part) for part in text.split(delimiter)]
            if sum(len(p) for p in pieces) + (len(pieces) - 1) * delimiter_len == len(vec):
                turns += pieces
                continue
        turns.append(vec)
    return turns


def utterance_speakers(history_vecs, delimiter_len, total_len):
    """Speaker id of every token of ParlAI's flattened history, aligned to its last ``total_len``.

    The history is ``utt_1 DELIM utt_2 ... DELIM utt_n``; utt_n is the user's, and turns
    alternate going back. Delimiter tokens take the speaker of the utterance they precede.
    """
    speakers = []
    n = len(history_vecs)
    for i, vec in enumerate(history_vecs):
        who = USER if (n - 1 - i) % 2 == 0 else MODEL
        if i:
            speakers += [who] * delimiter_len
        speakers += [who] * len(vec)
    speakers = speakers[-total_len:] if total_len else []
    return [USER] * (total_len - len(speakers)) + speakers


class EmotionGeneratorAgent(EncoderReadoutAgent):
    """Base agent; subclasses define ``build_model`` with :meth:`build_generator`."""

    display_fields = ('predicted_emotion', 'emotion_polarity')  # shown by parlai interactive
    # what a MIME or Multi-TR model whose options lack these was trained with (the reference's
    # forms and plain Adam came later); kept while committed runs' options lack them
    OPT_MIGRATIONS = {
        1: {'embeddings_scale': False, 'ffn_final_relu': False, 'reference_tags': False, 'amsgrad': True},
    }
    paper_glove = 'glove.6B.300d.txt'  # MIME's config.py default, for Multi-TR too

    @classmethod
    def add_cmdline_args(cls, parser, partial_opt=None):
        super().add_cmdline_args(parser, partial_opt=partial_opt)
        group = parser.add_argument_group('Emotion-aware transformer (parlai-empathy)')
        # the layer sizes, alpha and the tag form: EmotionTransformerConfig's fields, under their names
        add_config_options(group, EmotionTransformerConfig, defaults={key: None for key in NEW_MODEL_FLAGS})
        group.add_argument(
            '--label-smoothing',
            type=float,
            default=0.1,
            help='label smoothing of the training loss (reference: 0.1); perplexity is always the plain NLL',
        )
        group.add_argument(
            '--max-response-length', type=int, default=50, help='generated tokens at most (reference: max_dec_step 50)'
        )
        group.add_argument('--glove-init', type='bool', default=True, help='initialize word embeddings from GloVe')
        group.add_argument(
            '--glove-path',
            type=str,
            default=None,
            help='GloVe text file (e.g. glove.6B.300d.txt) or a word table folder of parlai '
            'empathy_word_table; default: offline 6B 50d',
        )
        group.add_argument(
            '--glove-fit',
            choices=['pad', 'project'],
            default='pad',
            help='when GloVe is narrower than the model: pad with random columns '
            'or keep GloVe size and learn a projection',
        )
        group.add_argument(
            '--glove-fill-std',
            type=glove_fill_std,
            default=REFERENCE_FILL_STD,
            help='with --glove-fit pad: the std of the random values of words GloVe lacks '
            "and of the columns beyond its width (default 0.01: the reference's randn * 0.01 "
            "for every value GloVe does not give; 'glove': the std of the found GloVe values, "
            'the rule of every MIME and Multi-TR row trained before this default)',
        )
        group.add_argument(
            '--embeddings-scale',
            type='bool',
            default=None,
            help='multiply word and speaker embeddings by sqrt(D_h) before the input '
            "projection, as the reference's Embeddings.forward (default: true for a new "
            'model; a model saved without this option keeps the unscaled form it was trained with)',
        )
        group.add_argument(
            '--beam-stop',
            choices=['top', 'finished'],
            default='top',
            help="beam search's stopping rule. top: the reference's (MIME/MoEL Translator): "
            'hypotheses that ended stay in the beam, the search stops when the best one has just '
            "ended and returns it; finished: ParlAI's, the best of the first --beam-size "
            'finished hypotheses, which without a length penalty favours short generic replies '
            '(parlai_empathy.agents.reference_beam)',
        )
        group.add_argument(
            '--bf16',
            type=bf16_option,
            default=False,
            help='bfloat16 autocast in the training forward pass: true, false or auto (where '
            'the CPU has AVX-512 BF16 or AMX, or the GPU supports it). Weights, optimizer and the '
            'response log-softmax stay float32, and evaluation (every perplexity, generation) '
            'runs float32, so figures compare with float32 runs; the options saved with the '
            'model record the resolved true/false',
        )
        group.add_argument(
            '--count-validations-after',
            type=int,
            default=0,
            help='validations at or before this many updates are run, logged and saved, '
            'but neither the best valid figure nor the patience counts them: the first '
            'later validation starts both afresh (the MIME reference skips every '
            'validation before 10,000 updates; its Multi-TR counts from the start)',
        )
        parser.set_defaults(
            text_truncate=256,
            label_truncate=128,
            truncate=256,
            dict_tokenizer='moel',
            dict_lower=True,
            optimizer='adam',
            learningrate=NOAM_PEAK_LR,
            betas=(0.9, 0.98),
            adam_eps=1e-9,
            lr_scheduler='invsqrt',
            warmup_updates=8000,
            invsqrt_lr_decay_gamma=8000,
            gradient_clip=-1,
            train_experiencer_only=True,
            ed_history_length=1000,
            validation_every_n_steps=1000,
            validation_metric='ppl_ex',
            validation_metric_mode='min',
            validation_patience=3,
            skip_generation=True,
            inference='beam',
            beam_size=5,
            beam_min_length=1,
            beam_length_penalty=0.0,
        )
        training_defaults(parser, partial_opt, 16)
        return parser

    def __init__(self, opt, shared=None):
        if not shared:
            resolve_bf16_option(opt)
        super().__init__(opt, shared)

    @staticmethod
    def dictionary_class():
        return MoelDictionaryAgent

    def _training_precision(self):
        """``--bf16``: bfloat16 autocast around the training forward pass (not in evaluation)."""
        if not (self.opt.get('bf16') and self.model.training):
            return contextlib.nullcontext()
        device = 'cuda' if next(self.model.parameters()).is_cuda else 'cpu'
        return torch.autocast(device_type=device, dtype=torch.bfloat16)

    # ----- model construction -------------------------------------------------------------
    def transformer_size(self):
        """The layer sizes from the options (the fields' own names); the timing signal covers the
        truncation lengths."""
        opt = self.opt
        return config_from_opt(
            TransformerSize,
            opt,
            max_positions=max(1024, (opt.get('text_truncate') or 0) + 2, (opt.get('label_truncate') or 0) + 2),
            ffn_final_relu=self._new_model_flag('ffn_final_relu', new=SIZE.ffn_final_relu),
        )

    def build_words(self):
        """The shared word table, GloVe-initialized on a fresh model."""
        size = self.transformer_size()
        vocab = [self.dict.ind2tok[i] for i in range(len(self.dict))]
        scale = self._embeddings_scale(size)
        if not self.opt.get('glove_init') or self.opt.get('init_model') or self._model_exists():
            return WordEmbedding(len(vocab), size.embedding_size, self.NULL_IDX, self._glove_table_dim(size), scale)
        words, hit_rate = WordEmbedding.from_glove(
            vocab,
            size.embedding_size,
            self.NULL_IDX,
            self.opt.get('glove_path'),
            self.opt['glove_fit'],
            scale,
            fill_std=fill_std_value(self.opt.get('glove_fill_std')),
        )
        print(f'[ GloVe init: {hit_rate:.1%} of {len(vocab)} words found ]')
        warn_unless_papers_word_table(
            self.opt.get('model') or type(self).__name__,
            self.paper_glove,
            self.opt.get('glove_path'),
            words.glove_dim,
            size.embedding_size,
            self.opt['glove_fit'],
        )
        # saved with the model's opt, so the table is rebuilt in the same shape when it is loaded
        self.opt['word_table_dim'] = words.table.embedding_dim
        return words

    def _embeddings_scale(self, size):
        """sqrt(D_h) or 1 (``--embeddings-scale``, see :meth:`_new_model_flag`)."""
        return math.sqrt(size.embedding_size) if self._new_model_flag('embeddings_scale', new=True) else 1.0

    def _glove_table_dim(self, size):
        """The width of the saved word table: GloVe's (recorded when it was built from GloVe), else
        the model's."""
        return self.opt.get('word_table_dim') or size.embedding_size

    def model_config(self, config_class):
        """``config_class`` (an :class:`EmotionTransformerConfig`) from the options, each field
        from the option of its name."""
        return config_from_opt(
            config_class,
            self.opt,
            size=self.transformer_size(),
            reference_tags=self._new_model_flag('reference_tags', new=EmotionTransformerConfig().reference_tags),
        )

    def build_generator(self, model_class, config):
        """``model_class(vocab_size, config, words, ...)`` on this agent's dictionary and word table."""
        return model_class(
            len(self.dict),
            config,
            words=self.build_words(),
            padding_idx=self.NULL_IDX,
            start_idx=self.START_IDX,
            end_idx=self.END_IDX,
        )

    # ----- vectorization ------------------------------------------------------------------
    def _set_text_vec(self, obs, history, truncate):
        obs = super()._set_text_vec(obs, history, truncate)
        if 'text' in obs and obs.get('text_vec') is None:
            # an empty message: the model still answers, from the CTX token alone
            obs.force_set('text_vec', torch.LongTensor([]))
        if obs.get('text_vec') is not None and 'speaker_vec' not in obs:
            turns = history_turns(
                history.history_strings,
                history.history_vecs,
                history.parse,
                history.delimiter,
                len(history.delimiter_tok),
            )
            speakers = utterance_speakers(turns, len(history.delimiter_tok), len(obs['text_vec']))
            obs.force_set('speaker_vec', torch.LongTensor(speakers))
        return obs

    def batchify(self, obs_batch, sort=False):
        batch = super().batchify(obs_batch, sort=sort)
        if batch.text_vec is None:
            return batch
        observations = [obs_batch[i] for i in batch.valid_indices.tolist()]  # batch order
        speakers = [obs.get('speaker_vec', torch.zeros(len(obs['text_vec']), dtype=torch.long)) for obs in observations]
        padded = torch.zeros_like(batch.text_vec)
        for i, vec in enumerate(speakers):
            padded[i, : len(vec)] = vec
        batch['speaker_vec'] = padded
        emotions = [obs.get('emotion') for obs in observations]
        batch['emotion_ids'] = None
        if all(e is not None for e in emotions):
            try:
                batch['emotion_ids'] = torch.tensor([emotion_to_id(e) for e in emotions], device=batch.text_vec.device)
            except ValueError as err:
                raise ValueError(f'bad "emotion" field in a {self.id} observation: {err}') from err
        return batch

    def _model_input(self, batch):
        # the gold emotion steers the model only while training (polarity, posterior)
        gold = batch.get('emotion_ids') if self.model.training else None
        return (batch.text_vec, batch.get('speaker_vec'), gold)

    def _encoder_input(self, batch):
        return (batch.text_vec, batch.get('speaker_vec'))

    # ----- losses and metrics -------------------------------------------------------------
    def compute_loss(self, batch, return_output=False):
        """The reference's objective in training; every perplexity figure in evaluation."""
        if batch.label_vec is None:
            raise ValueError('Cannot compute loss without a label.')
        training = self.model.training
        gold = batch.get('emotion_ids')
        if gold is None and training:
            raise ValueError(
                f'{self.id} trains on the ED "emotion" field; the task gives none. '
                'Use -t empathy_ed_clean (or empathy_ed).'
            )
        encoder_states = None
        if not training and gold is not None:  # before the pass whose readout is kept
            encoder_states = self.record_extra_eval_metrics(batch, gold)
        smoothing = self.opt['label_smoothing'] if training else 0.0
        with self._training_precision():
            response, _, encoder_states = self.model(
                *self._model_input(batch), ys=batch.label_vec, prev_enc=encoder_states, loss_smoothing=smoothing
            )
            extra, parts = self.core_model.extra_losses(encoder_states, gold) if gold is not None else (0, {})
        if not training:
            self.keep_readout(encoder_states)
        record_response_metrics(self, response)
        loss = self.core_model.response_weight * (response.smoothed if training else response.nll.sum())
        if gold is not None:
            loss = loss + extra
            for key, value in parts.items():
                if key != 'cls' and not training:
                    continue  # the ELBO terms exist only with the gold emotion, in training
                self.record_local_metric(f'loss_{key}', AverageMetric.many([float(value)] * len(gold)))
            for key, values in batch_emotion_metrics(
                encoder_states.aux.emotion_logits.detach().float().cpu(),
                gold.tolist(),
            ).items():
                self.record_local_metric(key, values)
        return (loss, (None, None, encoder_states)) if return_output else loss

    def record_extra_eval_metrics(self, batch, gold):
        """Model-specific evaluation figures (MIME: perplexity with the gold polarity); may return
        the encoder states of the evaluation's own pass, computed alongside, or None."""
        return None

    def _treesearch_factory(self, device, verbose=False):
        if self.opt.get('inference') != 'beam' or self.opt['beam_stop'] != 'top':
            return super()._treesearch_factory(device, verbose)
        from parlai_empathy.agents.reference_beam import ReferenceBeamSearch

        # the settings ParlAI 1.7.2's factory gives its BeamSearch; the reference's stopping rule
        return ReferenceBeamSearch(
            self.opt.get('beam_size', 1),
            min_length=self.beam_min_length,
            block_ngram=self.beam_block_ngram,
            context_block_ngram=self.beam_context_block_ngram,
            length_penalty=self.opt.get('beam_length_penalty', 0.65),
            padding_token=self.NULL_IDX,
            bos_token=self.START_IDX,
            eos_token=self.END_IDX,
            device=device,
            verbose=verbose,
            gpu_beam_blocking=self.opt.get('gpu_beam_blocking', False),
        )

    def _generate(self, batch, beam_size, max_ts, prefix_tokens=None):
        return super()._generate(
            batch, beam_size, min(max_ts, self.opt.get('max_response_length') or max_ts), prefix_tokens=prefix_tokens
        )

    def add_readout_fields(self, output, readout):
        predicted = readout.emotion_logits.argmax(dim=-1).tolist()
        output['predicted_emotion'] = [ED_EMOTIONS[i] for i in predicted]
        if isinstance(readout, MimeReadout):  # the polarity MIME's mimicry followed
            positive = readout.user_positive.tolist()
        else:
            positive = [polarity(i) == 'positive' for i in predicted]
        output['emotion_polarity'] = ['positive' if flag else 'negative' for flag in positive]

    def observe(self, observation):
        # in chat an empty message is answered without the model (SafeAgentMixin)
        if (
            'text' in observation
            and not str(observation.get('text') or '').strip()
            and not is_blank_chat_message(self.opt, observation)
        ):
            warn_once(f'{self.id}: empty message; answering from the CTX token alone')
        return super().observe(observation)
