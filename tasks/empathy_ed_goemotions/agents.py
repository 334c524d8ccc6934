from parlai_empathy.tasks.ed_goemotions import DefaultTeacher, EDGoEmotionsTeacher  # noqa: F401
