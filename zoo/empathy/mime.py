"""``zoo:empathy/mime/model``: MIME (Majumder et al., 2020), trained on EmpatheticDialogues (see manifest.json)."""
from parlai_empathy.model_zoo import download as _download


def download(datapath):
    _download(datapath, 'mime')
