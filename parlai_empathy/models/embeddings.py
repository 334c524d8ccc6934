"""Input embeddings shared by the project's generators.

``WordEmbedding`` is the word table (optionally GloVe-initialized, optionally projected to the
model size); ``DialogueEmbedding`` adds speaker embeddings and, for MIME, the learned CTX vector
prepended to the context whose encoding is c = H_0. Positions are the transformer stacks' own
timing signal (``transformer_blocks``), added after their input projection as in the MIME/MoEL
reference code. The reference's ``Embeddings.forward`` returns ``lut(x) * sqrt(d_model)``
(``model/common_layer.py``), for context words, the USR/SYS tags added to them, and the decoder's
inputs alike: ``WordEmbedding(scale=...)`` multiplies the word vectors, and ``DialogueEmbedding``
the speaker vectors by the same factor (the agents of MIME and Multi-TR pass sqrt(D_h),
``--embeddings-scale``; ETHREED's GRUs, and MIME models saved with ``--embeddings-scale false``, use 1).
"""

from typing import Optional, Tuple

import torch
from torch import nn

from parlai_empathy.models import glove


class WordEmbedding(nn.Module):
    """Word table of size ``emb_dim`` mapped to ``d_model`` (a bias-free projection when they differ).

    Build it with :meth:`from_glove` to start from GloVe vectors; ``glove_fit`` chooses between a
    GloVe-sized table plus projection ('project') and a model-sized table padded with random
    columns ('pad'), see ``glove.py``.
    """

    def __init__(self, vocab_size, d_model, padding_idx=0, emb_dim=None, scale=1.0):
        super().__init__()
        self.scale = float(scale)
        emb_dim = emb_dim or d_model
        self.table = nn.Embedding(vocab_size, emb_dim, padding_idx=padding_idx)
        nn.init.normal_(self.table.weight, std=emb_dim**-0.5)
        with torch.no_grad():
            self.table.weight[padding_idx].zero_()
        self.proj = nn.Linear(emb_dim, d_model, bias=False) if emb_dim != d_model else None
        self.d_model = d_model

    @classmethod
    def from_glove(cls, vocab, d_model, padding_idx=0, glove_path=None, glove_fit='project', scale=1.0, fill_std=None):
        """A table initialized from GloVe for the word list ``vocab``; returns (module, hit-rate).
        ``fill_std``: the std of the random values in 'pad' mode (:func:`glove.fit_to_dim`)."""
        if glove_fit not in ('project', 'pad'):
            raise ValueError(f"glove_fit must be 'project' or 'pad', not {glove_fit!r}")
        matrix, hit = glove.load_glove(vocab, glove_path)
        emb_dim = matrix.shape[1] if glove_fit == 'project' else d_model
        module = cls(len(vocab), d_model, padding_idx, emb_dim, scale)
        with torch.no_grad():
            if glove_fit == 'project':
                module.table.weight[hit] = matrix[hit]
            else:
                module.table.weight.copy_(glove.fit_to_dim(matrix, hit, d_model, fill_std=fill_std))
            module.table.weight[padding_idx].zero_()
        module.glove_dim = matrix.shape[1]  # what the vectors gave, for the agents' start-up log
        return module, float(hit.float().mean())

    @property
    def weight(self):
        return self.table.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.table(tokens)
        if self.scale != 1.0:
            x = x * self.scale
        return self.proj(x) if self.proj is not None else x


class DialogueEmbedding(nn.Module):
    """Token representation = word + speaker (MIME Sec. 3.2), with an optional CTX vector first.

    The reference adds the embedding of a USR/SYS tag token to every word; here the speakers have
    their own small table (the same function). ``forward(tokens, speakers)`` returns ``(x,
    keep)``: ``x`` is ``[B, S(+1), d_model]`` and ``keep`` is True at real (non-padding)
    positions. With ``prepend_ctx`` a learned CTX vector (the reference's CLS token) comes first,
    always kept.

    ``reference_tags`` parametrises the CTX and speaker vectors as the reference's word rows they
    are there: N(0, 0.01) at the start (its ``gen_embeddings`` for words GloVe lacks; CLS, USR and
    SYS are such words) and, in use, scaled as words are: speakers by ``words.scale``, the CTX
    vector by 2 * ``words.scale`` (the reference's CLS position is the CLS word vector plus the
    CLS row again as its dialogue-state tag). The function is the same as a CTX vector used
    unscaled (``projects/majumder2020_mime/diagnostics/mime_transplant.py`` maps one onto the
    other), but the training is not: Adam moves every parameter by about its learning rate
    whatever the gradient's scale, so a factor applied after the parameter multiplies how fast
    the vector it makes can move. The reference's CTX input moves 2 sqrt(300), about 35 times,
    faster than a unit-scale parameter's. Without it (``reference_tags`` off: the form of models
    saved before it, kept by the generator agents' ``OPT_MIGRATIONS``): the CTX vector starts at
    unit norm and is used as it is, and the speaker table is initialised with the model's other
    matrices.
    """

    def __init__(self, words, padding_idx=0, n_speakers=2, prepend_ctx=False, dropout=0.0, reference_tags=False):
        super().__init__()
        d_model = words.d_model
        self.words = words
        self.padding_idx = padding_idx
        self.reference_tags = reference_tags
        self.speakers = nn.Embedding(n_speakers, d_model) if n_speakers else None
        if self.speakers is not None and reference_tags:
            nn.init.normal_(self.speakers.weight, std=0.01)
        std = 0.01 if reference_tags else d_model**-0.5
        self.ctx = nn.Parameter(torch.randn(d_model) * std) if prepend_ctx else None
        self.ctx_scale = 2.0 * words.scale if reference_tags else 1.0
        self.dropout = nn.Dropout(dropout)

    def initialised_tags(self):
        """The modules :meth:`GeneratorModel.init_weights` must leave as they are."""
        return [self] if self.reference_tags else []

    def forward(
        self, tokens: torch.Tensor, speakers: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        keep = tokens.ne(self.padding_idx)
        x = self.words(tokens)
        if self.speakers is not None and speakers is not None:
            # padding gets no speaker term (the reference's tag there is its PAD row, as the word)
            x = x + self.speakers(speakers) * (self.words.scale * keep.unsqueeze(-1).to(x.dtype))
        if self.ctx is not None:
            ctx = (self.ctx * self.ctx_scale).expand(tokens.size(0), 1, -1).to(x.dtype)
            x = torch.cat([ctx, x], dim=1)
            keep = torch.cat([keep.new_ones(tokens.size(0), 1), keep], dim=1)
        return self.dropout(x), keep
