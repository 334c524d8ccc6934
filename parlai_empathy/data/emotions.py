"""The 32 EmpatheticDialogues emotion labels and MIME's positive/negative split.

Ids are the position in the alphabetical list ``ED_EMOTIONS``; every model, teacher and metric of
the project uses these ids. (MIME's reference code numbers the labels in a different,
first-seen order; only the *sets* below are taken from the paper, not its numbering.)

The polarity split is Table 1 of Majumder et al. (EMNLP 2020), cross-checked against the
positive/negative lists of the declare-lab/MIME reference implementation: 13 positive, 19
negative ("anticipating" is negative there, as in the paper).
"""

ED_EMOTIONS = (
    'afraid',
    'angry',
    'annoyed',
    'anticipating',
    'anxious',
    'apprehensive',
    'ashamed',
    'caring',
    'confident',
    'content',
    'devastated',
    'disappointed',
    'disgusted',
    'embarrassed',
    'excited',
    'faithful',
    'furious',
    'grateful',
    'guilty',
    'hopeful',
    'impressed',
    'jealous',
    'joyful',
    'lonely',
    'nostalgic',
    'prepared',
    'proud',
    'sad',
    'sentimental',
    'surprised',
    'terrified',
    'trusting',
)
NUM_EMOTIONS = len(ED_EMOTIONS)

POSITIVE_EMOTIONS = frozenset(
    {
        'caring',
        'confident',
        'content',
        'excited',
        'faithful',
        'grateful',
        'hopeful',
        'impressed',
        'joyful',
        'prepared',
        'proud',
        'surprised',
        'trusting',
    }
)
NEGATIVE_EMOTIONS = frozenset(set(ED_EMOTIONS) - POSITIVE_EMOTIONS)

POSITIVE, NEGATIVE = 'positive', 'negative'

_ID_OF = {label: i for i, label in enumerate(ED_EMOTIONS)}

# Ids of each group, in id order: the order of the per-group distributions d_pos / d_neg in MIME.
POSITIVE_IDS = tuple(i for i, label in enumerate(ED_EMOTIONS) if label in POSITIVE_EMOTIONS)
NEGATIVE_IDS = tuple(i for i, label in enumerate(ED_EMOTIONS) if label in NEGATIVE_EMOTIONS)


def emotion_to_id(label):
    """Id of an ED emotion label (case and surrounding spaces ignored); clear error otherwise."""
    key = str(label).strip().lower()
    if key not in _ID_OF:
        raise ValueError(f'unknown EmpatheticDialogues emotion {label!r}; expected one of: ' + ', '.join(ED_EMOTIONS))
    return _ID_OF[key]


def id_to_emotion(emotion_id):
    """Label of an emotion id in 0..31."""
    if not 0 <= int(emotion_id) < NUM_EMOTIONS:
        raise ValueError(f'emotion id {emotion_id!r} is outside 0..{NUM_EMOTIONS - 1}')
    return ED_EMOTIONS[int(emotion_id)]


def polarity(label_or_id):
    """'positive' or 'negative' per MIME's Table 1, for a label or an id."""
    label = id_to_emotion(label_or_id) if isinstance(label_or_id, int) else label_or_id
    return POSITIVE if ED_EMOTIONS[emotion_to_id(label)] in POSITIVE_EMOTIONS else NEGATIVE


def is_positive_by_id():
    """List of 32 booleans, indexable by emotion id (what the models turn into a tensor)."""
    return [label in POSITIVE_EMOTIONS for label in ED_EMOTIONS]
