"""ParlAI's greedy search (and beam search of width 1) for a whole batch at once.

ParlAI's ``TorchGeneratorAgent._generate`` keeps one ``TreeSearch`` object per example and, at
every step, advances each in Python, then reorders the decoder state by the (here always
identical) backtracking indices. With one hypothesis per example all of that is a row-wise
argmax: :func:`batched_greedy` does the same arithmetic on the batch's tensor at once -- the same
``log_softmax`` of the decoder's scores, the end token forbidden below the search's
``min_length``, scores summed token by token in float32, ``max`` for ``GreedySearch``, ``topk`` of
score plus prior for ``BeamSearch``, a reply forced to end at ``max_ts`` by overwriting its last
token with the end token, and the length-penalised score of the finished reply. Rows that have
ended keep being fed the end token until every row has, as ParlAI feeds them, so each row's
decoder computation is the one ParlAI's loop makes. ``tests/test_batched_search.py`` compares
tokens and scores with ParlAI's loop for every generator agent of the package.

It applies only where that equivalence is simple: one hypothesis, exactly ParlAI's
``GreedySearch`` or ``BeamSearch`` from the agent's factory (so not ``--beam-stop top``), no
n-gram or block-list blocking, no prefix tokens, temperature 1 and no per-token details
(``--verbose``). Everything else returns None and goes through ParlAI's loop.

On ETHREED's decoding of 100 test responses x 40 tokens (``bench/reference_speed.py``) the
per-example searches were about a third of the decoding time.
"""

import math
from typing import List, Optional, Tuple

import torch
from parlai.core.torch_generator_agent import BeamSearch, GreedySearch
from parlai.utils.torch import neginf


class FinishedSearch:
    """What ``eval_step`` reads from a search after it ran: its finished replies."""

    def __init__(self, finished: List[Tuple[torch.Tensor, torch.Tensor, None]]):
        self._finished = finished

    def get_rescored_finished(self, n_best: Optional[int] = None):
        return self._finished[:n_best]


def applicable_search(agent, beam_size: int, device, prefix_tokens) -> Optional[object]:
    """The agent's search for one example when :func:`batched_greedy` can stand in for it."""
    if beam_size != 1 or prefix_tokens is not None or agent.temperature != 1.0:
        return None
    if getattr(agent, 'show_token_details', False):
        return None
    search = agent._treesearch_factory(device, verbose=False)
    if type(search) not in (GreedySearch, BeamSearch) or search.beam_size != 1:
        return None
    if search.block_ngram > 0 or search.context_block_ngram > 0:
        return None
    block_list = getattr(agent, 'beam_block_list', None)
    if block_list is not None and len(block_list.items()):
        return None
    return search


@torch.no_grad()
def batched_greedy(agent, batch, search, max_ts: int, encoder_states):
    """``(beam_preds_scores, searches)`` as ``TorchGeneratorAgent._generate`` returns them, from the
    batch's ``encoder_states`` (``model.encoder(*agent._encoder_input(batch))``)."""
    model = agent.model
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        model = model.module
    device = batch.text_vec.device
    bsz = batch.batchsize
    eos, bos, min_length = search.eos, search.bos, search.min_length
    use_topk = isinstance(search, BeamSearch)
    decoder_input = agent._get_initial_decoder_input(bsz, 1, device)
    incr_state = None
    scores = torch.zeros(bsz, device=device)  # a row's score stays as it was once the row ended
    outputs = [torch.full((bsz,), bos, dtype=torch.long, device=device)]
    ends = torch.full((bsz,), -1, dtype=torch.long, device=device)  # index into outputs of the end token
    live = torch.ones(bsz, dtype=torch.bool, device=device)
    for step in range(max_ts):
        if not bool(live.any()):
            break
        score, incr_state = model.decoder(decoder_input, encoder_states, incr_state)
        score = model.output(score[:, -1:, :])
        logprobs = agent._generation_activation(score.view(bsz, 1, -1)).squeeze(1)  # [B, V]
        if step < min_length:
            logprobs[:, eos] = neginf(logprobs.dtype)
        if use_topk:
            best, tokens = torch.topk(logprobs + scores.unsqueeze(1), 1, dim=-1)
            best, tokens = best.squeeze(1), tokens.squeeze(1)
        else:
            tok_scores, tokens = logprobs.max(1)
            best = tok_scores + scores
        # rows that had ended stay as they were and are fed the end token again
        scores = torch.where(live, best, scores)
        tokens = torch.where(live, tokens, torch.full_like(tokens, eos))
        outputs.append(tokens)
        ends = torch.where(live & tokens.eq(eos), len(outputs) - 1, ends)
        live = live & tokens.ne(eos)
        decoder_input = torch.cat([decoder_input, tokens.unsqueeze(1)], dim=1)
    paths = torch.stack(outputs, dim=1).cpu()  # [B, 1 + steps]
    # never ended: ParlAI overwrites the last token with the end token
    last = len(outputs) - 1
    paths[ends.cpu() < 0, last] = eos
    results = []
    for row, end in enumerate(ends.where(ends >= 0, last).tolist()):
        length_penalty = math.pow((1 + end + 1) / 6, search.length_penalty)
        results.append((paths[row, : end + 1].clone(), scores[row].cpu() / length_penalty, None))
    return results, [FinishedSearch([result]) for result in results]
