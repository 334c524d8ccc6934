"""Files a user hands us, read within documented caps: :mod:`.caps` (every cap, its default and the
environment variable that changes it), :mod:`.bounded` (the one reader that applies them),
:mod:`.web_limits` (the bounded request-body reader both servers use), :mod:`.cache_lock` (file locks
and atomic writes shared by every cache, evidence writer and model save) and :mod:`.offline_models`
(the hub-free encoders every BERT option accepts)."""
