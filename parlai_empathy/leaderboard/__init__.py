"""A leaderboard: every model evaluated on ED test with the one metric suite.

Each entry is a trained model file (evaluated in ParlAI's own eval loop, with the suite's metrics
recorded by the ED teacher), a saved ``eval_model`` report, saved world logs (scored offline with
the same code) or a row of an earlier board. One job per module:

* :mod:`.pipeline`: ``parlai empathy_leaderboard``'s stages in their order, from its options to the
  board (the command's script only declares the options);
* :mod:`.records`: the typed records read and written (:class:`Entry`, :class:`EntryResult`, a
  board row; :class:`Report` and :class:`Meta`, a row's ``report.json`` and ``meta.json``);
* :mod:`.eval_loop`: ParlAI's evaluation loop, sharded over processes as ``multiprocessing_eval``;
* :mod:`.worldlogs`: per-example rows and P@1,100 hits read from world logs;
* :mod:`.evaluation`: entries into board rows (:func:`evaluate_entry`, BERTScore, offline figures);
* :mod:`.artifacts`: an evaluated entry's evidence (:mod:`parlai_empathy.evidence.artifacts`) in
  ``<artifacts>/<entry>/``;
* :mod:`.rows`: the board's rows gathered from the committed evidence alone (:func:`gather_artifacts`);
* :mod:`.columns`: the board's columns and headline metrics;
* :mod:`.board`: ``results.json``, ``leaderboard.csv`` and ``leaderboard.md``; :mod:`.plot`:
  ``leaderboard.png``, one panel per headline metric, the paper's figure on the bars' scale;
* :mod:`.readme_tables`: the ``projects/<paper>/README.md`` tables described by ``table.json``
  (:func:`fill_project_tables`);
* :mod:`.formatting`: the one number formatter every table, figure and model card writes with.

The names below are the package's interface for callers that do not need a module of their own.
"""

from parlai_empathy.leaderboard.artifacts import write_entry_artifacts
from parlai_empathy.leaderboard.board import write_outputs
from parlai_empathy.leaderboard.evaluation import (
    add_bertscore,
    add_offline_figures,
    attach_entry_args,
    earlier_result,
    evaluate_entry,
    model_kind,
    parse_entries,
)
from parlai_empathy.leaderboard.readme_tables import fill_project_tables
from parlai_empathy.leaderboard.records import Entry, EntryResult, Meta, Report
from parlai_empathy.leaderboard.rows import board_notes, gather_artifacts, project_tables
from parlai_empathy.leaderboard.worldlogs import p100_hits

__all__ = [
    'Entry',
    'EntryResult',
    'Meta',
    'Report',
    'add_bertscore',
    'add_offline_figures',
    'attach_entry_args',
    'board_notes',
    'earlier_result',
    'evaluate_entry',
    'fill_project_tables',
    'gather_artifacts',
    'model_kind',
    'p100_hits',
    'parse_entries',
    'project_tables',
    'write_entry_artifacts',
    'write_outputs',
]
