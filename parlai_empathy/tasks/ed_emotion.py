"""``empathy_ed_emotion``: the ED 32-way emotion as a single-label classification task.

Built on ``empathy_ed_clean``'s reader (same data location options and cleaning). The input is
switchable with ``--ed-emotion-input``:

* ``situation`` (default): one example per conversation, the situation prompt, as in Rashkin et
  al.'s EmoPrepend classifier;
* ``utterance``: one example per utterance, labelled with its conversation's emotion;
* ``speaker_utterance``: the same, Speaker turns only (the side that lived the situation).
"""

from parlai.core.teachers import register_teacher

from parlai_empathy.data.ed_episodes import SPEAKER, role_of
from parlai_empathy.data.emotions import ED_EMOTIONS
from parlai_empathy.tasks.ed import CleanTeacher

INPUTS = ('situation', 'utterance', 'speaker_utterance')


@register_teacher('empathy_ed_emotion')
class EDEmotionTeacher(CleanTeacher):
    task_name = 'empathy_ed_emotion'
    multilabel = False
    scores_responses = False  # labels are emotions, not responses: no BLEU/Distinct
    length_key_options = CleanTeacher.length_key_options + ('ed_emotion_input',)

    @classmethod
    def add_cmdline_args(cls, parser, partial_opt=None):
        super().add_cmdline_args(parser, partial_opt)
        group = parser.add_argument_group('ED emotion classification')
        group.add_argument('--ed-emotion-input', type=str, default='situation', choices=list(INPUTS))
        return parser

    @classmethod
    def classifier_classes(cls, opt):
        return list(ED_EMOTIONS)

    def setup_data(self, path):
        mode = self.opt.get('ed_emotion_input', 'situation')
        for conv in self.read_conversations(path):
            if mode == 'situation':
                texts = [(conv.situation, 0)]
            else:
                texts = [
                    (u.text, u.utterance_idx)
                    for u in conv.utterances
                    if mode == 'utterance' or role_of(u.utterance_idx) == SPEAKER
                ]
            for text, turn in texts:
                yield (
                    {
                        'text': text,
                        'labels': [conv.emotion],
                        'emotion': conv.emotion,
                        'situation': conv.situation,
                        'conv_id': conv.conv_id,
                        'turn': turn,
                    },
                    True,
                )


class DefaultTeacher(EDEmotionTeacher):
    pass
