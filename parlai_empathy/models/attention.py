"""Attention helpers shared by the project's recurrent models (plain torch, no ParlAI).

* :class:`BilinearAttention` -- score(q, m_j) = q^T W m_j (+ b), optionally squashed by tanh and
  optionally plus a learned multiple of log(c_j + eps), c being a coverage vector (the element-wise
  maximum or sum of earlier attention distributions, See et al. 2017), so that a decoder can learn
  how to treat positions it has already attended to.
* :class:`SimpleAttention` -- score(m_j) = w^T m_j: weights that depend on the memory alone
  (DialogueRNN's "simple" attention, which the ETHREED reference tracks the history with).
* :func:`coverage_loss` -- sum_j min(a_j, c_j): penalizes attending again to covered positions.
* :func:`masked_softmax` -- a softmax that gives an all-zero row (not NaN) when nothing is kept,
  e.g. attention over an empty history at the first turn.
* :class:`Bilinear` -- ``nn.Bilinear`` (same parameters, same state dict, same function) computed
  as a matrix product instead of ``torch.bilinear``, whose CPU kernel materialises an
  ``[N, out, in1, in2]`` product: 14 % of an ETHREED training update went to that tensor alone.
"""

from typing import Optional, Tuple

import torch
from torch import nn

COVERAGE_EPS = 1e-31  # inside log(c + eps): finite for the zero coverage of the first step


def masked_softmax(scores, keep):
    """Softmax over the last dim restricted to ``keep``; rows with nothing kept are all zero."""
    scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1) * keep.to(scores.dtype)


class Bilinear(nn.Bilinear):
    """y_k = x1^T W_k x2 + b_k, as ``nn.Bilinear``, through one matrix product: x1 is mapped by
    every W_k at once (``[..., out, in2]``), then multiplied element-wise by x2 and summed. The
    same function up to float rounding (a different order of the same sums; tested)."""

    def forward(self, input1: torch.Tensor, input2: torch.Tensor) -> torch.Tensor:
        out, in1, in2 = self.weight.shape
        mapped = torch.matmul(input1, self.weight.permute(1, 0, 2).reshape(in1, out * in2))
        result = (mapped.unflatten(-1, (out, in2)) * input2.unsqueeze(-2)).sum(-1)
        return result if self.bias is None else result + self.bias


class BilinearAttention(nn.Module):
    """Attention of a query ``[B, Dq]`` over a memory ``[B, S, Dm]`` with score q^T W m_j.

    ``bias`` adds a learned constant and ``squash`` applies tanh to the score (a bilinear layer
    followed by tanh); ``coverage=True`` adds ``w_c * log(coverage_j + eps)``. For decoding loops,
    :meth:`project` computes W m once and the result is passed back as ``keys``.
    """

    def __init__(self, query_dim, memory_dim, coverage=False, bias=False, squash=False):
        super().__init__()
        self.weight = nn.Linear(memory_dim, query_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(1)) if bias else None
        self.squash = squash
        self.coverage_weight = nn.Parameter(torch.zeros(1)) if coverage else None

    def project(self, memory):
        """W m for every memory slot: ``[B, S, Dq]``."""
        return self.weight(memory)

    def forward(
        self,
        query: torch.Tensor,
        memory: torch.Tensor,
        keep: torch.Tensor,
        coverage: Optional[torch.Tensor] = None,
        keys: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(context [B, Dm], weights [B, S])``; ``weights`` sum to 1 over kept slots."""
        keys = self.project(memory) if keys is None else keys
        scores = torch.bmm(keys, query.unsqueeze(2)).squeeze(2)
        if self.bias is not None:
            scores = scores + self.bias
        if self.squash:
            scores = torch.tanh(scores)
        if self.coverage_weight is not None:
            if coverage is None:
                raise ValueError('this attention was built with coverage=True: pass the coverage')
            scores = scores + self.coverage_weight * torch.log(coverage + COVERAGE_EPS)
        weights = masked_softmax(scores, keep)
        context = torch.bmm(weights.unsqueeze(1), memory).squeeze(1)
        return context, weights


class SimpleAttention(nn.Module):
    """Attention over a memory ``[B, S, Dm]`` whose scores w^T m_j ignore any query."""

    def __init__(self, memory_dim):
        super().__init__()
        self.score = nn.Linear(memory_dim, 1, bias=False)

    def forward(
        self, query: Optional[torch.Tensor], memory: torch.Tensor, keep: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``query`` is accepted (and unused) so that it can stand in for a bilinear attention."""
        weights = masked_softmax(self.score(memory).squeeze(2), keep)
        return torch.bmm(weights.unsqueeze(1), memory).squeeze(1), weights


def coverage_loss(weights, coverage):
    """sum_j min(a_j, c_j) per row: the overlap of new attention with what is already covered."""
    return torch.minimum(weights, coverage).sum(dim=-1)
