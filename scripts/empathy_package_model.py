#!/usr/bin/env python3
"""``parlai empathy_package_model -mf MODEL --name NAME``: a trained model as a zoo release.

    parlai empathy_package_model -mf runs/majumder2020_mime/mime/model --name mime \\
        --project majumder2020_mime --row mime --results bench/leaderboard/results.json --install-zoo

Writes ``<outdir>/<name>-<version>.tar.gz`` (weights, options without local paths, dictionary,
the pool and its encodings for rankers), its ``.sha256`` and the model card ``.card.md``, prints
the manifest entry (``--manifest zoo/empathy/manifest.json`` writes it there), and with
``--install-zoo`` installs the archive where ``-mf zoo:empathy/<name>/model`` finds it.
"""
import json
import os

from parlai_empathy import compat

compat.apply()

from parlai.core.params import ParlaiParser  # noqa: E402
from parlai.core.script import ParlaiScript, register_script  # noqa: E402


@register_script('empathy_package_model')
class EmpathyPackageModel(ParlaiScript):
    @classmethod
    def setup_args(cls):
        parser = ParlaiParser(True, False, 'Package a trained model: release archive, sha256, model card')
        parser.add_argument('-mf', '--model-file', required=True, help='the trained model file')
        parser.add_argument('--name', required=True, help='zoo name: zoo:empathy/<name>/model')
        parser.add_argument('--version', default='v1', help='release version, part of the file names')
        parser.add_argument('--outdir', default='release', help='where the archive, .sha256 and card go')
        parser.add_argument('--pool', default=None,
                            help='rankers: the retrieval pool file (default: the one the model used)')
        parser.add_argument('--project', default=None, help='projects/<project>/table.json of the row')
        parser.add_argument('--row', default=None, help='the table row (leaderboard entry) of this model')
        parser.add_argument('--projects-dir', default='projects')
        parser.add_argument('--results', default=None,
                            help='leaderboard results.json (or results.json#ROW) with this model\'s figures')
        parser.add_argument('--description', default='', help='one paragraph at the top of the card')
        parser.add_argument('--manifest', default=None,
                            help='write the entry into this manifest (e.g. zoo/empathy/manifest.json)')
        parser.add_argument('--install-zoo', action='store_true',
                            help='install the archive where zoo:empathy/<name>/model finds it')
        return parser

    def run(self):
        from parlai_empathy import model_zoo, packaging

        opt = self.opt
        results = opt['results']
        row = opt['row'] or opt['name']
        package = packaging.package_model(
            opt['model_file'], opt['name'], opt['outdir'], opt['version'], opt['pool'],
            card_args=dict(results=results, project=opt['project'], row=row,
                           projects_dir=opt['projects_dir'], description=opt['description']))
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
            folder = model_zoo.install_archive(package.archive, model_zoo.model_dir(opt['datapath'], opt['name']),
                                               model_zoo.LOCAL_PREFIX + package.sha256)
            print(f'installed in {folder}: -mf zoo:empathy/{opt["name"]}/model')
        return package


if __name__ == '__main__':
    EmpathyPackageModel.main()
