"""Weight transplant: the reference MIME and ours, same weights, same batch, stage by stage.

The reference's emotion classifier leaves chance at ~4,500 updates, ours never does,
with the same data, word table, loss, optimizer and schedule (``reference_curve.py`` beside this
script). This script finds where the two models compute different functions. It builds declare-lab/MIME's
``Train_MIME`` (7c34f3a, unchanged, initialised as its ``main.py`` does) and our
``parlai_empathy.models.mime.Mime`` in one process, copies every reference weight into the
matching place of ours (fused query/key/value maps, the emotion-encoder input map split in two,
the emotion rows and the groups' output units permuted from the reference's label order to ours,
the CLS and USR/SYS word rows into our CTX vector and speaker table), runs one training forward
and backward of both on one batch, and prints per stage the largest absolute difference, and per
weight the relative difference of the gradients.

Noise: ``torch.randn_like`` returns zeros during both passes, so each z is its mean (the sampled
functions are compared at eps = 0). Both run in training mode with dropout 0 (the reference's
default and ours).

Known deviations (documented in ``parlai_empathy/models/mime.py`` and ``transformer_blocks.py``)
are made equal by default, each with a flag that keeps the reference's own version, so that what
remains is what nobody has documented:

* ``--keep-ref-layernorm``: the reference's LayerNorm (unbiased std, eps added to the std);
  otherwise it is patched to ``torch.nn.functional.layer_norm`` as ours;
* ``--keep-ref-logvar``: its prior and posterior return the positive group's log-variance for the
  negative group; otherwise patched to each group's own (ours);
* ``--pad-context``: contexts of different lengths (the reference convolves over padding, ours
  zeroes it; and its posterior averages padding); default: equal lengths, no padding. With
  ``--ours-conv-over-padding`` ours does as the reference (``conv_over_padding=True``).

Run with the reference's Python (the one ``reference_speed.py`` sets up; our model only needs
torch)::

    ../ref-venv/bin/python projects/majumder2020_mime/diagnostics/mime_transplant.py --mime-repo /tmp/ref-mime \\
        [--out transplant.json]
"""

import argparse
import math
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, 'bench'))  # reference_speed: how a reference checkout is made to run
sys.path.insert(0, os.path.join(ROOT, 'projects', 'common', 'diagnostics'))  # transplant_common
sys.path.insert(0, ROOT)
from transplant_common import Mapping, add_batch_arguments, reference_model, report  # noqa: E402


def build_reference(repo, vocab_size, batch, args):
    import reference_speed as rs

    rs.reference_shims(repo, {})
    sys.path.insert(0, repo)
    os.chdir(tempfile.mkdtemp(prefix='mime-transplant-'))  # Train_MIME may create save dirs here
    open('empty.txt', 'w').close()
    sys.argv = [os.path.join(repo, 'main.py'), '--batch_size', str(batch), '--emb_file', 'empty.txt']
    import torch
    from utils import config

    config.USE_CUDA = False
    from model import VAE_noEmo_posterior as vae
    from model import common_layer, trainer

    if not args.keep_ref_layernorm:
        common_layer.LayerNorm.forward = lambda self, x: torch.nn.functional.layer_norm(
            x, x.shape[-1:], self.gamma, self.beta, 1e-5
        )
    if args.without_final_relu:

        def ffn_forward(self, inputs):
            x = inputs
            for i, layer in enumerate(self.layers):
                x = layer(x)
                if i < len(self.layers) - 1:
                    x = self.dropout(self.relu(x))
            return x

        common_layer.PositionwiseFeedForward.forward = ffn_forward
    if not args.keep_ref_logvar:
        F = torch.nn.functional

        def prior(self, x):
            h1 = F.relu(self.h_prior(x))
            return (
                self.mu_prior_positive(h1),
                self.logvar_prior_positive(h1),
                self.mu_prior_negative(h1),
                self.logvar_prior_negative(h1),
            )

        original_posterior = vae.VAESampling.posterior
        vae.VAESampling.prior = prior

        def posterior(self, x, e, M_out, M_tilde_out):
            # its own computation, then the negative group's own log-variance in place of the
            # positive one (recomputed from the negative branch exactly as the reference builds it)
            mu_p, logvar_p, mu_n, _ = original_posterior(self, x, e, M_out, M_tilde_out)
            neg_side = torch.stack([M_out[i] if not self.is_pos(e[i]) else M_tilde_out[i] for i in range(len(e))])
            h1_n = F.relu(self.h_posterior_negative(torch.cat([x, neg_side], dim=-1)))
            return mu_p, logvar_p, mu_n, self.logvar_posterior_negative(h1_n)

        vae.VAESampling.posterior = posterior

    model = reference_model(trainer.Train_MIME, vocab_size, config, decoder_number=32)

    class NoStep:  # train_one_batch steps its optimizer; the gradients are what is compared
        def zero_grad(self):
            pass

        def step(self):
            pass

    model.optimizer = NoStep()
    model.optimizer.optimizer = NoStep()
    return model, config, trainer, vae, common_layer


