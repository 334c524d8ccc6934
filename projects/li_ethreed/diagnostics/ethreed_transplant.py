"""Weight transplant: the reference ETHREED and ours, same weights, same batch, stage by stage.

This script finds where our ETHREED (``parlai_empathy/models/ethreed.py``) computes a different
function from the reference code (outsider-lj/ethreed @ 397bb20). It builds the reference's
``lj_model.ETHREED`` (unchanged, from its ``configs.get_config``, initialised as
``RLSolver.build_generate`` does, ``lj_solver.py:145-155``) and our
``parlai_empathy.models.ethreed.Ethreed`` with the reference's sizes (embedding 300, utterance
Bi-GRU 2 x 300, D_g = D_p = D_e = 300, decoder 300) in one process, copies every reference weight into
the matching place of ours, runs one training forward and backward of both on one batch (the reference's
step as ``RLSolver.train`` writes it, ``model/lj_solver.py:304-355``; ours as ``agents/ethreed.py``'s
``compute_loss``), and prints per stage the largest absolute difference, each loss term, and per weight the
relative difference of the gradients.

How the two batches correspond. The reference reads a conversation as turns (speaker utterance P,
listener utterance R) and, in one pass, predicts every listener utterance R_t from the tracker
state after P_t (its decoder attends to and copies from P_t; its responder emotion is the tracker
stepped on R_t). Ours reads one example per response: the dialogue P_1 R_1 ... P_t (the answered
party is the speaker) with response R_t. So a reference batch of conversations with turns
``--turns 3,2`` is our batch of 3 + 2 = 5 examples (dialogues of 1, 3, 5 and 1, 3 utterances),
in the same order. Our speaker/listener ids 0/1 and the reference's P/R slots coincide. Ours is
built with the reference's special ids (pad 0, unk 1, start 2, end 3) so that token ids are the
same on both sides; every utterance ends with the end token, as the reference's preprocessing
does.

Weights (reference -> ours): ``encoder.embedding`` (tied with the decoder's) -> the shared word
table; ``encoder.rnn`` -> ``encoder.utterances.gru``; ``feature_cell.{g,p,e,c}_cell`` -> the
tracker's ``{global,party,emotion,content}_gru``; ``feature_cell.attention.scalar`` ->
``tracker.history_attention.score``; ``emotion2pre`` and ``prior_h`` -> ``policy.state.0`` and
``.2``; ``prior_mu`` / ``prior_var`` -> ``policy.mu`` / ``.variance``; ``emo_classification`` ->
``classifier`` (rows permuted from the reference's EMO_LABELS order to our ED_EMOTIONS ids);
``context2decoder`` -> ``decoder_init``; ``context2decoder_emotion`` -> ``response_emotion``;
``decoder.enc_bilinear`` (weight [1, 300, 600] -> [300, 600], bias) -> ``decoder.attention``;
``decoder.cover_weight`` -> ``attention.coverage_weight``; ``decoder.emo_bilinear`` ->
``decoder.emotion_gate``; ``decoder.rnncell.layers.0`` -> ``decoder.cell``; ``pre_out`` ->
``pre_output``; ``out`` -> ``vocab_output``; ``ptr`` -> ``copy_switch``. Reference parameters
with no counterpart (the modules it builds and never uses: ``context_encoder``,
``feature_cell.content_attention``, ``decoder.linear_``, ``decoder.emo_gate``) are listed with
their gradient (none: they are not on the loss path).

Noise and dropout: ``torch.randn`` (the reference's policy noise, ``lj_model.py:170``) and
``torch.randn_like`` (ours) return zeros during both passes, so R is its mean mu. Both run in
training mode with dropout 0 (reference argv ``--dropout 0 --dropout_rec 0 --out_drop 0``; its
``word_drop`` is 0 by default; ours ``EthreedConfig(dropout=0)``).

Documented deviations (the module docstring of ``parlai_empathy/models/ethreed.py``) are made
equal by default, each with a flag that keeps the reference's own version, so that what remains
is what nobody has documented:

* ``--keep-ref-pointer``: the reference mixes p_gen times the *raw logits* with the copy weights
  and its solver takes a log-softmax over the sum (``layers/lj_decoder.py:425-429``,
  ``lj_solver.py:342``); otherwise its ``DecoderRNN.forward_step`` is wrapped to return
  log[(1 - p_ptr) softmax(logits) + p_ptr * copy], built from its own logits, p_ptr, attention
  and source ids (the solver's log-softmax of a normalised log-distribution is the identity, in
  value and gradient);
* ``--keep-ref-l2``: the released loss has no L2 (``lj_solver.py:348``, ``+kl_div.mean()``
  commented out, and ``lj_model.py:230`` computes KL(p || q) averaged over the 32 classes);
  otherwise ours, KL(q || p) summed over the classes and averaged over responses, weight 1, is
  added to the reference's loss from its own q (classifier of the dropped-out R) and p (of the
  real responder state);
* ``--pad``: utterances of different lengths (the reference pads every utterance to 40 tokens,
  attends to and copies from the padding, and sums the coverage loss over all 40 decoder steps;
  ours skips padding and counts the gold response's steps). Default: every utterance, source and
  response alike, is 39 words + end = the reference's full 40 tokens, so there is no padding.

``--double`` builds both models in float64 (``torch.set_default_dtype``), to tell float32 rounding
from real differences in what remains.

Out-of-vocabulary words (the reference numbers extended ids from the *target* utterance) are
equalised by the batch: every word is in the vocabulary (no UNK, no extended id), so the
reference's ``OOVDict`` stays empty and ``ext_vocab_size`` is the vocabulary size. Its
``sent2id`` (a dictionary lookup) is therefore skipped: the batch is built as token ids directly.

Run with the reference's Python (the one ``reference_speed.py`` sets up; our model only needs
torch)::

    ../ref-venv/bin/python projects/li_ethreed/diagnostics/ethreed_transplant.py --ethreed-repo /tmp/ref-ethreed \\
        [--out F.json]
"""

