"""``-t empathy_goemotions``: GoEmotions multi-label classification (see parlai_empathy.tasks.goemotions)."""
