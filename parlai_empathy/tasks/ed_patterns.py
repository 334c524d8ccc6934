"""``empathy_ed_patterns``: ED train subsets selected by emotion-interaction patterns.

Train is the subset chosen by ``--pattern-subset`` (presets p87 / p57 / with43 / without43, see
:mod:`parlai_empathy.emotions.subsets`) or ``--pattern-fraction``; valid and test stay the full
``empathy_ed_clean`` splits. Messages carry the GoEmotions tags of ``empathy_ed_goemotions``. The
selection is seeded; its manifest (conv_ids and parameters) is written under the tag cache's
``subsets/`` folder and its fraction and pattern statistics are logged.
"""

import os
from dataclasses import replace

import parlai.utils.logging as logging
from parlai.core.teachers import register_teacher

from parlai_empathy.emotions import subsets
from parlai_empathy.emotions.patterns import (
    MAX_PATTERN_FRACTION,
    MIN_LIFT_AUTO,
    PatternParams,
    ed_turn_pairs,
    resolve_min_lift,
)
from parlai_empathy.tasks.ed_goemotions import EDGoEmotionsTeacher, open_tags


def add_pattern_args(parser):
    defaults = PatternParams()
    group = parser.add_argument_group('Emotion-interaction patterns')
    group.add_argument(
        '--pattern-min-lift',
        type=_min_lift,
        default=MIN_LIFT_AUTO,
        help=f"a number, or '{MIN_LIFT_AUTO}': the lowest lift (grid 1.00..3.00, step 0.05) at "
        f'which at most {MAX_PATTERN_FRACTION * 100:.0f}%% of train conversations show a pattern '
        "(so that Table 2's 43%% subsets both fit)",
    )
    group.add_argument(
        '--pattern-min-support',
        type=int,
        default=defaults.min_support,
        help='turn pairs (Speaker label a, Listener label b) a transition needs at least to be a pattern',
    )
    group.add_argument(
        '--pattern-include-neutral',
        type='bool',
        default=not defaults.exclude_neutral,
        help='let transitions from or to the neutral label be patterns',
    )
    group.add_argument(
        '--pattern-exclude-mirroring',
        type='bool',
        default=defaults.exclude_mirroring,
        help='leave out same-label transitions (emotional mirroring)',
    )
    group.add_argument(
        '--pattern-seed',
        type=int,
        default=0,
        help='seed of the random order that breaks ties when pattern subsets are drawn',
    )
    return group


def _min_lift(value):
    if str(value).strip().lower() == MIN_LIFT_AUTO:
        return MIN_LIFT_AUTO
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"--pattern-min-lift: expected a number or '{MIN_LIFT_AUTO}', got {value!r}") from None


def threshold_params(opt) -> PatternParams:
    """``opt``'s pattern thresholds other than the lift (which keeps the dataclass default)."""
    return PatternParams(
        min_support=opt['pattern_min_support'],
        exclude_neutral=not opt['pattern_include_neutral'],
        exclude_mirroring=opt['pattern_exclude_mirroring'],
    )


def pattern_params(opt, pairs=None, classes=None) -> PatternParams:
    """The pattern thresholds of ``opt``; ``--pattern-min-lift auto`` is resolved on ``pairs`` (the
    train turn pairs) with :func:`resolve_min_lift`."""
    params = threshold_params(opt)
    lift = _min_lift(opt.get('pattern_min_lift', MIN_LIFT_AUTO))
    if lift == MIN_LIFT_AUTO:
        if pairs is None:
            raise ValueError('--pattern-min-lift auto needs the train turn pairs to resolve')
        lift, _ = resolve_min_lift(pairs, classes, params)
    return replace(params, min_lift=lift)


@register_teacher('empathy_ed_patterns')
class EDPatternsTeacher(EDGoEmotionsTeacher):
    task_name = 'empathy_ed_patterns'
    length_key_options = EDGoEmotionsTeacher.length_key_options + (
        'goemotions_classifier',
        'goemotions_tags_dir',
        'pattern_min_lift',
        'pattern_min_support',
        'pattern_include_neutral',
        'pattern_exclude_mirroring',
        'pattern_seed',
        'pattern_subset',
        'pattern_fraction',
    )

    @classmethod
    def add_cmdline_args(cls, parser, partial_opt=None):
        super().add_cmdline_args(parser, partial_opt)
        group = add_pattern_args(parser)
        group.add_argument('--pattern-subset', type=str, default='p87', choices=sorted(subsets.PRESETS))
        group.add_argument('--pattern-fraction', type=float, default=None, help="override the preset's fraction")
        return parser

    def _train_subset(self, ed_dir):
        tags = open_tags(self.opt, ed_dir)
        pairs = ed_turn_pairs(tags, ed_dir, 'train')
        all_ids = sorted(set(pairs['conv_id']))
        manifest = subsets.select(
            pairs,
            all_ids,
            tags.classes,
            pattern_params(self.opt, pairs, tags.classes),
            preset=self.opt['pattern_subset'],
            fraction=self.opt.get('pattern_fraction'),
            seed=self.opt['pattern_seed'],
            source={
                'tag_cache': os.path.basename(tags.directory),
                'classifier_key': tags.meta['classifier']['key'],
                'data_key': tags.meta['data']['key'],
            },
        )
        path = subsets.write_manifest(manifest, os.path.join(tags.directory, 'subsets'))
        logging.info(f'{self.task_name}: {subsets.describe(manifest)}; manifest: {path}')
        return set(manifest['conv_ids'])

    def setup_data(self, path):
        keep = self._train_subset(os.path.dirname(path)) if self.split == 'train' else None
        for message, new_episode in super().setup_data(path):
            if keep is None or message['conv_id'] in keep:
                yield message, new_episode


class DefaultTeacher(EDPatternsTeacher):
    pass
