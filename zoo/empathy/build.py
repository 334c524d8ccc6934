"""ParlAI's fallback for a ``zoo:empathy/<name>`` that has no module: list the real entries."""
from parlai_empathy.model_zoo import ZooModelUnavailable, load_manifest


def download(datapath):
    entries = ', '.join(f'zoo:empathy/{name}/model' for name in sorted(load_manifest()))
    raise ZooModelUnavailable(f'not a parlai-empathy zoo model; the entries are: {entries}')