def reference_label_maps():
    """Our emotion id -> the reference's, and the reference's group lists."""
    from parlai_empathy.data.emotions import ED_EMOTIONS

    ref_order = [
        'surprised',
        'excited',
        'annoyed',
        'proud',
        'angry',
        'sad',
        'grateful',
        'lonely',
        'impressed',
        'afraid',
        'disgusted',
        'confident',
        'terrified',
        'hopeful',
        'anxious',
        'disappointed',
        'joyful',
        'prepared',
        'guilty',
        'furious',
        'nostalgic',
        'jealous',
        'anticipating',
        'embarrassed',
        'content',
        'devastated',
        'sentimental',
        'caring',
        'trusting',
        'ashamed',
        'apprehensive',
        'faithful',
    ]  # its data_loader's emo_map
    return [ref_order.index(label) for label in ED_EMOTIONS]


def stack_pairs(mapping, mine, theirs, decoder=False, input_proj=True):
    import torch

    if input_proj:
        mapping.add(f'{mine}.in_proj.weight', f'{theirs}.embedding_proj.weight')
    mapping.add(f'{mine}.norm.weight', f'{theirs}.layer_norm.gamma')
    mapping.add(f'{mine}.norm.bias', f'{theirs}.layer_norm.beta')
    cat = lambda ts: torch.cat(ts, dim=0)  # noqa: E731
    layer = f'{theirs}.dec.0' if decoder else f'{theirs}.enc.0'
    block = f'{mine}.blocks.0'
    attns = (
        [
            ('self_attn', 'multi_head_attention_dec', 'norm_self', 'layer_norm_mha_dec'),
            ('cross_attn', 'multi_head_attention_enc_dec', 'norm_cross', 'layer_norm_mha_enc'),
        ]
        if decoder
        else [('attn', 'multi_head_attention', 'norm_attn', 'layer_norm_mha')]
    )
    for attn, ref_attn, norm, ref_norm in attns:
        mapping.add(f'{block}.{attn}.q.weight', f'{layer}.{ref_attn}.query_linear.weight')
        mapping.add(
            f'{block}.{attn}.kv.weight',
            [f'{layer}.{ref_attn}.key_linear.weight', f'{layer}.{ref_attn}.value_linear.weight'],
            cat,
        )
        mapping.add(f'{block}.{attn}.out.weight', f'{layer}.{ref_attn}.output_linear.weight')
        mapping.add(f'{block}.{norm}.weight', f'{layer}.{ref_norm}.gamma')
        mapping.add(f'{block}.{norm}.bias', f'{layer}.{ref_norm}.beta')
    mapping.add(f'{block}.norm_ffn.weight', f'{layer}.layer_norm_ffn.gamma')
    mapping.add(f'{block}.norm_ffn.bias', f'{layer}.layer_norm_ffn.beta')
    for conv, index in (('conv_in', 0), ('conv_out', 1)):
        for kind in ('weight', 'bias'):
            mapping.add(f'{block}.ffn.{conv}.{kind}', f'{layer}.positionwise_feed_forward.layers.{index}.conv.{kind}')


