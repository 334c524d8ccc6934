"""Attention helpers shared by the project's recurrent models (plain torch, no ParlAI).

* :class:`BilinearAttention` -- score(q, m_j) = q^T W m_j, optionally plus a learned multiple of
  a coverage vector (the running sum of earlier attention weights, See et al. 2017), so that a
  decoder can learn to avoid positions it has already attended to.
* :func:`coverage_loss` -- sum_j min(a_j, c_j): penalizes attending again to covered positions.
* :func:`masked_softmax` -- a softmax that gives an all-zero row (not NaN) when nothing is kept,
  e.g. attention over an empty history at the first turn.
"""
import torch
from torch import nn


def masked_softmax(scores, keep):
    """Softmax over the last dim restricted to ``keep``; rows with nothing kept are all zero."""
    scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1) * keep.to(scores.dtype)


class BilinearAttention(nn.Module):
    """Attention of a query ``[B, Dq]`` over a memory ``[B, S, Dm]`` with score q^T W m_j.

    With ``coverage=True`` the score also gets ``w_c * coverage_j``. For decoding loops,
    :meth:`project` computes W m once and the result is passed back as ``keys``.
    """

    def __init__(self, query_dim, memory_dim, coverage=False):
        super().__init__()
        self.weight = nn.Linear(memory_dim, query_dim, bias=False)
        self.coverage_weight = nn.Parameter(torch.zeros(1)) if coverage else None

    def project(self, memory):
        """W m for every memory slot: ``[B, S, Dq]``."""
        return self.weight(memory)

    def forward(self, query, memory, keep, coverage=None, keys=None):
        """Returns ``(context [B, Dm], weights [B, S])``; ``weights`` sum to 1 over kept slots."""
        keys = self.project(memory) if keys is None else keys
        scores = torch.bmm(keys, query.unsqueeze(2)).squeeze(2)
        if self.coverage_weight is not None:
            if coverage is None:
                raise ValueError('this attention was built with coverage=True: pass the coverage')
            scores = scores + self.coverage_weight * coverage
        weights = masked_softmax(scores, keep)
        context = torch.bmm(weights.unsqueeze(1), memory).squeeze(1)
        return context, weights


def coverage_loss(weights, coverage):
    """sum_j min(a_j, c_j) per row: the overlap of new attention with what is already covered."""
    return torch.minimum(weights, coverage).sum(dim=-1)
