"""ParlAI's fallback for a ``zoo:empathy/<name>`` that has no module: list the real entries."""

import sys

from parlai_empathy.serving.model_zoo import load_manifest


def download(datapath):
    # ParlAI calls this while parsing the command line: the message alone, not a traceback
    entries = ', '.join(f'zoo:empathy/{name}/model' for name in sorted(load_manifest()))
    print(f'not a parlai-empathy zoo model; the entries are: {entries}', file=sys.stderr, flush=True)
    raise SystemExit(1)
