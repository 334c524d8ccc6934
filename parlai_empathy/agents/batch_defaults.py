"""Training defaults every agent of ours shares: the paper's batch size and checkpoints that a
resumed run can trust (a light module: the classifier and the ranker use it without importing the
generator machinery)."""


def paper_batch_size(parser, partial_opt, size):
    """The paper's batch size as the default, except in interactive scripts: their world would
    then be a batch of ``size`` chats reading one console."""
    if not (partial_opt or {}).get('interactive_mode'):
        parser.set_defaults(batchsize=size)


def training_defaults(parser, partial_opt, batch_size):
    """:func:`paper_batch_size`, and ``--save-after-valid true``: the ``.checkpoint`` a killed run
    resumes from is then never older than its last validation. With ``--save-every-n-secs`` alone
    a run killed between a new best validation and the next timed checkpoint resumes with the
    checkpoint's older best figure, and the first repeated validation that beats *that* figure
    overwrites the better model file (``parlai_empathy.integration.compat`` also repairs runs saved without it)."""
    paper_batch_size(parser, partial_opt, batch_size)
    parser.set_defaults(save_after_valid=True)
