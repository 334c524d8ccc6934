"""Plain torch.nn models (never import ParlAI here)."""
