"""Human evaluation of empathetic replies: Likert (Rashkin et al.) and A/B (MIME) rating tasks.

inputs (ParlAI world logs, ACUTE pairings) -> build/sampling -> db (SQLite) -> app (web pages)
-> providers (local links, MTurk, Prolific-style) -> analysis (tables, kappa, plots).
"""