import argparse
import ast
import os
import pickle
import sys
import tempfile
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, 'bench'))  # reference_speed: how a reference checkout is made to run
sys.path.insert(0, os.path.join(ROOT, 'projects', 'common', 'diagnostics'))  # transplant_common
sys.path.insert(0, ROOT)
from transplant_common import Mapping, report  # noqa: E402

SENTENCE = 40  # the reference's max_sentence_length (its encoder_outputs.view(-1, 2, 40, 600))
PAD_ID, UNK_ID, SOS_ID, EOS_ID = 0, 1, 2, 3  # the reference's utils/vocab.py


def reference_emotion_labels(repo):
    """EMO_LABELS of the reference's lj_solver.py (its label ids), read without importing it."""
    with open(os.path.join(repo, 'model', 'lj_solver.py'), encoding='utf-8') as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, 'id', None) == 'EMO_LABELS' for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise RuntimeError('EMO_LABELS not found in model/lj_solver.py')


def build_reference(repo, vocab_size, conversations, args):
    import reference_speed as rs

    rs.reference_shims(repo, rs.SOURCE_PATCHES['ethreed'])
    model_dir = os.path.join(repo, 'model')
    sys.path.insert(0, model_dir)
    stub = types.ModuleType('layers.lj_layers_add')  # imported by layers/__init__.py, not in the repo
    stub.__all__ = []
    sys.modules['layers.lj_layers_add'] = stub
    work = tempfile.mkdtemp(prefix='ethreed-transplant-')
    os.chdir(work)  # Config() creates its save directory under configs.save_dir
    os.makedirs('ED', exist_ok=True)
    os.makedirs('datasets', exist_ok=True)
    open(os.path.join('datasets', 'glove.840B.300d.txt'), 'w').close()  # GloVe absent: nn.Embedding init
    word2id = {'<pad>': PAD_ID, '<unk>': UNK_ID, '<sos>': SOS_ID, '<eos>': EOS_ID}
    word2id.update({f'w{i}': i for i in range(4, vocab_size)})
    with open(os.path.join('ED', 'word2id.pkl'), 'wb') as handle:
        pickle.dump(word2id, handle)
    with open(os.path.join('ED', 'id2word.pkl'), 'wb') as handle:
        pickle.dump({i: w for w, i in word2id.items()}, handle)
    sys.argv = [
        os.path.join(model_dir, 'lj_train.py'),
        '--batch_size',
        str(conversations),
        '--dropout',
        '0',
        '--dropout_rec',
        '0',
        '--out_drop',
        '0',
    ]
    from pathlib import Path

    import configs
    import torch

    configs.project_dir = configs.save_dir = Path(work)
    configs.data_dict['ED'] = Path(work) / 'ED'
    configs.Config.behavior_state = False  # read by lj_model.py, never defined by configs.py
    config = configs.get_config(mode='train')
    import layers
    import lj_model

    model = lj_model.ETHREED(config)
    # RLSolver.build_generate's initialisation (lj_solver.py:145-155)
    for name, param in model.named_parameters():
        if 'weight_hh' in name:
            torch.nn.init.orthogonal_(param)
        if 'bias_hh' in name:
            dim = int(param.size(0) / 3)
            param.data[dim : 2 * dim].fill_(2.0)
    return model, config, layers


