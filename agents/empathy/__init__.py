"""parlai-empathy agents, reachable as ``-m empathy/<name>``.

Each module here only re-exports a real agent class from ``parlai_empathy.agents``; the full-path
form ``-m parlai_empathy.agents.<module>:<Class>`` reaches the same class.
"""
