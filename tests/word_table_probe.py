"""Read a built agent's GloVe-initialised word table from a child script (the MIME and ETHREED
``--glove-fill-std`` tests).

``PROBE`` is Python source that expects ``agent`` (a ParlAI agent with a ``WordEmbedding``) and
prints, for the table ``table`` and the GloVe rows ``matrix``/``hit`` of its vocabulary:
``MISSING <count> <std of the rows GloVe lacks>`` and ``GLOVESTD <std of the found values>``; a
test appends its own prints that use ``table``, ``matrix`` and ``hit``. :func:`stats` reads the
printed lines back.
"""

PROBE = (
    'from parlai_empathy.models import glove\n'
    'from parlai_empathy.models.embeddings import WordEmbedding\n'
    'table = next(m for m in agent.model.modules() if isinstance(m, WordEmbedding)).table.weight.detach()\n'
    'vocab = [agent.dict.ind2tok[i] for i in range(len(agent.dict))]\n'
    'matrix, hit = glove.load_glove(vocab)\n'
    'missing = ~hit\n'
    'missing[agent.NULL_IDX] = False\n'
    "print('MISSING', int(missing.sum()), float(table[missing].std()))\n"
    "print('GLOVESTD', float(matrix[hit].std()))\n"
)


def stats(stdout, keys):
    """``{KEY: [values...]}`` for the printed lines whose first word is one of ``keys``."""
    rows = (line.split() for line in stdout.splitlines())
    return {words[0]: words[1:] for words in rows if words and words[0] in keys}
