"""``-t empathy_ed_clean``: the cleaned EmpatheticDialogues of Metz & You.

Re-exports parlai_empathy.tasks.ed; full path: ``-t parlai_empathy.tasks.ed:CleanTeacher``.
"""

from parlai_empathy.tasks.ed import CleanTeacher  # noqa: F401
from parlai_empathy.tasks.ed import CleanTeacher as DefaultTeacher  # noqa: F401
