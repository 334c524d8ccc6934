"""The papers' batch sizes as agent defaults (a light module: the classifier and the ranker use it
without importing the generator machinery)."""


def paper_batch_size(parser, partial_opt, size):
    """The paper's batch size as the default, except in interactive scripts: their world would
    then be a batch of ``size`` chats reading one console."""
    if not (partial_opt or {}).get('interactive_mode'):
        parser.set_defaults(batchsize=size)
