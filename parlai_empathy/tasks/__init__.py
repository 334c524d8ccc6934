"""ParlAI teachers. Each is registered under its plain name and re-exported into
``parlai.tasks.<name>`` by the wheel, so ``-t empathy_ed_clean`` and the full path
``-t parlai_empathy.tasks.ed:CleanTeacher`` both work."""
