"""``-m empathy/bert_ranker``: see :mod:`parlai_empathy.agents.bert_ranker`."""

from parlai_empathy.agents.bert_ranker import BertRankerAgent  # noqa: F401
