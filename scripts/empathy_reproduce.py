"""``parlai empathy_reproduce --project <paper> --rows ROW``: re-create a table row's evidence.

Runs the row's plan from ``projects/<paper>/table.json`` (the rows it needs first), each step
exactly as it produced the committed artifacts, then rewrites the project tables from the
artifacts. Safe to run again: finished steps are skipped and interrupted training resumes from
its checkpoint (see ``parlai_empathy/reproduce.py``).

    parlai empathy_reproduce --project majumder2020_mime --rows mime --runs-dir ~/parlai-empathy-runs
    parlai empathy_reproduce --project li_ethreed --rows ethreed --profile gpu
    parlai empathy_reproduce --project metz2020_emotion_patterns --dry-run
"""
from parlai_empathy import compat

compat.apply()

import os  # noqa: E402

from parlai.core.params import ParlaiParser  # noqa: E402
from parlai.core.script import ParlaiScript, register_script  # noqa: E402

from parlai_empathy import reproduce  # noqa: E402


@register_script('empathy_reproduce')
class EmpathyReproduce(ParlaiScript):
    @classmethod
    def setup_args(cls):
        parser = ParlaiParser(False, False, "Re-create table rows: run each row's plan, then refill the tables")
        parser.add_argument('--project', type=str, required=True, help='a folder of --projects-dir, e.g. majumder2020_mime')
        parser.add_argument('--projects-dir', type=str, default='projects')
        parser.add_argument('--runs-dir', type=str, default='runs', help='model files, checkpoints and logs')
        parser.add_argument('--rows', type=str, default='', help='comma-separated rows (default: every row with a plan)')
        parser.add_argument('--profile', type=str, default='cpu', choices=list(reproduce.PROFILES),
                            help='which plan: cpu (what made the committed figures) or gpu')
        parser.add_argument('--board', type=str, default='bench/leaderboard',
                            help='where the leaderboard gathered from every artifact goes ("" for none)')
        parser.add_argument('--dry-run', action='store_true', help='print the commands, run nothing')
        return parser

    def run(self):
        opt = self.opt
        entries = [r for r in opt['rows'].split(',') if r] or reproduce.all_rows(opt['projects_dir'], opt['project'])
        plans = reproduce.ordered_plans(opt['projects_dir'], opt['project'], entries, opt['runs_dir'], opt['profile'])
        commands = []
        for plan in plans:
            for step in plan.steps:
                commands.append(step.shell())
                if step.done():
                    print(f'[reproduce] {plan.project}/{plan.entry} {step.name}: done already')
                elif opt['dry_run']:
                    print(step.shell())
                else:
                    reproduce.run_step(step, os.path.join(os.path.abspath(opt['runs_dir']), 'logs'))
            if not opt['dry_run']:
                reproduce.record_plan(plan)
        if not opt['dry_run']:
            from parlai_empathy import leaderboard

            for readme in leaderboard.fill_project_tables(opt['projects_dir']):
                print(f'[reproduce] filled {readme}')
            if opt['board']:
                results = leaderboard.gather_artifacts(opt['projects_dir'])
                leaderboard.write_outputs(results, opt['board'], leaderboard.board_notes(results))
        return commands


if __name__ == '__main__':
    EmpathyReproduce.main()
