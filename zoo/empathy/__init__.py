"""Model-zoo entries for parlai-empathy (``-mf zoo:empathy/<name>/model``).

Each entry is listed in ``manifest.json`` (archive, sha256, size, model card, version, and the
``parlai empathy_reproduce`` row that trains it) and has a module ``<name>.py`` whose
``download(datapath)`` ParlAI calls; the work is done by :mod:`parlai_empathy.serving.model_zoo`.
"""
