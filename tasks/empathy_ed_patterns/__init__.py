"""``-t empathy_ed_patterns``: pattern-selected ED train subsets (see parlai_empathy.tasks.ed_patterns)."""
