"""Weight transplant: the reference MoEL and ours, same weights, same batch, stage by stage.

Builds HLTCHKUST/MoEL's ``Transformer_experts`` (116a37d, unchanged, with the options of its
README's MoEL command and initialised as its ``main.py`` does) and our
``parlai_empathy.models.moel.Moel`` in one process, copies every reference weight into the
matching place of ours (fused key/value maps; the emotion keys and the 32 listeners permuted from
the reference's label order to ours; the CLS and USR/SYS word rows into our CTX vector and speaker
table; its timing signals), runs one training forward and backward of both on one batch, and
prints per stage the largest absolute difference, and per weight the relative difference of the
gradients. Both run in training mode with dropout 0 (the reference's default and ours).

Known deviations (``parlai_empathy/models/moel.py``, ``transformer_blocks.py``) are made equal by
default, each with a flag that keeps the reference's own version:

* ``--keep-ref-layernorm``: the reference's LayerNorm (unbiased std, eps added to the std);
  otherwise it is patched to ``torch.nn.functional.layer_norm`` as ours;
* ``--pad-context``: contexts of different lengths (its encoder convolves over padding, ours
  zeroes it; ``--ours-conv-over-padding`` makes ours do as the reference); default: no padding;
* ``--oracle``: both decode with the gold emotion's listener (the reference's ``config.oracle``).

Its ``emoji_embedding`` and ``generator.p_gen_linear`` have no counterpart (never used: no gradient).

Run with the reference's Python (the one ``bench/reference_speed.py --setup-ref-venv`` sets up;
our model only needs torch), the checkout's Python files at /tmp/ref-moel::

    ../ref-venv/bin/python projects/majumder2020_mime/diagnostics/moel_transplant.py --moel-repo /tmp/ref-moel \\
        [--out moel_transplant.json]
"""

import argparse
import math
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # mime_transplant: its label order, block mapping and capture hook
from mime_transplant import capture, reference_label_maps, stack_pairs  # noqa: E402
from transplant_common import Mapping, add_batch_arguments, reference_model, report  # noqa: E402

LISTENERS = 'emotion listeners V_i (on the rows that weigh them)'
# the MoEL command of the reference's README (without --cuda)
MOEL_ARGS = [
    '--model',
    'experts',
    '--label_smoothing',
    '--noam',
    '--emb_dim',
    '300',
    '--hidden_dim',
    '300',
    '--hop',
    '1',
    '--heads',
    '2',
    '--topk',
    '5',
    '--pretrain_emb',
    '--softmax',
    '--basic_learner',
    '--schedule',
    '10000',
]


def build_reference(repo, vocab_size, batch, keep_layernorm):
    import reference_speed as rs

    rs.reference_shims(repo, {})
    sys.path.insert(0, repo)
    os.chdir(tempfile.mkdtemp(prefix='moel-transplant-'))  # it creates its save_path here
    open('empty.txt', 'w').close()
    sys.argv = [os.path.join(repo, 'main.py')] + MOEL_ARGS + ['--batch_size', str(batch), '--emb_file', 'empty.txt']
    import torch
    from utils import config

    config.USE_CUDA = False
    from model import common_layer, transformer_mulexpert

    if not keep_layernorm:
        common_layer.LayerNorm.forward = lambda self, x: torch.nn.functional.layer_norm(
            x, x.shape[-1:], self.gamma, self.beta, 1e-5
        )

    model = reference_model(transformer_mulexpert.Transformer_experts, vocab_size, config, decoder_number=32)

    class Idle:  # train_one_batch zeroes and steps its optimizer; the gradients are what is compared
        def zero_grad(self):
            pass

        step = zero_grad

    model.optimizer = Idle()
    model.optimizer.optimizer = Idle()
    return model, config


