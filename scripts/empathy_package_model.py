#!/usr/bin/env python3
"""``parlai empathy_package_model -mf MODEL --name NAME``: a trained model as a zoo release.

    parlai empathy_package_model -mf runs/majumder2020_mime/mime/model --name mime \\
        --project majumder2020_mime --row mime --results projects/leaderboard/results.json --install-zoo

Writes ``<outdir>/<name>-<version>.tar.gz`` (weights, options without local paths, dictionary,
the pool and its encodings for rankers), its ``.sha256`` and the model card ``.card.md``, prints
the manifest entry (``--manifest zoo/empathy/manifest.json`` writes it there), and with
``--install-zoo`` installs the archive where ``-mf zoo:empathy/<name>/model`` finds it.

``--zoo-entry NAME`` (or ``all``, or a comma-separated list) builds a zoo entry from its row's
plan instead: it runs the two commands that ``-mf zoo:empathy/<name>/model`` prints when the
model is missing (``parlai empathy_reproduce`` of the row, then this command on the model it
leaves, with ``--install-zoo``); ``--dry-run`` prints them with the time each row took.
"""

import json
import shlex
import subprocess
import sys

from parlai.core.params import ParlaiParser
from parlai.core.script import register_script

from parlai_empathy.integration.commands import EmpathyScript
from parlai_empathy.integration.safe_loading import add_trust_flag


@register_script('empathy_package_model')
class EmpathyPackageModel(EmpathyScript):
    @classmethod
    def setup_args(cls):
        parser = ParlaiParser(True, False, 'Package a trained model: release archive, sha256, model card')
        parser.add_argument('-mf', '--model-file', default=None, help='the trained model file')
        parser.add_argument('--name', default=None, help='zoo name: zoo:empathy/<name>/model')
        parser.add_argument(
            '--zoo-entry',
            default=None,
            help="build manifest entries from their rows' plans instead (NAME, NAME,NAME or all): "
            'parlai empathy_reproduce, then this command with --install-zoo',
        )
        parser.add_argument('--runs-dir', default='runs', help='--zoo-entry: where the rows are trained')
        parser.add_argument('--profile', default='cpu', choices=['cpu', 'gpu'], help='--zoo-entry: which plan')
        parser.add_argument('--dry-run', action='store_true', help='--zoo-entry: print the commands, run nothing')
        parser.add_argument('--version', default='v1', help='release version, part of the file names')
        parser.add_argument('--outdir', default='release', help='where the archive, .sha256 and card go')
        parser.add_argument(
            '--pool', default=None, help='rankers: the retrieval pool file (default: the one the model used)'
        )
        parser.add_argument('--project', default=None, help='projects/<project>/table.json of the row')
        parser.add_argument('--row', default=None, help='the table row (leaderboard entry) of this model')
        parser.add_argument(
            '--projects-dir',
            default=None,
            help="the folder of the projects' table.json (default: as parlai empathy_reproduce finds it)",
        )
        parser.add_argument(
            '--results', default=None, help="leaderboard results.json (or results.json#ROW) with this model's figures"
        )
        parser.add_argument('--description', default='', help='one paragraph at the top of the card')
        parser.add_argument(
            '--manifest', default=None, help='write the entry into this manifest (e.g. zoo/empathy/manifest.json)'
        )
        parser.add_argument(
            '--install-zoo', action='store_true', help='install the archive where zoo:empathy/<name>/model finds it'
        )
        # only our agents are packaged: -mf of another agent is refused, even while parsing
        return add_trust_flag(parser, opt_in=False)

    def run(self):
        from parlai_empathy.evidence import reproduce
        from parlai_empathy.serving import model_zoo, packaging

        opt = self.opt
        if opt['zoo_entry']:
            return self.build_zoo_entries()
        if not (opt['model_file'] and opt['name']):
            raise SystemExit(
                'parlai empathy_package_model needs -mf MODEL and --name NAME '
                "(or --zoo-entry NAME to build a zoo entry from its row's plan)"
            )
        results = opt['results']
        row = opt['row'] or opt['name']
        projects_dir = opt['projects_dir']
        if opt['project'] and not projects_dir:
            projects_dir = reproduce.find_projects_dir(opt['project'])
        package = packaging.package_model(
            opt['model_file'],
            opt['name'],
            opt['outdir'],
            opt['version'],
            opt['pool'],
            card_args=dict(
                results=results,
                project=opt['project'],
                row=row,
                projects_dir=projects_dir,
                description=opt['description'],
            ),
        )
        print(f'archive: {package.archive} ({package.size:,} bytes)')
        print(f'sha256:  {package.sha256}  ({package.archive}.sha256)')
        print(f'card:    {package.card}')
        print(f'sample:  {json.dumps(package.sample, ensure_ascii=False)}')
        fields = dict(package.manifest_fields)
        if opt['project']:
            fields.update(project=opt['project'], row=row)
        print('manifest entry:\n' + json.dumps({opt['name']: fields}, indent=2))
        if opt['manifest']:
            model_zoo.update_manifest(opt['manifest'], opt['name'], fields)
            print(f'updated {opt["manifest"]}')
        if opt['install_zoo']:
            folder = model_zoo.install_archive(
                package.archive,
                model_zoo.model_dir(opt['datapath'], opt['name']),
                model_zoo.LOCAL_PREFIX + package.sha256,
                fields['agent'],
            )
            print(f'installed in {folder}: -mf zoo:empathy/{opt["name"]}/model')
        return package

    def build_zoo_entries(self):
        from parlai_empathy.serving import model_zoo

        opt = self.opt
        entries = model_zoo.load_manifest()
        names = sorted(entries) if opt['zoo_entry'] == 'all' else [n for n in opt['zoo_entry'].split(',') if n]
        unknown = [n for n in names if n not in entries]
        if unknown:
            raise SystemExit(
                f'--zoo-entry {",".join(unknown)}: not in {model_zoo.default_manifest_path()} '
                f'(entries: {", ".join(sorted(entries))}, or all)'
            )
        commands = []
        for name in names:
            entry = entries[name]
            print(f'# zoo:empathy/{name}/model: {entry.build_time(opt["profile"])}', flush=True)
            for argv in entry.build_argvs(opt['datapath'], opt['runs_dir'], opt['profile']):
                commands.append(argv)
                print('parlai ' + shlex.join(argv), flush=True)
                if opt['dry_run']:
                    continue
                done = subprocess.run([sys.executable, '-m', 'parlai'] + argv)
                if done.returncode != 0:
                    raise SystemExit(
                        f'zoo:empathy/{name}: parlai {argv[0]} failed (exit {done.returncode}); '
                        'run the same command again to resume'
                    )
        return commands


if __name__ == '__main__':
    EmpathyPackageModel.main()
