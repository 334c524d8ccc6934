"""``-t empathy_ed``: EmpatheticDialogues read as ParlAI's own teacher reads it.

Re-exports parlai_empathy.tasks.ed; full path: ``-t parlai_empathy.tasks.ed:FaithfulTeacher``.
"""

from parlai_empathy.tasks.ed import FaithfulTeacher  # noqa: F401
from parlai_empathy.tasks.ed import FaithfulTeacher as DefaultTeacher  # noqa: F401
