"""``empathy_ed_goemotions``: ``empathy_ed_clean`` examples with GoEmotions tags attached.

Every message gets the tags of its context utterance (the one the response answers) and of its
response: ``context_goemotions`` / ``response_goemotions`` (thresholded label names) and
``context_goemotions_probs`` / ``response_goemotions_probs`` ({label: probability}).
``--goemotions-prepend-k K`` prepends the context utterance's K most probable labels to the text
(the EmoPrepend-k idea of Rashkin et al., with GoEmotions labels). The tags come from the cache
``parlai empathy_tag_ed -mf <classifier>`` writes.
"""

from parlai.core.teachers import register_teacher

from parlai_empathy.emotions import tag_cache
from parlai_empathy.tasks.ed import CleanTeacher


def add_tag_args(parser):
    group = parser.add_argument_group('GoEmotions tags of ED')
    group.add_argument('--goemotions-classifier', type=str, default=None, help='model file the tags were made with')
    group.add_argument(
        '--goemotions-tags-dir', type=str, default=None, help='a tag cache folder (instead of the classifier)'
    )
    group.add_argument(
        '--tag-cache-dir', type=str, default=None, help='cache root (default <datapath>/empathy_ed_goemotions)'
    )
    return group


def open_tags(opt, ed_dir: str) -> tag_cache.TagTable:
    """The tag table named by the options; a clear error when it is missing or incomplete."""
    if opt.get('goemotions_tags_dir'):
        return tag_cache.TagTable(opt['goemotions_tags_dir'])
    if not opt.get('goemotions_classifier'):
        raise tag_cache.TagCacheError(
            'GoEmotions tags needed: pass --goemotions-classifier <model file> (after running '
            f'{tag_cache.TAG_COMMAND}) or --goemotions-tags-dir <cache folder>'
        )
    return tag_cache.TagTable(
        tag_cache.locate_for_options(opt['goemotions_classifier'], ed_dir, opt['datapath'], opt.get('tag_cache_dir'))
    )


@register_teacher('empathy_ed_goemotions')
class EDGoEmotionsTeacher(CleanTeacher):
    task_name = 'empathy_ed_goemotions'

    @classmethod
    def add_cmdline_args(cls, parser, partial_opt=None):
        super().add_cmdline_args(parser, partial_opt)
        group = add_tag_args(parser)
        group.add_argument(
            '--goemotions-prepend-k', type=int, default=0, help='prepend the top-k context labels to the text'
        )
        return parser

    def setup_data(self, path):
        import os

        tags = open_tags(self.opt, os.path.dirname(path))
        k = self.opt.get('goemotions_prepend_k', 0)
        for message, new_episode in super().setup_data(path):
            context_row = tags.lookup(self.split, message['conv_id'], message['turn'] - 1)
            response_row = tags.lookup(self.split, message['conv_id'], message['turn'])
            for side, row in (('context', context_row), ('response', response_row)):
                message[f'{side}_goemotions'] = tags.label_names(row)
                message[f'{side}_goemotions_probs'] = {
                    c: round(float(p), 4) for c, p in zip(tags.classes, tags.probs[row])
                }
            if k > 0:
                message['text'] = ' '.join(tags.top_k(context_row, k)) + ' ' + message['text']
            yield message, new_episode


class DefaultTeacher(EDGoEmotionsTeacher):
    pass
