"""parlai-empathy task (thin ParlAI-facing module; the real classes are in parlai_empathy.tasks)."""
