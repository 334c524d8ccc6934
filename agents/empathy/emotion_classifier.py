"""``-m empathy/emotion_classifier`` (see parlai_empathy.agents.emotion_classifier)."""

from parlai_empathy.agents.emotion_classifier import EmotionClassifierAgent  # noqa: F401
