"""Checks that a classifier's label set fits the use it is put to."""
import os
from typing import Optional, Sequence

from parlai_empathy.data import goemotions

TRAIN_HINT = 'parlai train_model -t empathy_goemotions -m empathy/emotion_classifier -mf FILE'


class LabelSetMismatch(ValueError):
    pass


def check_goemotions_classifier(classes: Sequence[str], multilabel: bool, model_file: str, goemotions_dir: Optional[str] = None):
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
