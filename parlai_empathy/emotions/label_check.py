"""Checks that a classifier's label set fits the use it is put to."""

import os
from typing import Optional, Sequence

from parlai_empathy.data import goemotions

TRAIN_HINT = 'parlai train_model -t empathy_goemotions -m empathy/emotion_classifier -mf FILE'


class LabelSetMismatch(ValueError):
    pass


def check_goemotions_classifier(
    classes: Sequence[str], multilabel: bool, model_file: str, goemotions_dir: Optional[str] = None
):
    """Tagging ED with GoEmotions labels needs a multi-label GoEmotions classifier (any grouping)."""
    if not multilabel:
        raise LabelSetMismatch(
            f'{model_file} is a single-label classifier over {len(classes)} classes ({", ".join(classes[:6])}, ...); '
            f'tagging ED needs a multi-label GoEmotions classifier: run `{TRAIN_HINT}`'
        )
    folder = goemotions_dir or os.environ.get(goemotions.ENV_VAR)
    if not folder:
        return
    taxonomy = goemotions.read_taxonomy(folder)
    groupings = {g: taxonomy.classes(g) for g in goemotions.GROUPINGS}
    if not any(list(classes) == wanted for wanted in groupings.values()):
        raise LabelSetMismatch(
            f'the classes of {model_file} ({", ".join(classes)}) are not the GoEmotions labels of {folder} '
            f'in any grouping ({", ".join(goemotions.GROUPINGS)}): run `{TRAIN_HINT}`'
        )


ED_TRAIN_HINT = (
    'parlai train_model -t empathy_ed_emotion --ed-emotion-input utterance -m empathy/emotion_classifier -mf FILE'
)


def check_tagging_classifier(
    classes: Sequence[str], multilabel: bool, model_file: str, goemotions_dir: Optional[str] = None
):
    """ED is tagged with either label set: GoEmotions (multi-label; Metz & You's patterns) or the
    32 ED emotions (single-label; ETHREED's listener emotions)."""
    from parlai_empathy.data.emotions import ED_EMOTIONS

    if not multilabel:
        if list(classes) != list(ED_EMOTIONS):
            raise LabelSetMismatch(
                f'{model_file} is a single-label classifier over {len(classes)} classes that are not the 32 ED '
                f'emotions; tag ED with a multi-label GoEmotions classifier (`{TRAIN_HINT}`) or an ED 32-way '
                f'one (`{ED_TRAIN_HINT}`)'
            )
        return
    check_goemotions_classifier(classes, multilabel, model_file, goemotions_dir)
