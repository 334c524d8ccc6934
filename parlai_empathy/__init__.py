"""parlai-empathy: empathetic-dialogue research as a ParlAI plugin.

The library lives here (data, emotions, models, metrics, humaneval); the ParlAI-facing teachers,
agents and scripts are thin modules that the wheel installs into ParlAI's own namespaces. This
file stays import-light: the start-up hook imports ``parlai_empathy.integration.compat`` in every process.
"""

__version__ = '0.1.0'
