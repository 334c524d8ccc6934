"""The batched greedy search gives ParlAI's replies and scores, for every generator agent.

Each tiny agent (trained by ``parlai train_model``) decodes the same batch of embedded-sample
contexts twice: through the agent (the batched search) and through ParlAI's own per-example loop
(``TorchGeneratorAgent._generate``); tokens and scores must be equal, not merely close.
"""

import os

import pytest
import torch
from parlai.core.agents import create_agent_from_model_file
from parlai.core.message import Message
from parlai.core.torch_generator_agent import TorchGeneratorAgent

from parlai_empathy.agents import batched_search
from parlai_empathy.agents.detokenize import detokenize
from parlai_empathy.data import ed_raw, ed_source
from parlai_empathy.data.ed_episodes import build_episodes
from tiny_models import cached_tiny_model

GENERATORS = ('mime', 'multitask_transformer', 'moel', 'ethreed')


def sample_batch(agent, n=24):
    conversations, _ = ed_raw.read_clean(os.path.join(ed_source.sample_dir(), 'test.csv'))
    examples = [ex for episode in build_episodes(conversations, both_sides=False) for ex in episode][:n]
    observations = []
    for example in examples:
        message = example.to_message()
        del message['labels']
        message.update(text='\n'.join(example.context_utterances), episode_done=True)
        agent.reset()
        observations.append(agent.observe(Message(message)))
    agent.reset()
    return agent.batchify(observations)


def both_searches(agent, batch, max_ts):
    agent.model.eval()
    with torch.no_grad():  # the same random draws for both (ETHREED samples R at test time too)
        torch.manual_seed(0)
        ours, searches = agent._generate(batch, 1, max_ts)
        torch.manual_seed(0)
        theirs, parlai_searches = TorchGeneratorAgent._generate(agent, batch, 1, max_ts)
    return ours, theirs, searches, parlai_searches


@pytest.mark.parametrize('inference', ['greedy', 'beam'])
@pytest.mark.parametrize('agent_name', GENERATORS)
def test_same_tokens_and_scores_as_parlais_loop(tmp_path_factory, agent_name, inference, monkeypatch):
    model_file = cached_tiny_model(tmp_path_factory, agent_name)
    overrides = {
        'inference': inference,
        'beam_size': 1,
        'skip_generation': False,
        'beam_min_length': 3,
        'split_lines': True,
    }
    if agent_name != 'ethreed':
        overrides['beam_stop'] = 'finished'  # ParlAI's BeamSearch (``top`` keeps ParlAI's loop)
    agent = create_agent_from_model_file(model_file, overrides)
    used = []
    real = batched_search.batched_greedy
    monkeypatch.setattr(
        'parlai_empathy.agents.encoder_readout.batched_greedy', lambda *a, **k: used.append(1) or real(*a, **k)
    )
    batch = sample_batch(agent)
    lengths = set()
    for max_ts in (1, 4, 40):
        ours, theirs, searches, parlai_searches = both_searches(agent, batch, max_ts)
        assert used, 'the batched search was not taken'
        assert len(ours) == len(theirs) == batch.batchsize
        for (tokens, score, details), (t_tokens, t_score, t_details) in zip(ours, theirs):
            assert torch.equal(tokens, t_tokens), (tokens, t_tokens)
            assert torch.equal(score, t_score) and score.dtype == t_score.dtype
            assert details is None and t_details is None
            # the reply's text: ours reads the ids as a list, ParlAI's loop the tensor
            assert agent._v2t(tokens) == detokenize(TorchGeneratorAgent._v2t(agent, tokens))
            lengths.add(len(tokens))
        for search, parlai_search in zip(searches, parlai_searches):
            [(tokens, score, _)] = search.get_rescored_finished()
            [(t_tokens, t_score, _)] = parlai_search.get_rescored_finished()
            assert torch.equal(tokens, t_tokens) and torch.equal(score, t_score)
    # replies of several lengths: forced ends at max_ts and, for max_ts 40, the minimum length
    assert len(lengths) >= 3, lengths


def test_other_searches_keep_parlais_loop(tmp_path_factory):
    model_file = cached_tiny_model(tmp_path_factory, 'mime')
    cases = [
        {'inference': 'beam', 'beam_size': 2},
        {'inference': 'beam', 'beam_size': 1, 'beam_stop': 'top'},  # the MIME reference's beam
        {'inference': 'greedy', 'beam_block_ngram': 2},
        {'inference': 'greedy', 'beam_context_block_ngram': 2},
        {'inference': 'greedy', 'temperature': 0.7},
        {'inference': 'topk', 'topk': 5},
        {'inference': 'greedy', 'verbose': True},
    ]
    for overrides in cases:
        agent = create_agent_from_model_file(model_file, {'beam_size': 1, **overrides, 'skip_generation': False})
        device = torch.device('cpu')
        assert batched_search.applicable_search(agent, agent.beam_size, device, None) is None, overrides
    agent = create_agent_from_model_file(model_file, {'inference': 'greedy', 'beam_size': 1, 'skip_generation': False})
    assert batched_search.applicable_search(agent, 1, torch.device('cpu'), None) is not None
    assert batched_search.applicable_search(agent, 1, torch.device('cpu'), torch.ones(2, 1).long()) is None