def build_mapping(ours, ref, to_ref):
    mapping = Mapping(ours, ref)
    mapping.add('encoder.utterances.words.table.weight', 'encoder.embedding.weight')
    for kind in ('weight_ih', 'weight_hh', 'bias_ih', 'bias_hh'):
        for suffix in ('_l0', '_l0_reverse'):
            mapping.add(f'encoder.utterances.gru.{kind}{suffix}', f'encoder.rnn.{kind}{suffix}')
        for mine, theirs in (
            ('global_gru', 'g_cell'),
            ('party_gru', 'p_cell'),
            ('emotion_gru', 'e_cell'),
            ('content_gru', 'c_cell'),
        ):
            mapping.add(f'encoder.tracker.{mine}.{kind}', f'feature_extraction.feature_cell.{theirs}.{kind}')
        mapping.add(f'decoder.cell.{kind}', f'decoder.rnncell.layers.0.{kind}')
    mapping.add(
        'encoder.tracker.history_attention.score.weight', 'feature_extraction.feature_cell.attention.scalar.weight'
    )
    for kind in ('weight', 'bias'):
        mapping.add(f'encoder.classifier.{kind}', f'emo_classification.{kind}', lambda ts: ts[0][to_ref])
        for mine, theirs in (
            ('policy.state.0', 'emotion2pre.linears.0'),
            ('policy.state.2', 'prior_h.linears.0'),
            ('policy.mu', 'prior_mu'),
            ('policy.variance', 'prior_var'),
            ('decoder_init', 'context2decoder.linears.0'),
            ('response_emotion', 'context2decoder_emotion.linears.0'),
        ):
            mapping.add(f'encoder.{mine}.{kind}', f'{theirs}.{kind}')
        for mine, theirs in (
            ('emotion_gate', 'emo_bilinear'),
            ('pre_output', 'pre_out'),
            ('vocab_output', 'out'),
            ('copy_switch', 'ptr'),
        ):
            mapping.add(f'decoder.{mine}.{kind}', f'decoder.{theirs}.{kind}')
    mapping.add('decoder.attention.weight.weight', 'decoder.enc_bilinear.weight', lambda ts: ts[0][0])
    mapping.add('decoder.attention.bias', 'decoder.enc_bilinear.bias')
    mapping.add('decoder.attention.coverage_weight', 'decoder.cover_weight')
    missing = set(mapping.ours) - {pair[0] for pair in mapping.pairs}
    if missing:
        raise RuntimeError(f'our parameters without a reference counterpart: {sorted(missing)}')
    return mapping


def recorder(store, key, pick=lambda out: out):
    """A forward hook appending ``pick(output)`` (not detached) to ``store[key]``."""

    def hook(_module, _inputs, output):
        store.setdefault(key, []).append(pick(output))

    return hook


def make_batch(args, n_labels):
    """Conversations of ``args.turns`` turns, each turn (P, R) as token-id lists of at most 40 ids
    ending with EOS; random words 4.. (in the vocabulary), random labels (reference ids)."""
    import torch

    g = torch.Generator().manual_seed(args.seed)
    turns = [int(t) for t in args.turns.split(',')]
    if turns != sorted(turns, reverse=True):
        raise SystemExit("--turns must be in decreasing order (the reference's collate_fn sorts)")

    def utterance():
        words = SENTENCE - 1 if not args.pad else int(torch.randint(3, SENTENCE - 1, (1,), generator=g))
        return torch.randint(4, args.vocab, (words,), generator=g).tolist() + [EOS_ID]

    convs = [[[utterance(), utterance()] for _ in range(n)] for n in turns]
    labels = [torch.randint(0, n_labels, (2 * n,), generator=g).tolist() for n in turns]
    return turns, convs, labels


