"""What the weight-transplant scripts share (``mime_transplant.py``, ``moel_transplant.py``,
``ethreed_transplant.py``).

:func:`reference_model` builds a MoEL-family reference model as its ``main.py`` would; :class:`Mapping`
pairs each of our parameters with the reference parameters it is made from, copies their values over
and compares the gradients after both models ran the same batch.
"""

import json


def reference_model(build, vocab_size, config, **kwargs):
    """``build(vocab, **kwargs)`` (a reference model class), made and initialised as its ``main.py`` does.

    declare-lab/MIME grew out of HLTCHKUST/MoEL, and both take the same start: a vocabulary object
    of which the model reads only ``n_words`` and the special words' ids (those of their
    ``utils/config.py``), then Xavier-uniform on every matrix but the word table (``main.py``, with
    ``config.pretrain_emb``). The transplants give no GloVe file, so the reference's word table would
    be all its ``0.01 * randn`` for unknown words; it is redrawn at a GloVe-like scale instead, the
    scale of the table a real run starts from, with the padding row zero. The draws come from
    torch's global stream, in this order, so a seeded caller gets the same weights on every run.
    """
    import torch
    from torch.nn.init import xavier_uniform_

    class Vocab:
        n_words = vocab_size
        word2index = {'UNK': 0, 'PAD': 1, 'EOS': 2, 'SOS': 3, 'USR': 4, 'SYS': 5, 'CLS': 6}

    model = build(Vocab(), **kwargs)
    for name, param in model.named_parameters():
        if param.dim() > 1 and (name != 'embedding.lut.weight' and config.pretrain_emb):
            xavier_uniform_(param)
    with torch.no_grad():
        model.embedding.lut.weight.normal_(0, 0.4)
        model.embedding.lut.weight[config.PAD_idx].zero_()
    return model


class Mapping:
    """Pairs (our parameter, reference parameters, how they combine)."""

    def __init__(self, ours, ref):
        self.ours, self.ref = dict(ours.named_parameters()), dict(ref.named_parameters())
        self.pairs = []

    def add(self, mine, theirs, combine=None, grads=None):
        """``combine`` makes our value from theirs; ``grads(ours, theirs)`` gives the two gradients
        to compare when ``combine`` applied to their gradients is not ours (shared rows)."""
        theirs = [theirs] if isinstance(theirs, str) else theirs
        self.pairs.append((mine, theirs, combine or (lambda ts: ts[0]), grads))

    def copy(self):
        import torch

        with torch.no_grad():
            for mine, theirs, combine, _ in self.pairs:
                value = combine([self.ref[t] for t in theirs])
                if value.shape != self.ours[mine].shape:
                    raise ValueError(
                        f'{mine}: {tuple(value.shape)} from {theirs}, ours is {tuple(self.ours[mine].shape)}'
                    )
                self.ours[mine].copy_(value)

    def grads(self):
        rows = []
        for mine, theirs, combine, pick in self.pairs:
            ref_grads = [self.ref[t].grad for t in theirs]
            if self.ours[mine].grad is None or any(g is None for g in ref_grads):
                rows.append((mine, theirs, None, None))
                continue
            mine_g, theirs_g = self.ours[mine].grad, combine(ref_grads)
            if pick is not None:
                mine_g, theirs_g = pick(mine_g, ref_grads)
            diff = (mine_g - theirs_g).abs().max().item()
            scale = theirs_g.abs().max().item()
            rows.append((mine, theirs, diff, scale))
        return rows

    def unmapped_reference(self):
        """Reference parameters nothing of ours maps to, with their largest gradient (None: none)."""
        used = {t for _, theirs, _, _ in self.pairs for t in theirs}
        return [
            (name, None if p.grad is None else p.grad.abs().max().item())
            for name, p in self.ref.items()
            if name not in used
        ]


def report(mapping, stages, losses, out=None, *, what, repo, placeholder, cli, extra=None, show_unmapped=False):
    """Print the comparison and, with ``out``, write it as JSON.

    ``stages``: dicts with ``stage``, ``max_abs_diff``, ``max_abs_ref``; ``losses``: name -> [reference,
    ours]; ``cli``: the script's arguments, the reference checkout's path written as ``placeholder``.
    """
    import os
    import platform

    import reference_speed as rs
    import torch

    grads = mapping.grads()
    print('stage-by-stage forward, max |ours - reference| (real positions), reference max |value|:')
    for row in stages:
        print(f'  {row["max_abs_diff"]:.3e}  (scale {row["max_abs_ref"]:.3e})  {row["stage"]}')
    print('loss terms (reference / ours):')
    for name, (a, b) in losses.items():
        print(f'  {name}: {a:.6f} / ' + ('-' if b is None else f'{b:.6f}'))
    print('gradients, max |ours - reference| / max |reference| (worst 15):')
    rated = sorted(
        ((diff / max(scale, 1e-30), mine, theirs) for mine, theirs, diff, scale in grads if diff is not None),
        reverse=True,
    )
    for rel, mine, theirs in rated[:15]:
        print(f'  {rel:.2e}  {mine}  <-  {", ".join(theirs)}')
    no_grad = [mine for mine, _, diff, _ in grads if diff is None]
    if no_grad:
        print('  no gradient on one side:', ', '.join(no_grad))
    unmapped = mapping.unmapped_reference() if show_unmapped else []
    if show_unmapped:
        print('reference parameters with no counterpart in ours (max |grad|):')
        for name, g in unmapped:
            print(f'  {name}: {"no gradient" if g is None else f"{g:.3e}"}')
    if not out:
        return
    record = {
        'what': what,
        'argv': [placeholder if os.path.abspath(a) == repo else a for a in cli],
        'reference_commit': rs.git_commit(repo),
        'torch': torch.__version__,
        'machine': platform.platform(),
    }
    record.update(extra or {})
    record.update(
        stages=stages,
        losses=losses,
        gradients_relative=[{'ours': m, 'reference': t, 'relative_diff': r} for r, m, t in rated],
        no_gradient=no_grad,
    )
    if show_unmapped:
        record['reference_unmapped_max_abs_grad'] = dict(unmapped)
    with open(out, 'w') as handle:
        json.dump(record, handle, indent=1)


def add_batch_arguments(parser):
    """The options every transplant takes: the synthetic batch's shape and seed, and the deviation
    flags MIME and MoEL share (the reference's LayerNorm, contexts of different lengths)."""
    parser.add_argument('--batch', type=int, default=6)
    parser.add_argument('--context', type=int, default=15, help='context words per example')
    parser.add_argument('--target', type=int, default=9, help='target words per example (+ EOS)')
    parser.add_argument('--vocab', type=int, default=400)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--keep-ref-layernorm', action='store_true')
