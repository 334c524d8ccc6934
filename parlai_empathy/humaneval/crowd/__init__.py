"""Human evaluation on ParlAI's own crowdsourcing tasks (ACUTE-Eval, turn annotations) on Mephisto.

* :mod:`.bridge`: our items (world logs, committed rows' outputs, other papers' released outputs)
  into ACUTE-Eval pairings with onboarding pairs, and turn-annotation data for one model;
* :mod:`.pages`: our task pages (``webapp/``, built with npm) and Mephisto's router copy;
* :mod:`.launch`: the task run on Mephisto (mock provider and local architect by default, MTurk
  sandbox or live with the documented flags), everything under one run folder;
* :mod:`.results`: the answers read back from Mephisto's database into the report our own
  server's analysis writes.

Only :mod:`.launch` and :mod:`.results` import Mephisto, after
:func:`parlai_empathy.integration.compat.prepare_crowd`; the rest runs without the crowd extra.
"""