def run_reference(ref, config, layers, turns, convs, labels, args, live):
    """RLSolver.train's step for one batch (lj_solver.py:304-355), with hooks; returns losses."""
    import numpy as np
    import torch

    pad = lambda s: s + [PAD_ID] * (SENTENCE - len(s))  # noqa: E731  (pad_sentences' layout)
    sentences = [[[pad(p), pad(r)] for p, r in conv] for conv in convs]
    sentence_length = [np.array([[len(p), len(r)] for p, r in conv]) for conv in convs]
    conversation_length = [2 * n for n in turns]
    conversation_turns = list(turns)
    speakers = [[[[0, 1], [1, 0]] for _ in range(n)] for n in turns]
    ext_vocab_size = config.vocab_size  # OOVDict(config.vocab_size) with no out-of-vocabulary word

    # lj_solver.py:304-339 (sent2id is a dictionary lookup here: the ids are built directly)
    input_sentences = [sent for conv in sentences for turn in conv for sent in turn]
    target_sentences = [turn[1] for conv in sentences for turn in conv]
    input_sentence_length = [int(n) for len_list in sentence_length for turn_l in len_list for n in turn_l]
    P_target_emotions, R_target_emotions = [], []
    for emo in labels:
        for i, e in enumerate(emo):
            (P_target_emotions if i % 2 == 0 else R_target_emotions).append(int(e))
    speakers_mask = [s for one in speakers for s in one]
    input_sentences = torch.LongTensor(input_sentences)
    target_sentences = torch.LongTensor(target_sentences)
    input_conversation_turns = torch.LongTensor(conversation_turns)
    input_sentence_length = torch.LongTensor(input_sentence_length)
    input_conversation_length = torch.LongTensor(conversation_length)
    speakers_mask = torch.FloatTensor(speakers_mask)
    P_target_emotions = torch.LongTensor(P_target_emotions)
    R_target_emotions = torch.LongTensor(R_target_emotions)

    coverage_losses, kl_div, sentence_logits, emotions_pred = ref(
        config.batch_size,
        ext_vocab_size,
        input_sentences,
        input_sentence_length,
        input_conversation_turns,
        input_conversation_length,
        target_sentences,
        speakers_mask,
        decode=False,
    )
    P_emotions_pred, R_emotions_pred = emotions_pred
    log_prob_sentence = torch.nn.functional.log_softmax(sentence_logits, 2)
    P_log_prob_emotions = torch.nn.functional.log_softmax(P_emotions_pred, 1)
    batch_loss, batch_loss_lm, batch_loss_emo_class, ppl = layers.multi_loss(
        log_prob_sentence,
        P_log_prob_emotions,
        target_sentences,
        P_target_emotions,
        conversation_length,
        sentence_length,
    )
    batch_loss = batch_loss_lm + 0.5 * batch_loss_emo_class + coverage_losses
    R_log_prob_emotions = torch.nn.functional.log_softmax(R_emotions_pred, 1)
    batch_loss_emotions_R = torch.nn.NLLLoss()(
        R_log_prob_emotions.contiguous().view(-1, R_log_prob_emotions.size(-1)), R_target_emotions.contiguous().view(-1)
    )
    batch_loss += 0.5 * batch_loss_emotions_R
    q_logits, p_logits = live['emo_classification'][2], live['emo_classification'][1]  # R prior, R real
    log_q, log_p = torch.log_softmax(q_logits, -1), torch.log_softmax(p_logits, -1)
    l2 = (log_q.exp() * (log_q - log_p)).sum(-1).mean()  # KL(q || p), ours
    if not args.keep_ref_l2:
        batch_loss = batch_loss + l2
    batch_loss.backward()  # (its clip_grad_norm_ and optimizer step are not run: gradients compared)
    return (
        {
            'total': batch_loss.item(),
            'L3 response NLL': batch_loss_lm.item(),
            'L1 answered CE': batch_loss_emo_class.item(),
            'L1 responder CE': batch_loss_emotions_R.item(),
            'L2 KL(q||p)': l2.item(),
            'L4 coverage': coverage_losses.item(),
            'ref kl_div (KL(p||q) mean over classes, unused by its loss)': float(kl_div),
        },
        log_prob_sentence.detach(),
        target_sentences,
    )


