"""``parlai empathy_patterns``: analyse Speaker->Listener GoEmotions transitions in ED train and
write the pattern-subset manifests.

Outputs under ``--report-dir``: summary.md, CSVs (transitions, pattern set, per-ED-emotion, count
/rate/lift matrices), PNG heatmaps, and ``subsets/<preset>-<hash>.json`` for p87, p57, with43 and
without43.
"""

import json
import os
from dataclasses import replace

from parlai.core.params import ParlaiParser
from parlai.core.script import register_script

from parlai_empathy.data import ed_source
from parlai_empathy.data.file_errors import exit_on_data_errors
from parlai_empathy.emotions import patterns, subsets
from parlai_empathy.integration.commands import EmpathyScript
from parlai_empathy.tasks.ed_goemotions import add_tag_args, open_tags
from parlai_empathy.tasks.ed_patterns import add_pattern_args, threshold_params


@register_script('empathy_patterns')
class EmpathyPatterns(EmpathyScript):
    @classmethod
    def setup_args(cls):
        parser = ParlaiParser(True, False, 'Emotion-interaction patterns of GoEmotions-tagged ED')
        parser.add_argument('--ed-datapath', type=str, default=None, help='as for empathy_ed_clean')
        parser.add_argument('--report-dir', type=str, required=True, help='folder the pattern report is written to')
        parser.add_argument(
            '--split', type=str, default='train', help='ED split whose conversations the patterns are mined from'
        )
        parser.add_argument(
            '--usage-split',
            type=str,
            default='test',
            help='also count, per label, the utterances of this split that carry it '
            '(label_usage.csv: a label at 0 is never predicted there)',
        )
        parser.add_argument(
            '--compare-with',
            type=str,
            default=None,
            help='an earlier report folder (e.g. of another tagger): comparison.md sets its '
            "headline fractions and top transitions beside this report's",
        )
        add_tag_args(parser)
        add_pattern_args(parser)
        return parser

    def run(self):
        # a missing or unreadable file ends the command with its one-line message
        with exit_on_data_errors():
            return self._run()

    def _run(self):
        ed_dir = ed_source.resolve_ed_dir(self.opt.get('ed_datapath'), self.opt.get('datapath'))
        tags = open_tags(self.opt, ed_dir)
        pairs = patterns.ed_turn_pairs(tags, ed_dir, self.opt['split'])
        base = threshold_params(self.opt)
        if self.opt['pattern_min_lift'] == patterns.MIN_LIFT_AUTO:
            lift, sweep = patterns.resolve_min_lift(pairs, tags.classes, base)
            rule = (
                f'auto: the lowest lift of the grid at which at most {patterns.MAX_PATTERN_FRACTION:.0%} '
                'of the conversations show a pattern'
            )
        else:
            lift, sweep = float(self.opt['pattern_min_lift']), patterns.lift_sweep(pairs, tags.classes, base)
            rule = 'given by --pattern-min-lift'
        params = replace(base, min_lift=lift)
        os.makedirs(self.opt['report_dir'], exist_ok=True)
        sweep.to_csv(os.path.join(self.opt['report_dir'], 'lift_sweep.csv'), index=False)
        print(f'min_lift {lift} ({rule}); lift_sweep.csv has every grid point')
        figures = patterns.write_report(pairs, tags.classes, params, self.opt['report_dir'])
        figures['min_lift_rule'] = rule
        print(
            f'{figures["turn_pairs"]} turn pairs; {figures["patterns"]} patterns; '
            f'{figures["conversations_with_pattern"]:.1%} of conversations show one'
        )
        for p in figures['top_patterns'][:10]:
            print(
                f'  {p["speaker"]:>15} -> {p["listener"]:<15} count {p["count"]:>5}  '
                f'rate {p["rate"]:.3f}  lift {p["lift"]:.2f}'
            )
        figures['subsets'] = {}
        if self.opt['split'] == 'train':
            all_ids = sorted(set(pairs['conv_id']))
            source = {
                'tag_cache': os.path.basename(tags.directory),
                'classifier_key': tags.meta['classifier']['key'],
                'data_key': tags.meta['data']['key'],
            }
            for preset in sorted(subsets.PRESETS):
                manifest = subsets.select(
                    pairs, all_ids, tags.classes, params, preset=preset, seed=self.opt['pattern_seed'], source=source
                )
                path = subsets.write_manifest(manifest, os.path.join(self.opt['report_dir'], 'subsets'))
                print(subsets.describe(manifest) + f'\n  manifest: {path}')
                figures['subsets'][preset] = dict(
                    manifest['stats'], manifest=os.path.relpath(path, self.opt['report_dir'])
                )
        if self.opt['usage_split']:
            usage = patterns.label_usage(tags, ed_dir, self.opt['usage_split'])
            usage.to_csv(os.path.join(self.opt['report_dir'], 'label_usage.csv'), index=False)
            unused = usage[usage['utterances'] == 0]['label'].tolist()
            figures['labels_never_predicted'] = {self.opt['usage_split']: unused}
            print(f'labels never predicted on ED {self.opt["usage_split"]}: {", ".join(unused) or "none"}')
        with open(os.path.join(self.opt['report_dir'], 'figures.json'), 'w', encoding='utf-8') as f:
            json.dump(figures, f, indent=1, sort_keys=True)
        if self.opt['compare_with']:
            with open(os.path.join(self.opt['report_dir'], 'comparison.md'), 'w', encoding='utf-8') as f:
                f.write(f'# This report beside {os.path.basename(os.path.normpath(self.opt["compare_with"]))}\n\n')
                f.write(patterns.compare(self.opt['compare_with'], self.opt['report_dir']))
        return figures


if __name__ == '__main__':
    EmpathyPatterns.main()
