"""``zoo:empathy/ethreed/model``: ETHREED (Li et al.), trained on EmpatheticDialogues (see manifest.json)."""
from parlai_empathy.model_zoo import download as _download


def download(datapath):
    _download(datapath, 'ethreed')
