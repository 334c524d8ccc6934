"""``-t empathy_ed_emotion``: ED 32-way emotion classification (see parlai_empathy.tasks.ed_emotion)."""