def build_mapping(ours, ref, config, vae):
    import torch

    from parlai_empathy.models.mime import NEGATIVE_IDS, POSITIVE_IDS

    mapping = Mapping(ours, ref)
    to_ref = reference_label_maps()
    sampler = ref.vae_sampler
    # its word rows also hold the USR/SYS tags and CLS (ours: speaker table, CTX vector): the word
    # gradients are compared on the other rows
    mapping.add(
        'encoder.embedding.words.table.weight',
        'embedding.lut.weight',
        grads=lambda g, ts: (g[config.CLS_idx + 1 :], ts[0][config.CLS_idx + 1 :]),
    )
    scale = math.sqrt(config.emb_dim)
    tags = [config.USR_idx, config.SYS_idx]
    mapping.add('encoder.embedding.speakers.weight', 'embedding.lut.weight', lambda ts: ts[0][tags])
    # the reference's CLS position: lut(CLS) * sqrt(d) + its tag lut(CLS) * sqrt(d); ours with
    # reference_tags is the same row times 2 sqrt(d), without it a vector used unscaled
    if ours.encoder.embedding.reference_tags:
        mapping.add('encoder.embedding.ctx', 'embedding.lut.weight', lambda ts: ts[0][config.CLS_idx])
    else:
        mapping.add(
            'encoder.embedding.ctx',
            'embedding.lut.weight',
            lambda ts: 2 * scale * ts[0][config.CLS_idx],
            grads=lambda g, ts: (2 * scale * g, ts[0][config.CLS_idx]),
        )
    stack_pairs(mapping, 'encoder.context_encoder', 'encoder')
    mapping.add('encoder.emotion_embedding', 'emoji_embedding.weight', lambda ts: ts[0][to_ref])
    mapping.add('encoder.classifier_proj.weight', 's_weight.weight')
    mapping.add('encoder.sampler.prior_hidden.weight', 'vae_sampler.h_prior.weight')
    mapping.add('encoder.sampler.prior_hidden.bias', 'vae_sampler.h_prior.bias')
    cat = lambda ts: torch.cat(ts, dim=0)  # noqa: E731
    for g, (name, ids, ref_list, posterior_hidden) in enumerate(
        (
            ('positive', POSITIVE_IDS, sampler.positive_emotions, 'h_posterior_postive'),
            ('negative', NEGATIVE_IDS, sampler.negative_emotions, 'h_posterior_negative'),
        )
    ):
        for kind in ('weight', 'bias'):
            mapping.add(
                f'encoder.sampler.prior.{g}.{kind}',
                [f'vae_sampler.mu_prior_{name}.{kind}', f'vae_sampler.logvar_prior_{name}.{kind}'],
                cat,
            )
            mapping.add(f'encoder.sampler.posterior.{g}.0.{kind}', f'vae_sampler.{posterior_hidden}.{kind}')
            mapping.add(
                f'encoder.sampler.posterior.{g}.2.{kind}',
                [f'vae_sampler.mu_posterior_{name}.{kind}', f'vae_sampler.logvar_posterior_{name}.{kind}'],
                cat,
            )
            rows = [ref_list.index(to_ref[i]) for i in ids]  # our unit j = its unit rows[j]
            mapping.add(
                f'encoder.sampler.to_distribution.{g}.{kind}',
                f'vae_sampler.Dense_z_prior_{name}.{kind}',
                lambda ts, rows=rows: ts[0][rows],
            )
    d = config.hidden_dim
    for mine, theirs in (
        ('mimic_encoder', 'emotion_input_encoder_1'),
        ('non_mimic_encoder', 'emotion_input_encoder_2'),
    ):
        mapping.add(
            f'encoder.{mine}.merge_hidden.weight', f'{theirs}.enc.embedding_proj.weight', lambda ts: ts[0][:, :d]
        )
        mapping.add(
            f'encoder.{mine}.merge_emotion.weight', f'{theirs}.enc.embedding_proj.weight', lambda ts: ts[0][:, d:]
        )
        stack_pairs(mapping, f'encoder.{mine}.encoder', f'{theirs}.enc', input_proj=False)
    for mine, theirs in (('gate', 'fc1'), ('out', 'fc2')):
        for kind in ('weight', 'bias'):
            mapping.add(f'encoder.fusion.{mine}.{kind}', f'cdecoder.{theirs}.{kind}')
    stack_pairs(mapping, 'decoder.stack', 'decoder', decoder=True)
    mapping.add('output.weight', 'generator.proj.weight')
    mapping.add('output.bias', 'generator.proj.bias')
    missing = set(mapping.ours) - {pair[0] for pair in mapping.pairs}
    if missing:
        raise RuntimeError(f'our parameters without a reference counterpart: {sorted(missing)}')
    return mapping


