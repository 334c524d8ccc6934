"""``zoo:empathy/ethreed/model``: ETHREED (Li et al.), trained on EmpatheticDialogues (see manifest.json)."""

from parlai_empathy.serving.model_zoo import download_or_exit


def download(datapath):
    download_or_exit(datapath, 'ethreed')
