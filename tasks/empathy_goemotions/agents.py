from parlai_empathy.tasks.goemotions import DefaultTeacher, GoEmotionsTeacher  # noqa: F401
