#!/usr/bin/env python3
"""``parlai empathy_reproduce --project <paper> --rows ROW``: re-create a table row's evidence.

Runs the row's plan from ``projects/<paper>/table.json`` (the rows it needs first), each step
exactly as it produced the committed artifacts, and gathers what it wrote into a leaderboard.
Safe to run again: finished steps are skipped and interrupted training resumes from its
checkpoint (see ``parlai_empathy/evidence/reproduce.py``). Works from any directory: the plans come from
the clone around it, or from the copy installed with the package.

The evidence goes to ``<runs-dir>/projects/<paper>/runs/<row>/`` and the leaderboard to
``<runs-dir>/board``; ``--write-projects`` writes it over the committed rows of the clone instead
and refills the project READMEs and ``projects/leaderboard`` (what a maintainer does to commit it).

    parlai empathy_reproduce --project majumder2020_mime --rows mime --dry-run
    parlai empathy_reproduce --project majumder2020_mime --rows mime --runs-dir ~/parlai-empathy-runs
    parlai empathy_reproduce --project li_ethreed --rows ethreed --profile gpu
"""

import os
import shutil

from parlai.core.params import ParlaiParser
from parlai.core.script import register_script

from parlai_empathy.evidence import reproduce
from parlai_empathy.integration.commands import EmpathyScript


@register_script('empathy_reproduce')
class EmpathyReproduce(EmpathyScript):
    @classmethod
    def setup_args(cls):
        parser = ParlaiParser(False, False, "Re-create table rows: run each row's plan, then gather the evidence")
        parser.add_argument(
            '--project', type=str, required=True, help='a project of --projects-dir, e.g. majumder2020_mime'
        )
        parser.add_argument(
            '--projects-dir',
            type=str,
            default=None,
            help=f'the folder of the plans (default: ${reproduce.PROJECTS_ENV}, else projects/ of '
            'the clone around the working directory, else the copy installed with the package)',
        )
        parser.add_argument('--runs-dir', type=str, default='runs', help='model files, checkpoints, logs and evidence')
        parser.add_argument(
            '--rows', type=str, default='', help='comma-separated rows (default: every row with a plan)'
        )
        parser.add_argument(
            '--profile',
            type=str,
            default='cpu',
            choices=list(reproduce.PROFILES),
            help='which plan: cpu (what made the committed figures) or gpu',
        )
        parser.add_argument(
            '--write-projects',
            action='store_true',
            help='write the evidence over the committed rows in --projects-dir and refill the '
            'project READMEs (default: under --runs-dir, leaving the clone as it is)',
        )
        parser.add_argument(
            '--board',
            type=str,
            default=None,
            help='where the leaderboard gathered from the evidence goes ("" for none; default: '
            '<runs-dir>/board, or projects/leaderboard of the clone with --write-projects)',
        )
        parser.add_argument('--dry-run', action='store_true', help='print the commands and their times, run nothing')
        return parser

    def run(self):
        opt = self.opt
        projects_dir = reproduce.find_projects_dir(opt['project'], opt['projects_dir'])
        runs_dir = os.path.abspath(opt['runs_dir'])
        if opt['write_projects'] and reproduce.is_packaged(projects_dir):
            raise SystemExit(
                f"--write-projects writes into a clone's projects/, but the plans here are the copy "
                f'installed with the package ({projects_dir}); run from a clone of parlai-empathy '
                'or pass --projects-dir CLONE/projects'
            )
        evidence_dir = projects_dir if opt['write_projects'] else os.path.join(runs_dir, 'projects')
        entries = [r for r in opt['rows'].split(',') if r] or reproduce.all_rows(projects_dir, opt['project'])
        plans = reproduce.ordered_plans(projects_dir, opt['project'], entries, runs_dir, opt['profile'], evidence_dir)
        timings = [reproduce.row_timing(plan) for plan in plans]
        print(f'[reproduce] plans: {projects_dir}; evidence: {evidence_dir}')
        commands = []
        for plan, timing in zip(plans, timings):
            for step, seconds in zip(plan.steps, timing.seconds):
                commands.append(step.shell())
                if step.done():
                    print(f'[reproduce] {plan.project}/{plan.entry} {step.name}: done already')
                    continue
                took = (
                    f'about {reproduce.duration_words(seconds)} on {timing.machine}, as the committed row took'
                    if seconds is not None
                    else f'not timed: {timing.note or "the committed row has no figure for it"}'
                )
                print(f'# {plan.project}/{plan.entry} {step.name}: {took}', flush=True)
                if opt['dry_run']:
                    print(step.shell())
                else:
                    reproduce.run_step(step, os.path.join(runs_dir, 'logs'))
            if not opt['dry_run']:
                reproduce.record_plan(plan)
        print(
            f'# {opt["profile"]} plan, the steps to run in all: '
            f'{reproduce.plans_estimate(plans, timings, include_done=False)}'
        )
        if not opt['dry_run']:
            self.gather(projects_dir, evidence_dir, plans)
        return commands

    def gather(self, projects_dir, evidence_dir, plans):
        from parlai_empathy.leaderboard import readme_tables, rows
        from parlai_empathy.leaderboard.board import write_outputs

        opt = self.opt
        if opt['write_projects']:
            for readme in readme_tables.fill_project_tables(projects_dir):
                print(f'[reproduce] filled {readme}')
        else:
            for project in sorted({plan.project for plan in plans}):  # the board reads the rows' tables
                os.makedirs(os.path.join(evidence_dir, project), exist_ok=True)
                shutil.copy(
                    os.path.join(projects_dir, project, reproduce.SPEC_FILE),
                    os.path.join(evidence_dir, project, reproduce.SPEC_FILE),
                )
            print(
                f'[reproduce] the evidence is in {evidence_dir} (the committed rows are untouched; '
                '--write-projects writes over them)'
            )
        board = opt['board']
        if board is None:
            board = (
                os.path.join(os.path.abspath(projects_dir), 'leaderboard')
                if opt['write_projects']
                else os.path.join(os.path.abspath(opt['runs_dir']), 'board')
            )
        results = rows.gather_artifacts(evidence_dir) if board else []
        if results:  # a plan without an evaluation step (a classifier's) leaves no row for a board
            write_outputs(results, board, rows.board_notes(results))
            print(f'[reproduce] leaderboard: {board}')


if __name__ == '__main__':
    EmpathyReproduce.main()
