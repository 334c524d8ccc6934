"""``empathy_goemotions``: GoEmotions as a multi-label ParlAI classification task.

Each example is one Reddit comment. ``labels`` holds a single string, the example's label names
joined by ``,`` in class order (e.g. ``'joy,love'``), so ParlAI's own ``accuracy`` is the
exact-set match; the names are also in the list field ``goemotions_labels``. The
``empathy/emotion_classifier`` agent reads its class list and multi-label mode from
:meth:`GoEmotionsTeacher.classifier_classes` / ``multilabel``.
"""

from parlai.core.teachers import DialogTeacher, register_teacher

from parlai_empathy.data import goemotions
from parlai_empathy.data.file_errors import exit_on_data_errors, guard_teacher
from parlai_empathy.data.goemotions import join_labels


def add_goemotions_args(parser):
    group = parser.add_argument_group('GoEmotions data')
    group.add_argument(
        '--goemotions-datapath',
        type=str,
        default=None,
        help=f'folder with the GoEmotions release (default: ${goemotions.ENV_VAR}, '
        'else download into <datapath>/goemotions)',
    )
    return group


@register_teacher('empathy_goemotions')
class GoEmotionsTeacher(DialogTeacher):
    """GoEmotions train/dev/test, 28 labels (or Ekman 7 / sentiment 4 with ``--goemotions-grouping``)."""

    multilabel = True

    @classmethod
    def add_cmdline_args(cls, parser, partial_opt=None):
        super().add_cmdline_args(parser, partial_opt)
        group = add_goemotions_args(parser)
        group.add_argument(
            '--goemotions-grouping',
            type=str,
            default='none',
            choices=list(goemotions.GROUPINGS),
            help="serve the 28 fine labels (none) or the paper's Ekman / sentiment groups",
        )
        return parser

    @staticmethod
    def _folder(opt):
        return goemotions.resolve_dir(opt.get('goemotions_datapath'), opt.get('datapath'))

    @classmethod
    def classifier_classes(cls, opt):
        with exit_on_data_errors():
            taxonomy = goemotions.read_taxonomy(cls._folder(opt))
        return taxonomy.classes(opt.get('goemotions_grouping') or 'none')

    def __init__(self, opt, shared=None):
        # a missing or unreadable file ends the command with its one-line message (file_errors)
        with exit_on_data_errors():
            self.fold = opt['datatype'].split(':')[0]
            self.grouping = opt.get('goemotions_grouping') or 'none'
            self.id = 'empathy_goemotions'
            opt = opt.copy()
            opt['datafile'] = f'{self._folder(opt)}:{self.fold}:{self.grouping}'
            guard_teacher(self)
            super().__init__(opt, shared)

    def setup_data(self, datafile):
        folder, fold, grouping = datafile.rsplit(':', 2)
        taxonomy = goemotions.read_taxonomy(folder)
        for example in goemotions.read_split(folder, fold, len(taxonomy.names)):
            names = taxonomy.group([taxonomy.names[i] for i in example.label_ids], grouping)
            yield (
                {
                    'text': example.text,
                    'labels': [join_labels(names)],
                    'goemotions_labels': names,
                    'comment_id': example.comment_id,
                },
                True,
            )


class DefaultTeacher(GoEmotionsTeacher):
    pass