def ours_batch(turns, convs, labels, to_ours):
    """Our examples: for turn t of each conversation, the dialogue P_1 R_1 .. P_t, response R_t."""
    import torch

    from parlai_empathy.models.ethreed import LISTENER, SPEAKER

    utterances, dialogue_lengths, responses, answered, responder, index = [], [], [], [], [], []
    for c, conv in enumerate(convs):
        for t in range(len(conv)):
            dialogue = [u for p, r in conv[:t] for u in (p, r)] + [conv[t][0]]
            utterances += dialogue
            dialogue_lengths.append(len(dialogue))
            responses.append(conv[t][1])
            answered.append(to_ours[labels[c][2 * t]])
            responder.append(to_ours[labels[c][2 * t + 1]])
            index.append((c, t))
    lengths = torch.tensor([len(u) for u in utterances])
    tokens = torch.full((len(utterances), int(lengths.max())), PAD_ID, dtype=torch.long)
    for i, u in enumerate(utterances):
        tokens[i, : len(u)] = torch.tensor(u)
    B, T = len(responses), max(dialogue_lengths)
    roles = torch.zeros(B, T, dtype=torch.long)
    for b, n in enumerate(dialogue_lengths):
        roles[b, :n] = torch.tensor([SPEAKER if k % 2 == 0 else LISTENER for k in range(n)])
    ys = torch.full((B, max(len(r) for r in responses)), PAD_ID, dtype=torch.long)
    for b, r in enumerate(responses):
        ys[b, : len(r)] = torch.tensor(r)
    return (
        tokens,
        lengths,
        torch.tensor(dialogue_lengths),
        roles,
        ys,
        torch.tensor(answered),
        torch.tensor(responder),
        index,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--ethreed-repo', required=True)
    parser.add_argument('--turns', default='3,2', help='turns per conversation, decreasing (default 3,2)')
    parser.add_argument('--vocab', type=int, default=400)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--keep-ref-pointer', action='store_true')
    parser.add_argument('--keep-ref-l2', action='store_true')
    parser.add_argument('--pad', action='store_true', help='utterances of random lengths (padding)')
    parser.add_argument(
        '--double',
        action='store_true',
        help='both models and all tensors in float64 (torch.set_default_dtype before building): '
        'shows which residuals are float32 rounding',
    )
    parser.add_argument('--out', help='write the figures as JSON here')
    args = parser.parse_args()
    out = os.path.abspath(args.out) if args.out else None
    repo = os.path.abspath(args.ethreed_repo)
    cli = sys.argv[1:]  # the reference's config reads sys.argv, which build_reference sets

    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    if args.double:
        torch.set_default_dtype(torch.float64)
    from parlai_empathy.data.emotions import ED_EMOTIONS

    ref_labels = reference_emotion_labels(repo)
    to_ref = [ref_labels.index(label) for label in ED_EMOTIONS]  # our id -> reference id
    to_ours = [ED_EMOTIONS.index(label) for label in ref_labels]
    turns, convs, labels = make_batch(args, len(ref_labels))

    torch.manual_seed(args.seed)  # the reference's initialisation draws from the global stream
    ref, config, layers = build_reference(repo, args.vocab, len(turns), args)

    from parlai_empathy.models.embeddings import WordEmbedding
    from parlai_empathy.models.ethreed import Ethreed, EthreedConfig

    assert (
        config.embedding_size
        == config.D_g
        == config.D_p
        == config.D_e
        == config.decoder_hidden_size
        == config.encoder_hidden_size
        == config.context_size
    ), 'ours has one hidden size'
    words = WordEmbedding(config.vocab_size, config.embedding_size, PAD_ID)
    ours = Ethreed(
        words,
        config.vocab_size,
        EthreedConfig(hidden_size=config.D_e, dropout=0.0),
        padding_idx=PAD_ID,
        start_idx=SOS_ID,
        end_idx=EOS_ID,
        unk_idx=UNK_ID,
    )
    mapping = build_mapping(ours, ref, to_ref)
    mapping.copy()

    # ----- hooks: reference ----------------------------------------------------------------------
    rl, ol = {}, {}  # live (graph-carrying) captures: reference, ours
    cell = ref.feature_extraction.feature_cell
    hooks = [
        ref.encoder.register_forward_hook(recorder(rl, 'encoder')),
        cell.register_forward_hook(recorder(rl, 'cell')),
        cell.attention.register_forward_hook(recorder(rl, 'history', lambda o: o[0])),
        ref.prior_mu.register_forward_hook(recorder(rl, 'mu')),
        ref.prior_var.register_forward_hook(recorder(rl, 'variance_raw')),
        ref.emo_classification.register_forward_hook(recorder(rl, 'emo_classification')),
        ref.context2decoder.register_forward_hook(recorder(rl, 'decoder_init')),
        ref.context2decoder_emotion.register_forward_hook(recorder(rl, 'response_emotion')),
        ref.decoder.out.register_forward_hook(recorder(rl, 'vocab_logits', lambda o: o.squeeze(0))),
    ]
    emp_policy = ref.emp_policy

    def policy_wrapper(*a, **k):
        R, kl = emp_policy(*a, **k)
        rl.setdefault('R', []).append(R)
        return R, kl

    ref.emp_policy = policy_wrapper
    forward_step = ref.decoder.forward_step

    def step_wrapper(x, last_hidden, *a, encoder_word_idx=None, ext_vocab_size=None, **k):
        output, hidden, enc_attn, prob_ptr = forward_step(
            x, last_hidden, *a, encoder_word_idx=encoder_word_idx, ext_vocab_size=ext_vocab_size, **k
        )
        for key, value in (
            ('dec_hidden', hidden[-1]),
            ('dec_attention', enc_attn),
            ('p_ptr', prob_ptr.squeeze(1)),
            ('dec_previous', last_hidden[-1]),
        ):
            rl.setdefault(key, []).append(value)
        if not args.keep_ref_pointer:  # a pointer-generator distribution from its own parts
            logits = rl['vocab_logits'][-1]
            generate = (1 - prob_ptr) * torch.softmax(logits, dim=-1)
            mixed = F.pad(generate, (0, ext_vocab_size - generate.size(1))).scatter_add(
                1, encoder_word_idx, prob_ptr * enc_attn
            )
            output = torch.log(mixed)
        return output, hidden, enc_attn, prob_ptr

    ref.decoder.forward_step = step_wrapper

    randn, randn_like = torch.randn, torch.randn_like
    torch.randn = lambda *a, **k: torch.zeros(*a, **{n: v for n, v in k.items() if n != 'generator'})
    torch.randn_like = lambda t, *a, **k: torch.zeros_like(t)
    ref.train()
    ref_losses, ref_log_p, ref_targets = run_reference(ref, config, layers, turns, convs, labels, args, rl)

    # ----- ours ------------------------------------------------------------------------------------
    tokens, lengths, dialogue_lengths, roles, ys, answered, responder, index = ours_batch(turns, convs, labels, to_ours)
    hooks += [
        ours.encoder.utterances.register_forward_hook(recorder(ol, 'utterances')),
        ours.encoder.tracker.history_attention.register_forward_hook(recorder(ol, 'history', lambda o: o[0])),
        ours.encoder.policy.mu.register_forward_hook(recorder(ol, 'mu')),
        ours.encoder.policy.variance.register_forward_hook(recorder(ol, 'variance_raw')),
        ours.encoder.policy.register_forward_hook(recorder(ol, 'R')),
        ours.decoder.vocab_output.register_forward_hook(recorder(ol, 'vocab_logits')),
    ]
    tracker_step, decoder_run = ours.encoder.tracker.step, ours.decoder.run

    def our_step(*a, **k):
        result = tracker_step(*a, **k)
        ol.setdefault('tracker', []).append(result)
        return result

    def our_run(*a, **k):
        result = decoder_run(*a, **k)
        ol.setdefault('steps', []).append(result[0])
        return result

    ours.encoder.tracker.step, ours.decoder.run = our_step, our_run
    ours.train()
    response, _, enc = ours(tokens, lengths, dialogue_lengths, roles, None, ys=ys, loss_smoothing=0.0)
    l3 = (response.nll / response.tokens.clamp(min=1)).mean()
    extra, parts = ours.extra_losses(enc, answered, responder)
    loss = l3 + extra
    loss.backward()
    aux, steps = enc.aux, ol['steps'][0]
    with torch.no_grad():
        _, log_copy = ours.decoder.distributions(steps, aux, enc.keep)
        our_log_p = ours.decoder.log_probs(steps, enc)
        l1a = F.cross_entropy(aux.answered_logits, answered)
        l1r = F.cross_entropy(aux.real_responder_logits, responder)
    torch.randn, torch.randn_like = randn, randn_like
    for hook in hooks:
        hook.remove()
    our_losses = {
        'total': loss.item(),
        'L3 response NLL': l3.item(),
        'L1 answered CE': l1a.item(),
        'L1 responder CE': l1r.item(),
        'L2 KL(q||p)': parts['kl'].item(),
        'L4 coverage': parts['cov'].item(),
    }

    # ----- compare -----------------------------------------------------------------------------------
    stages = []

    def stage(name, mine, theirs):
        mine, theirs = [torch.as_tensor(x).detach().double() for x in (mine, theirs)]
        if mine.shape != theirs.shape:
            raise ValueError(f'{name}: ours {tuple(mine.shape)}, reference {tuple(theirs.shape)}')
        stages.append(
            {
                'stage': name,
                'max_abs_diff': (mine - theirs).abs().max().item(),
                'max_abs_ref': theirs.abs().max().item(),
                'values': mine.numel(),
            }
        )

    conv_offset = [2 * sum(turns[:c]) for c in range(len(turns))]
    sent = lambda c, t, r: conv_offset[c] + 2 * t + r  # noqa: E731  reference sentence index
    ref_hidden, ref_outputs = rl['encoder'][0]
    ref_u = torch.cat([ref_hidden[0], ref_hidden[1]], dim=-1)  # [N, 600] = [forward last ; backward first]
    our_u, our_outputs = ol['utterances'][0]
    rows, mine_o, theirs_o = [], [], []
    k = 0
    for b, (c, _t) in enumerate(index):
        for j in range(int(dialogue_lengths[b])):
            s = sent(c, j // 2, j % 2)
            rows.append(s)
            n = int(lengths[k])
            mine_o.append(our_outputs[k, :n])
            theirs_o.append(ref_outputs[s, :n])
            k += 1
    stage('utterance u (context utterances)', our_u, ref_u[rows])
    stage('utterance encoder outputs (real positions)', torch.cat(mine_o), torch.cat(theirs_o))
    stage('utterance u (gold responses)', ol['utterances'][1][0], ref_u[[sent(c, t, 1) for c, t in index]])

    # tracker: per reference turn, feature_cell returns (g_ [P; R], q_, e_, c_, con_, alpha, a_, re_)
    cells = rl['cell']

    def pick(key, c, t):
        return {
            'gP': cells[t][0][0],
            'gR': cells[t][0][1],
            'q': cells[t][1],
            'e': cells[t][2],
            'c': cells[t][3],
            'con': cells[t][4],
            'a': cells[t][6],
            're': cells[t][7],
        }[key][c]

    zero = torch.zeros(config.D_e)
    state = {name: getattr(aux.tracker, name) for name in ('global_last', 'party', 'emotion', 'content')}
    real_state, e_real = ol['tracker'][-1]
    pairs = {
        'global state g after P_t': [(state['global_last'][b], pick('gP', c, t)) for b, (c, t) in enumerate(index)],
        'content state c after P_t': [(state['content'][b], pick('con', c, t)) for b, (c, t) in enumerate(index)],
        'speaker party state after P_t': [(state['party'][b, 0], pick('q', c, t)) for b, (c, t) in enumerate(index)],
        'listener party state after R_{t-1}': [
            (state['party'][b, 1], pick('a', c, t - 1) if t else zero) for b, (c, t) in enumerate(index)
        ],
        'speaker emotion state after P_t': [
            (state['emotion'][b, 0], pick('e', c, t)) for b, (c, t) in enumerate(index)
        ],
        'listener emotion state after R_{t-1}': [
            (state['emotion'][b, 1], pick('re', c, t - 1) if t else zero) for b, (c, t) in enumerate(index)
        ],
        'history attention pool at P_t': [
            (ol['history'][int(dialogue_lengths[b]) - 1][b], pick('c', c, t)) for b, (c, t) in enumerate(index)
        ],
        'history attention pool at gold R_t': [
            (ol['history'][-1][b], rl['history'][0 if t == 0 else 2 * t][c]) for b, (c, t) in enumerate(index)
        ],
        'global state g after gold R_t': [
            (real_state.global_last[b], pick('gR', c, t)) for b, (c, t) in enumerate(index)
        ],
        'listener party state after gold R_t': [
            (real_state.party[b, 1], pick('a', c, t)) for b, (c, t) in enumerate(index)
        ],
        'listener emotion state after gold R_t': [(e_real[b], pick('re', c, t)) for b, (c, t) in enumerate(index)],
    }
    for name, values in pairs.items():
        stage(name, torch.stack([m for m, _ in values]), torch.stack([r for _, r in values]))

    emo = rl['emo_classification']
    stage('emotion logits, answered (P_t)', aux.answered_logits, emo[0][:, to_ref])
    stage('emotion logits, real responder (gold R_t)', aux.real_responder_logits, emo[1][:, to_ref])
    stage('emotion logits, planned R (policy)', aux.responder_logits, emo[2][:, to_ref])
    stage('policy mu', ol['mu'][0], rl['mu'][0])
    stage('policy sigma^2 = softplus(.)', F.softplus(ol['variance_raw'][0]), F.softplus(rl['variance_raw'][0]))
    stage('policy R (eps = 0)', ol['R'][0], rl['R'][0])
    stage("planned emotion R' = tanh(W R)", aux.response_emotion, rl['response_emotion'][0])
    stage('decoder initial state tanh(W c)', aux.decoder_init, rl['decoder_init'][0])

    real_y = ys.ne(PAD_ID)  # [B, T] our real target steps
    T = ys.size(1)
    ref_steps = {
        key: torch.stack(rl[key], dim=1)[:, :T]
        for key in ('dec_previous', 'dec_hidden', 'dec_attention', 'p_ptr', 'vocab_logits')
    }
    stage('decoder h_{t-1} (real steps)', steps.previous[real_y], ref_steps['dec_previous'][real_y])
    stage('decoder h_t (real steps)', steps.hidden[real_y], ref_steps['dec_hidden'][real_y])
    S = steps.attention.size(2)
    keep = enc.keep.unsqueeze(1).expand(-1, T, -1) & real_y.unsqueeze(2)
    stage(
        'attention a_t (real steps, real source positions)',
        steps.attention[keep],
        ref_steps['dec_attention'][:, :, :S][keep],
    )
    stage('copy switch p_ptr (real steps)', log_copy.exp()[real_y], ref_steps['p_ptr'][real_y])
    stage(
        'vocabulary logits W_o W_p [h; emo] (real steps)',
        ol['vocab_logits'][0][real_y],
        ref_steps['vocab_logits'][real_y],
    )
    V = our_log_p.size(2)
    stage('output log P(w) (real steps, whole vocabulary)', our_log_p[real_y], ref_log_p[:, :T, :V][real_y])
    stage(
        'output log P(gold) (real steps)',
        our_log_p.gather(2, ys.unsqueeze(2)).squeeze(2)[real_y],
        ref_log_p[:, :T].gather(2, ref_targets[:, :T].unsqueeze(2)).squeeze(2)[real_y],
    )

    print(
        'batch: conversations with turns',
        turns,
        '->',
        len(index),
        'responses;',
        'padding' if args.pad else 'no padding (every utterance 40 tokens)',
        '| pointer:',
        'reference raw-logit mix' if args.keep_ref_pointer else 'equalised (probability mix)',
        '| L2:',
        'reference (none)' if args.keep_ref_l2 else 'equalised (KL(q||p) added to the reference)',
        '| dtype:',
        torch.get_default_dtype(),
    )
    losses = {key: [ref_losses[key], our_losses.get(key)] for key in ref_losses}
    report(
        mapping,
        stages,
        losses,
        out,
        what='projects/li_ethreed/diagnostics/ethreed_transplant.py: the reference ETHREED '
        '(outsider-lj/ethreed) and ours on the same weights and batch',
        repo=repo,
        placeholder='REF_ETHREED',
        cli=cli,
        extra={'dtype': str(torch.get_default_dtype()), 'turns': turns, 'responses': len(index)},
        show_unmapped=True,
    )


if __name__ == '__main__':
    main()
