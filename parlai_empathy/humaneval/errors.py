"""The one error type of the rating server's rules."""


class TaskError(Exception):
    """A request the task cannot honour; ``status`` is the HTTP code the app returns."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status
