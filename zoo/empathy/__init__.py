"""Model-zoo entries for parlai-empathy (``-mf zoo:empathy/<name>/model``).

Entries are added as trained models are published; each module defines ``download(datapath)``.
"""
