"""``parlai empathy_reproduce --project <paper>``: one command re-runs a paper's table.

Runs the project's preparation steps and trains each row's model (see
``parlai_empathy/reproduce.py`` for the ``reproduce`` section of ``projects/<paper>/table.json``),
then evaluates them all with ``parlai empathy_leaderboard`` and fills the README table. Safe to run
again: finished steps are skipped and interrupted training resumes from its checkpoint.

    parlai empathy_reproduce --project majumder2020_mime --runs-dir runs/mime
    parlai empathy_reproduce --project li_ethreed --rows ethreed,ethreed_no_policy --train-args "--max-train-time 3600"
    parlai empathy_reproduce --project metz2020_emotion_patterns --bert offline-minilm --dry-run
"""
from parlai_empathy import compat

compat.apply()

import os  # noqa: E402
import shlex  # noqa: E402

from parlai.core.params import ParlaiParser  # noqa: E402
from parlai.core.script import ParlaiScript, register_script  # noqa: E402

from parlai_empathy import reproduce  # noqa: E402


@register_script('empathy_reproduce')
class EmpathyReproduce(ParlaiScript):
    @classmethod
    def setup_args(cls):
        parser = ParlaiParser(False, False, "Re-run a paper's table: prepare, train every row, evaluate, fill the README")
        parser.add_argument('--project', type=str, required=True, help='a folder of --projects-dir, e.g. majumder2020_mime')
        parser.add_argument('--projects-dir', type=str, default='projects')
        parser.add_argument('--runs-dir', type=str, default=None, help='model files and logs (default runs/<project>)')
        parser.add_argument('--bert', type=str, default='bert-base-uncased',
                            help='the BERT-family encoder of the rankers and classifiers: a hub name, a '
                            'directory, or offline-minilm (all-MiniLM-L6-v2 from PyPI, no hub needed)')
        parser.add_argument('--ranker-args', type=str, default=None,
                            help='how the bi-encoder rows pool and score (default: the paper\'s CLS and dot '
                            'product for BERT; "--pooling mean --similarity cosine" for MiniLM sentence encoders)')
        parser.add_argument('--rows', type=str, default='', help='comma-separated entries (default: every row)')
        parser.add_argument('--train-args', type=str, default='',
                            help='appended to every row\'s train command, e.g. "--max-train-time 3600" on a CPU budget')
        parser.add_argument('--leaderboard-args', type=str, default='--bertscore-model minilm --eval-args "-bs 64"',
                            help='extra parlai empathy_leaderboard arguments')
        parser.add_argument('--dry-run', action='store_true', help='print the commands, run nothing')
        return parser

    def run(self):
        opt = self.opt
        runs_dir = opt['runs_dir'] or os.path.join('runs', opt['project'])
        only = [r for r in opt['rows'].split(',') if r]
        plan = reproduce.load_plan(opt['projects_dir'], opt['project'], runs_dir, only,
                                   shlex.split(opt['train_args']), opt['bert'], opt['ranker_args'])
        logs = os.path.join(runs_dir, 'logs')
        board = reproduce.Step('leaderboard', reproduce.leaderboard_argv(
            plan, os.path.join(runs_dir, 'leaderboard'), opt['projects_dir'], shlex.split(opt['leaderboard_args'])))
        steps = plan.prepare + list(plan.rows.values()) + [board]
        for step in steps:
            if step.done():
                print(f'[reproduce] {step.name}: done already ({step.creates})')
            elif opt['dry_run']:
                print(step.shell())
            else:
                reproduce.run_step(step, logs)
        if not opt['dry_run']:
            print(f'[reproduce] {opt["project"]}: table filled in {os.path.join(plan.readme_dir, "README.md")}')
        return [step.shell() for step in steps]


if __name__ == '__main__':
    EmpathyReproduce.main()
