"""``-t empathy_ed_goemotions``: cleaned ED with GoEmotions tags (see parlai_empathy.tasks.ed_goemotions)."""
