"""``zoo:empathy/mime/model``: MIME (Majumder et al., 2020), trained on EmpatheticDialogues (see manifest.json)."""

from parlai_empathy.serving.model_zoo import download_or_exit


def download(datapath):
    download_or_exit(datapath, 'mime')