def capture(module, store, key, first_only=True, pick=lambda out: out):
    def hook(_module, _inputs, output):
        if first_only and key in store:
            return
        store[key] = pick(output).detach().clone()

    return module.register_forward_hook(hook)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--mime-repo', required=True)
    add_batch_arguments(parser)
    parser.add_argument('--keep-ref-logvar', action='store_true')
    parser.add_argument('--pad-context', action='store_true')
    parser.add_argument(
        '--without-final-relu',
        action='store_true',
        help='ours with ffn_final_relu=False (the form of models whose saved options '
        "lack ffn_final_relu) and the reference's PositionwiseFeedForward patched to skip the ReLU "
        'it applies after its last convolution',
    )
    parser.add_argument(
        '--ours-only-without-final-relu',
        action='store_true',
        help='ours with ffn_final_relu=False against the unpatched reference (shows the difference this script found)',
    )
    parser.add_argument(
        '--ours-conv-over-padding',
        action='store_true',
        help="ours with conv_over_padding=True (the reference's padding: convolutions over "
        'padded positions, the posterior averaging them); use with --pad-context',
    )
    parser.add_argument(
        '--ours-legacy-tags',
        action='store_true',
        help='ours with reference_tags=False (a unit-scale CTX vector used unscaled: the form '
        'of models whose saved options lack reference_tags; the same function, mapped with the factor)',
    )
    parser.add_argument('--out', help='write the figures as JSON here')
    args = parser.parse_args()
    if args.without_final_relu and args.ours_only_without_final_relu:
        parser.error('--without-final-relu and --ours-only-without-final-relu exclude each other')
    out = os.path.abspath(args.out) if args.out else None
    cli = sys.argv[1:]  # the reference's config reads sys.argv, which build_reference sets

    import torch

    torch.manual_seed(args.seed)  # the reference's initialisation draws from the global stream
    ref, config, trainer, vae, common_layer = build_reference(
        os.path.abspath(args.mime_repo), args.vocab, args.batch, args
    )

    from parlai_empathy.models.embeddings import WordEmbedding
    from parlai_empathy.models.mime import Mime, MimeConfig
    from parlai_empathy.models.transformer_blocks import TransformerSize

    torch.manual_seed(args.seed)
    d = config.hidden_dim
    size = TransformerSize(
        embedding_size=d,
        n_heads=config.heads,
        attention_size=config.depth,
        ffn_size=config.filter,
        n_layers=config.hop,
        ffn_final_relu=not (args.without_final_relu or args.ours_only_without_final_relu),
        conv_over_padding=args.ours_conv_over_padding,
    )
    words = WordEmbedding(args.vocab, d, config.PAD_idx, scale=math.sqrt(config.emb_dim))
    ours = Mime(
        args.vocab,
        MimeConfig(size=size, latent_size=d, reference_tags=not args.ours_legacy_tags),
        words=words,
        padding_idx=config.PAD_idx,
        start_idx=config.SOS_idx,
        end_idx=config.EOS_idx,
    )
    mapping = build_mapping(ours, ref, config, vae)
    mapping.copy()
    for mine, theirs in (
        (ours.encoder.context_encoder, ref.encoder),
        (ours.encoder.mimic_encoder.encoder, ref.emotion_input_encoder_1.enc),
        (ours.encoder.non_mimic_encoder.encoder, ref.emotion_input_encoder_2.enc),
        (ours.decoder.stack, ref.decoder),
    ):
        n = min(mine.timing.size(0), theirs.timing_signal.size(1))
        mine.timing[:n].copy_(theirs.timing_signal[0, :n])  # its signal (t2t layout and rates)

    # one batch: words 7.. (no special tokens), speakers alternating by turn, labels of both groups
    g = torch.Generator().manual_seed(args.seed)
    B = args.batch
    lengths = [args.context - (3 * i if args.pad_context else 0) for i in range(B)]
    S = max(lengths)
    tokens = torch.full((B, S), config.PAD_idx, dtype=torch.long)
    speakers = torch.zeros(B, S, dtype=torch.long)
    for i, n in enumerate(lengths):
        tokens[i, :n] = torch.randint(7, args.vocab, (n,), generator=g)
        turn = torch.arange(n) // 4  # a new turn every 4 words
        speakers[i, :n] = turn % 2
    t_lengths = [args.target - (i % 3) for i in range(B)]
    ys = torch.full((B, max(t_lengths) + 1), config.PAD_idx, dtype=torch.long)
    for i, n in enumerate(t_lengths):
        ys[i, :n] = torch.randint(7, args.vocab, (n,), generator=g)
        ys[i, n] = config.EOS_idx
    ours_emotion = torch.tensor([(5 * i + 3) % 32 for i in range(B)])
    ref_emotion = [reference_label_maps()[e] for e in ours_emotion.tolist()]

    tag = torch.tensor([config.USR_idx, config.SYS_idx])[speakers]
    enc_batch = torch.cat([torch.full((B, 1), config.CLS_idx), tokens], dim=1)
    mask_input = torch.cat(
        [torch.full((B, 1), config.CLS_idx), tag.masked_fill(tokens.eq(config.PAD_idx), config.PAD_idx)], dim=1
    )
    batch = {
        'input_batch': enc_batch,
        'input_lengths': torch.LongTensor([n + 1 for n in lengths]),
        'mask_input': mask_input,
        'target_batch': ys,
        'target_lengths': torch.LongTensor([n + 1 for n in t_lengths]),
        'program_label': ref_emotion,
        'target_program': [[0] * 32 for _ in range(B)],
    }

    zeros = lambda t, *a, **k: torch.zeros_like(t)  # noqa: E731
    randn_like = torch.randn_like
    torch.randn_like = zeros
    ref_out, our_out = {}, {}
    hooks = [
        capture(ref.encoder, ref_out, 'H'),
        capture(ref.s_weight, ref_out, 'W_E c'),
        capture(ref.emotion_input_encoder_1, ref_out, 'M'),
        capture(ref.emotion_input_encoder_2, ref_out, 'M~'),
        capture(ref.cdecoder, ref_out, 'M_fused'),
        capture(ref.decoder, ref_out, 'decoder', pick=lambda o: o[0]),
        capture(ref.generator, ref_out, 'log p'),
    ]
    kl_values, original_kl = [], vae.VAESampling.kl_div

    def kl_div(*a, **k):
        value = original_kl(*a, **k)
        kl_values.append(value)
        return value

    vae.VAESampling.kl_div = staticmethod(kl_div)
    criterion_values = []
    hooks.append(ref.criterion.register_forward_hook(lambda m, i, o: criterion_values.append(o.detach())))
    ref.train()
    ref.train_one_batch(batch, 0, train=True)
    ref_emotion_logits = ref_out['W_E c'] @ ref.emoji_embedding.weight.detach().t()
    ref_ce = torch.nn.functional.cross_entropy(ref_emotion_logits, torch.tensor(ref_emotion))

    hooks += [
        capture(ours.encoder.context_encoder, our_out, 'H'),
        capture(ours.encoder.classifier_proj, our_out, 'W_E c'),
        capture(ours.encoder.mimic_encoder, our_out, 'M'),
        capture(ours.encoder.non_mimic_encoder, our_out, 'M~'),
        capture(ours.encoder.fusion, our_out, 'M_fused'),
        capture(ours.decoder.stack, our_out, 'decoder'),
    ]
    ours.train()
    loss, parts = ours.training_loss(tokens, speakers, ours_emotion, ys=ys, emotion=ours_emotion, smoothing=0.1)
    loss.backward()
    for hook in hooks:
        hook.remove()
    with torch.no_grad():  # the whole output distribution (the loss path computes it at targets only)
        states = ours.encoder(tokens, speakers, ours_emotion)
        hidden = ours.decoder.forward_full(torch.cat([ours.START.expand(B, 1), ys[:, :-1]], 1), states)
        our_out['log p'] = torch.log_softmax(ours.output(hidden), dim=-1)
    torch.randn_like = randn_like

    keep_ref = torch.cat([torch.ones(B, 1, dtype=torch.bool), tokens.ne(config.PAD_idx)], dim=1)
    real_y = ys.ne(config.PAD_idx)
    stages = []
    for key in ('H', 'W_E c', 'M', 'M~', 'M_fused', 'decoder', 'log p'):
        a, b = our_out[key], ref_out[key]
        mask = keep_ref if a.dim() == 3 and a.size(1) == keep_ref.size(1) else (real_y if a.dim() == 3 else None)
        if mask is not None:  # real positions only (padding rows are not compared)
            a, b = a[mask], b[mask]
        stages.append({'stage': key, 'max_abs_diff': (a - b).abs().max().item(), 'max_abs_ref': b.abs().max().item()})
    nll_ref = torch.nn.functional.nll_loss(
        ref_out['log p'].reshape(-1, args.vocab), ys.reshape(-1), ignore_index=config.PAD_idx, reduction='sum'
    ).item()
    nll_ours = torch.nn.functional.nll_loss(
        our_out['log p'].reshape(-1, args.vocab), ys.reshape(-1), ignore_index=config.PAD_idx, reduction='sum'
    ).item()
    losses = {
        'response NLL summed (ref / ours)': [nll_ref, nll_ours],
        'emotion CE (ref / ours)': [ref_ce.item(), parts['cls'].item()],
        'KL summed, pos + neg (ref / ours)': [
            sum(v.item() for v in kl_values[:2]),
            (parts['kl_pos'] + parts['kl_neg']).item() * B,
        ],
    }
    report(
        mapping,
        stages,
        losses,
        out,
        what='projects/majumder2020_mime/diagnostics/mime_transplant.py: the reference MIME (declare-lab/MIME) '
        'and ours on the same weights and batch',
        repo=os.path.abspath(args.mime_repo),
        placeholder='REF_MIME',
        cli=cli,
    )


if __name__ == '__main__':
    main()