class Renamed:
    """A :class:`Mapping` seen through new names: ``stack_pairs`` maps one decoder stack's block 0
    (``ours_from``, ``ref_from``); this puts that block's pairs on a single block of ours and of the
    reference (a listener), and drops the stack's other pairs."""

    def __init__(self, mapping, ours_from, ours_to, ref_from, ref_to):
        self.mapping, self.names = mapping, (ours_from, ours_to, ref_from, ref_to)

    def add(self, mine, theirs, combine=None, grads=None):
        ours_from, ours_to, ref_from, ref_to = self.names
        if mine.startswith(ours_from + '.'):
            theirs = [theirs] if isinstance(theirs, str) else theirs
            self.mapping.add(
                ours_to + mine[len(ours_from) :], [ref_to + t[len(ref_from) :] for t in theirs], combine, grads
            )


def build_mapping(ours, ref, config):
    mapping = Mapping(ours, ref)
    to_ref = reference_label_maps()  # our emotion j is its emotion to_ref[j]
    first_word = config.CLS_idx + 1  # its rows before hold the tags and CLS: the word gradients are compared after
    mapping.add(
        'encoder.embedding.words.table.weight',
        'embedding.lut.weight',
        grads=lambda g, ts: (g[first_word:], ts[0][first_word:]),
    )
    mapping.add(
        'encoder.embedding.speakers.weight', 'embedding.lut.weight', lambda ts: ts[0][[config.USR_idx, config.SYS_idx]]
    )
    mapping.add('encoder.embedding.ctx', 'embedding.lut.weight', lambda ts: ts[0][config.CLS_idx])
    stack_pairs(mapping, 'encoder.context_encoder', 'encoder')
    mapping.add('encoder.classifier.weight', 'decoder_key.weight', lambda ts: ts[0][to_ref])
    stack_pairs(mapping, 'decoder.stack.meta', 'decoder', decoder=True)
    blocks = [('decoder.stack.shared', 'decoder.basic')]
    blocks += [(f'decoder.stack.listeners.{j}', f'decoder.experts.{to_ref[j]}') for j in range(32)]
    for mine, theirs in blocks:
        stack_pairs(Renamed(mapping, 'X.blocks.0', mine, 'Y.dec.0', theirs), 'X', 'Y', decoder=True, input_proj=False)
    mapping.add('output.weight', 'generator.proj.weight')
    mapping.add('output.bias', 'generator.proj.bias')
    missing = set(mapping.ours) - {pair[0] for pair in mapping.pairs}
    if missing:
        raise RuntimeError(f'our parameters without a reference counterpart: {sorted(missing)}')
    return mapping


