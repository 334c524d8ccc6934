"""The one metric suite of parlai-empathy (see README.md in this folder for the definitions).

Modules: ``bleu`` (sacrebleu corpus BLEU, avg_bleu, multi-bleu mode), ``distinct`` (Distinct-n),
``bertscore`` (BERTScore F1), ``emotion`` (emo_acc@k), ``retrieval`` (p@1,100),
``parlai_metrics`` (ParlAI Metric adapters and recording helpers for agents), ``suite`` (offline
scoring entry point), ``saved_outputs`` (reading world logs / TSV files of outputs).
Import the submodule you need; this package imports nothing heavy itself.
"""
