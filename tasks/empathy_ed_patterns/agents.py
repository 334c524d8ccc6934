from parlai_empathy.tasks.ed_patterns import DefaultTeacher, EDPatternsTeacher  # noqa: F401
