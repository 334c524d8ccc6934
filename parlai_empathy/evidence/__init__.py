"""A table row's evidence: its files (artifacts: report, outputs, portable opt, meta), the steps that
regenerate it (reproduce: ``parlai empathy_reproduce``) and the learning-curve plots drawn from it
(learning_curve)."""