def make_batch(args, config):
    """Words 7.. (no special tokens), a new speaker every 4 words, both models' inputs."""
    import torch

    g = torch.Generator().manual_seed(args.seed)
    B, pad = args.batch, config.PAD_idx

    def padded(lengths, end=None):
        rows = torch.full((B, max(lengths) + (end is not None)), pad, dtype=torch.long)
        for i, n in enumerate(lengths):
            rows[i, :n] = torch.randint(7, args.vocab, (n,), generator=g)
            if end is not None:
                rows[i, n] = end
        return rows

    c_lengths = [args.context - (3 * i if args.pad_context else 0) for i in range(B)]
    t_lengths = [args.target - (i % 3) for i in range(B)]
    tokens, ys = padded(c_lengths), padded(t_lengths, config.EOS_idx)
    speakers = (torch.arange(tokens.size(1)) // 4 % 2).expand(B, -1) * tokens.ne(pad)
    emotion = torch.tensor([(7 * i + 2) % 32 for i in range(B)])
    to_ref = reference_label_maps()
    tags = torch.tensor([config.USR_idx, config.SYS_idx])[speakers].masked_fill(tokens.eq(pad), pad)
    cls = torch.full((B, 1), config.CLS_idx)
    ref_labels = [to_ref[e] for e in emotion.tolist()]
    ref_batch = {
        'input_batch': torch.cat([cls, tokens], 1),
        'input_lengths': torch.LongTensor([n + 1 for n in c_lengths]),
        'mask_input': torch.cat([cls, tags], 1),
        'target_batch': ys,
        'target_lengths': torch.LongTensor([n + 1 for n in t_lengths]),
        'program_label': ref_labels,
        'target_program': [[int(k == label) for k in range(32)] for label in ref_labels],
    }
    return tokens, speakers, ys, emotion, ref_batch


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--moel-repo', required=True)
    add_batch_arguments(parser)
    parser.add_argument('--pad-context', action='store_true')
    parser.add_argument('--ours-conv-over-padding', action='store_true')
    parser.add_argument('--oracle', action='store_true', help='both decode with the gold listener')
    parser.add_argument('--out', help='write the figures as JSON here')
    args = parser.parse_args()
    out = os.path.abspath(args.out) if args.out else None
    cli = sys.argv[1:]  # the reference's config reads sys.argv, which build_reference sets
    repo = os.path.abspath(args.moel_repo)

    import torch
    import torch.nn.functional as F

    torch.manual_seed(args.seed)  # the reference's initialisation draws from the global stream
    ref, config = build_reference(repo, args.vocab, args.batch, args.keep_ref_layernorm)
    config.oracle = args.oracle

    from parlai_empathy.models.embeddings import WordEmbedding
    from parlai_empathy.models.moel import Moel, MoelConfig
    from parlai_empathy.models.transformer_blocks import TransformerSize

    d = config.hidden_dim
    size = TransformerSize(
        embedding_size=d,
        n_heads=config.heads,
        attention_size=config.depth,
        ffn_size=config.filter,
        n_layers=config.hop,
        conv_over_padding=args.ours_conv_over_padding,
    )
    words = WordEmbedding(args.vocab, d, config.PAD_idx, scale=math.sqrt(config.emb_dim))
    ours = Moel(
        args.vocab,
        MoelConfig(size=size, top_k=config.topk, shared_listener=config.basic_learner),
        words=words,
        padding_idx=config.PAD_idx,
        start_idx=config.SOS_idx,
        end_idx=config.EOS_idx,
    )
    mapping = build_mapping(ours, ref, config)
    mapping.copy()
    for mine, theirs in ((ours.encoder.context_encoder, ref.encoder), (ours.decoder.stack.meta, ref.decoder)):
        n = min(mine.timing.size(0), theirs.timing_signal.size(1))
        mine.timing[:n].copy_(theirs.timing_signal[0, :n])  # its signal (t2t layout and rates)

    tokens, speakers, ys, emotion, ref_batch = make_batch(args, config)
    B, to_ref = args.batch, reference_label_maps()
    first = lambda o: o[0]  # noqa: E731  (its decoder layers return tuples)
    ref_out, our_out = {}, {}
    hooks = [
        capture(ref.encoder, ref_out, 'H'),
        capture(ref.decoder_key, ref_out, 'emotion logits K q'),
        # its last call: under the oracle, the one-hot that replaces the top-k weights
        capture(ref.attention_activation, ref_out, 'listener weights p', first_only=False),
        capture(ref.decoder.basic, ref_out, 'shared listener V_0', pick=first),
        capture(ref.decoder, ref_out, 'meta listener + norm', pick=first),
        capture(ref.generator, ref_out, 'log p'),
    ]
    hooks += [capture(ref.decoder.experts[to_ref[j]], ref_out, f'V_{j}', pick=first) for j in range(32)]
    criterion = []
    hooks.append(ref.criterion.register_forward_hook(lambda m, i, o: criterion.append(o.detach())))
    ref.train()
    ref.train_one_batch(ref_batch, 0, train=True)

    pick_weights = lambda states: states.aux.listener_weights  # noqa: E731
    hooks += [
        capture(ours.encoder.context_encoder, our_out, 'H'),
        capture(ours.encoder.classifier, our_out, 'emotion logits K q'),
        capture(ours.encoder, our_out, 'listener weights p', pick=pick_weights),
        capture(ours.decoder.stack.shared, our_out, 'shared listener V_0'),
        capture(ours.decoder.stack, our_out, 'meta listener + norm'),
    ]
    hooks += [capture(ours.decoder.stack.listeners[j], our_out, f'V_{j}') for j in range(32)]
    ours.train()
    response, _, states = ours(tokens, speakers, emotion, args.oracle, ys=ys, loss_smoothing=0.1)
    extra, parts = ours.extra_losses(states, emotion)
    (response.smoothed + extra).backward()
    for hook in hooks:
        hook.remove()
    with torch.no_grad():  # the whole output distribution (the loss path computes it at targets only)
        hidden = ours.decoder.forward_full(torch.cat([ours.START.expand(B, 1), ys[:, :-1]], 1), states)
        our_out['log p'] = torch.log_softmax(ours.output(hidden), dim=-1)
    in_ref_order = [to_ref.index(i) for i in range(32)]  # its emotion i is our to_ref.index(i)
    for key in ('emotion logits K q', 'listener weights p'):
        our_out[key] = our_out[key][:, in_ref_order]
    # ours runs listener j on the rows that weigh it (p_j != 0) only, the reference on every row:
    # V_j is compared on those rows, both set to 0 on the others (where p_j V_j = 0 in both)
    weighed = states.aux.listener_weights.detach().ne(0)  # [B, 32], our order
    for j in range(32):
        ours_rows = torch.zeros_like(ref_out[f'V_{j}'])
        ours_rows[weighed[:, j]] = our_out.pop(f'V_{j}', ours_rows[:0])
        our_out[f'V_{j}'] = ours_rows
        ref_out[f'V_{j}'] = ref_out[f'V_{j}'] * weighed[:, j, None, None]
    for name in (ref_out, our_out):
        name[LISTENERS] = torch.stack([name.pop(f'V_{j}') for j in range(32)], 1)

    keep = torch.cat([torch.ones(B, 1, dtype=torch.bool), tokens.ne(config.PAD_idx)], dim=1)
    real_y = ys.ne(config.PAD_idx)
    stages = []
    for key in (
        'H',
        'emotion logits K q',
        'listener weights p',
        'shared listener V_0',
        LISTENERS,
        'meta listener + norm',
        'log p',
    ):
        a, b = our_out[key], ref_out[key]
        if key == 'H':
            a, b = a[keep], b[keep]
        elif key == LISTENERS:
            a, b = a.transpose(1, 2)[real_y], b.transpose(1, 2)[real_y]
        elif a.dim() == 3:
            a, b = a[real_y], b[real_y]  # real positions only (padding rows are not compared)
        stages.append({'stage': key, 'max_abs_diff': (a - b).abs().max().item(), 'max_abs_ref': b.abs().max().item()})
    nll = [
        F.nll_loss(
            o['log p'].reshape(-1, args.vocab), ys.reshape(-1), ignore_index=config.PAD_idx, reduction='sum'
        ).item()
        for o in (ref_out, our_out)
    ]
    ref_ce = F.cross_entropy(ref_out['emotion logits K q'], torch.tensor(ref_batch['program_label'])).item()
    # its KL(target || model) = our cross-entropy - the target's entropy, a constant per real token
    eps, V = 0.1, args.vocab
    entropy = -(0.9 * math.log(0.9) + eps * math.log(eps / (V - 2))) * int(real_y.sum())
    losses = {
        'response NLL summed (ref / ours)': nll,
        'emotion CE (ref / ours)': [ref_ce, parts['cls'].item()],
        'label-smoothed response loss, its KL form (ref / ours - target entropy)': [
            criterion[0].item(),
            response.smoothed.item() - entropy,
        ],
    }
    report(
        mapping,
        stages,
        losses,
        out,
        what='projects/majumder2020_mime/diagnostics/moel_transplant.py: the reference MoEL (HLTCHKUST/MoEL) '
        'and ours on the same weights and batch',
        repo=repo,
        placeholder='REF_MOEL',
        cli=cli,
        extra={'reference_options': MOEL_ARGS},
        show_unmapped=True,
    )


if __name__ == '__main__':
    main()
