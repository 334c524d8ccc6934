#!/usr/bin/env python3
"""``parlai empathy_leaderboard``: evaluate models on ED test and tabulate the metric suite.

    parlai empathy_leaderboard --entries gen=/runs/generator/model rank=/runs/ranker/model \\
        --outdir leaderboard/ --bertscore-model minilm --projects-dir projects

Entries are ``name=PATH``: a model file (evaluated here), a saved ``eval_model`` report (.json)
or saved world logs (.jsonl). Writes results.json, leaderboard.md/.csv/.png to --outdir.

``--artifacts DIR`` also leaves each evaluated model's evidence in ``DIR/<name>/`` (report,
compressed outputs, portable .opt, meta: ``parlai_empathy/evidence/artifacts.py``); this is how a project
table row gets its figures:

    parlai empathy_leaderboard --entries mime=runs/mime/model --artifacts projects/majumder2020_mime/runs

``--from-artifacts PROJECTS`` evaluates nothing: it gathers every project row's artifacts into the
board in --outdir and rewrites the README tables (what ``make tables`` runs):

    parlai empathy_leaderboard --from-artifacts projects --outdir projects/leaderboard
"""

import sys

from parlai.core.params import ParlaiParser
from parlai.core.script import register_script

from parlai_empathy.integration.commands import EmpathyScript
from parlai_empathy.integration.safe_loading import add_trust_flag


def setup_args():
    from parlai_empathy.metrics.bertscore import add_bertscore_options

    parser = ParlaiParser(True, False, 'Evaluate models on ED test with the parlai-empathy metric suite')
    group = parser.add_argument_group('empathy_leaderboard')
    group.add_argument(
        '--entries', nargs='+', default=[], help='name=PATH (model file, report .json, world logs .jsonl)'
    )
    group.add_argument(
        '--artifacts',
        default=None,
        help="write each evaluated model's evidence into ARTIFACTS/<name>/ (a project's runs/)",
    )
    group.add_argument(
        '--from-artifacts',
        default=None,
        help='evaluate nothing: gather the artifacts of every row of PROJECTS/*/table.json into '
        'the board and rewrite the README tables',
    )
    group.add_argument(
        '--eval-task',
        default='empathy_ed_clean',
        choices=['empathy_ed_clean', 'empathy_ed'],
        help='the ED teacher whose test split every model is evaluated on',
    )
    group.add_argument('--ed-datapath', default=None, help='as for the ED teachers')
    group.add_argument(
        '--outdir', default='leaderboard', help='where leaderboard.md/.csv/.png and results.json are written'
    )
    group.add_argument('--pool', default=None, help='retrieval pool for rankers; default: built from ED train')
    group.add_argument('--pool-max-tokens', type=int, default=20, help="Rashkin's filter; <= 0 keeps all")
    group.add_argument('--eval-args', default='-bs 32', help='extra eval_model arguments for every model')
    group.add_argument(
        '--entry-args', nargs='*', default=[], help='NAME=ARGS: extra eval_model arguments for one entry'
    )
    group.add_argument(
        '--projects-dir', default=None, help='after writing --artifacts, rewrite the projects/<paper>/README.md tables'
    )
    group.add_argument(
        '--p100-shuffled',
        type='bool',
        default=True,
        help="rankers: also P@1,100 on blocks of shuffled test examples (the ED paper's "
        '"randomly selected" wording; plain P@1,100 uses consecutive blocks)',
    )
    group.add_argument(
        '--intervals',
        type='bool',
        default=False,
        help="print every figure's bootstrap 95 %% interval over the test examples; with "
        "--from-artifacts, first recompute each row's intervals from its committed "
        'outputs.jsonl.gz into its report.json',
    )
    group.add_argument('--progress', type='bool', default=True, help='show a progress bar per evaluation')
    group.add_argument(
        '--human-eval',
        nargs='+',
        default=[],
        help='results.json files of parlai empathy_acute_analyze (ACUTE-Eval runs): each row '
        "of the same name gets its win rate against the run's reference system, with "
        'its interval and number of judgments',
    )
    group.add_argument(
        '--eval-workers',
        type=int,
        default=1,
        help='shard each evaluation over this many processes, as parlai multiprocessing_eval '
        '(the same figures; beam search is bound by one CPU thread per process)',
    )
    add_trust_flag(group)  # a model file of another agent (a stock ParlAI baseline) is opened only with it
    add_bertscore_options(group)  # as `parlai empathy_score` has them
    return parser


@register_script('empathy_leaderboard')
class EmpathyLeaderboard(EmpathyScript):
    @classmethod
    def setup_args(cls):
        return setup_args()

    def run(self):
        from parlai_empathy.leaderboard import pipeline

        argv = sys.argv[2:] if sys.argv[1:2] == [pipeline.COMMAND] else sys.argv[1:]
        return pipeline.run(self.opt, argv)


if __name__ == '__main__':
    EmpathyLeaderboard.main()
