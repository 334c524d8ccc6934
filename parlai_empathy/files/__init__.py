"""Files a user hands us, read within documented caps: :mod:`.caps` (every cap, its default and the
environment variable that changes it) and :mod:`.bounded` (the one reader that applies them)."""
