"""``zoo:empathy/minilm_ranker/model``: Rashkin et al.'s bi-encoder ranker on all-MiniLM-L6-v2, trained on
EmpatheticDialogues (see manifest.json)."""

from parlai_empathy.serving.model_zoo import download_or_exit


def download(datapath):
    download_or_exit(datapath, 'minilm_ranker')
