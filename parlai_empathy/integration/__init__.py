"""How the package fits into ParlAI 1.7.2: the version shims (compat), the start-up hook that arms
them (startup), CPU gloo for distributed training (cpu_distributed), model folders opened without
unpickling and the agents a folder may name (safe_loading, model_opt), and the base of every
``parlai empathy_*`` command (commands)."""
