from parlai_empathy.tasks.ed_emotion import DefaultTeacher, EDEmotionTeacher  # noqa: F401
