"""A ranker without a model (``-m echo_ranker:EchoRanker``): ranks the inline candidates as given,
enough to count which examples an evaluation loop reached."""

from parlai.core.agents import Agent


class EchoRanker(Agent):
    def act(self):
        candidates = list(self.observation.get('label_candidates') or [])
        return {
            'id': 'echo',
            'text': candidates[0] if candidates else '',
            'text_candidates': candidates,
            'episode_done': False,
        }
