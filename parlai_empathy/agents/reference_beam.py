"""The beam search of the MIME / MoEL reference code, as a ParlAI tree search.

declare-lab/MIME decodes its test set with ``Translator.beam_search`` (``utils/beam_omt_mimic_model1.py``,
the ``Beam`` class of the jadore801120 Transformer), beam 5, at most 50 steps. It differs from
ParlAI's ``BeamSearch`` in when it stops and what it returns:

* a hypothesis that emits the end token stays in the beam and is extended like the others (its
  score keeps adding the log-probabilities of what follows); ParlAI retires it (score -inf) and
  keeps it in a list of finished hypotheses;
* the search stops at the first step whose best hypothesis has just emitted the end token, and
  returns that hypothesis (cut at its first end token, as the reference's ``output.txt`` is);
  ParlAI goes on until the best hypothesis has ended *and* ``beam_size`` hypotheses have finished,
  then returns the finished one with the best (length-penalised) score.

Without a length penalty ParlAI's rule prefers the shortest likely reply, e.g. "i am sorry to hear
that." The reference's cannot go back to a hypothesis that ended while a longer one led the beam:
its replies are longer and more varied (on the first 300 ED test examples its released beam replies
average 13.2 tokens, 128 distinct, against 9.4 tokens and 46 distinct from ParlAI's rule on our
model; README of ``projects/majumder2020_mime``). ``--beam-stop top`` selects this search.

Not reproduced: ``--beam-min-length`` still forbids the end token for the first steps (the
reference has no minimum; the default minimum 1 only removes empty replies), and n-gram blocking
options apply as in ParlAI (the reference has none; they are off by default).
"""

from typing import List, Optional, Tuple

import torch
from parlai.core.torch_generator_agent import BeamSearch, _HypothesisTail
from parlai.utils.torch import neginf


class ReferenceBeamSearch(BeamSearch):
    """Beam search that stops when the top of the beam ends, as the MIME reference's ``Beam``."""

    def advance(self, logprobs: torch.Tensor, step: int) -> None:
        if len(self.all_scores) - 1 < self.min_length:
            logprobs[:, self.eos] = neginf(logprobs.dtype)
        if self.scores is None:
            self.scores = torch.zeros(1).type_as(logprobs).to(logprobs.device)
        if self.block_ngram > 0:
            logprobs = self._block_ngrams(
                ngram_size=self.block_ngram, logprobs=logprobs, step=step, if_context_blocking=False
            )
        logprobs = self._block_block_list(logprobs)
        if self.context_block_ngram > 0:
            logprobs = self._block_ngrams(
                ngram_size=self.context_block_ngram, logprobs=logprobs, step=step, if_context_blocking=True
            )
        # unlike ParlAI's advance, hypotheses that already ended keep their scores: they compete
        selection = self.select_paths(logprobs, self.scores, len(self.all_scores) - 1)
        self.scores = selection.scores
        self.all_scores.append(self.scores.clone())
        self.outputs.append(selection.token_ids)
        self.bookkeep.append(selection.hypothesis_ids)
        device = self.partial_hyps.device
        self.partial_hyps = torch.cat(
            (self.partial_hyps[selection.hypothesis_ids.long().to(device)], selection.token_ids.view(-1, 1).to(device)),
            1,
        )
        if self.verbose:
            for i in range(self.beam_size):
                self.token_details[i].append(selection.token_details[i])
        # select_paths sorts by score: hypothesis 0 is the top of the beam
        if self.outputs[-1][0] == self.eos and not self.eos_top:
            self.eos_top, self.eos_top_ts = True, len(self.outputs) - 1

    def is_done(self) -> bool:
        return self.eos_top

    def _cut(self, hypid: int) -> List[_HypothesisTail]:
        """Hypothesis ``hypid`` of the last step, up to and including its first end token."""
        tail = _HypothesisTail(
            timestep=len(self.outputs) - 1,
            hypid=hypid,
            score=self.all_scores[-1][hypid],
            tokenid=self.outputs[-1][hypid],
            token_details=self.token_details[hypid][-1] if self.token_details is not None else None,
        )
        path = list(reversed(self._get_hyp_from_finished(tail)))  # bos first
        for i, step in enumerate(path[1:], start=1):
            if step.tokenid == self.eos:
                return path[: i + 1]
        return path

    def get_rescored_finished(self, n_best: Optional[int] = None) -> List[Tuple[torch.Tensor, torch.Tensor, None]]:
        """The beam at the stop, best first; each hypothesis cut after its first end token (one
        that never ended gets one, as ParlAI forces). The first is the reply."""
        out = []
        for hypid in range(len(self.outputs[-1]))[:n_best]:
            path = self._cut(hypid)
            tokens = torch.stack([step.tokenid for step in path])
            if tokens[-1] != self.eos:
                tokens = torch.cat([tokens, tokens.new_tensor([self.eos])])
            out.append((tokens, self.all_scores[-1][hypid], None))
        return out
