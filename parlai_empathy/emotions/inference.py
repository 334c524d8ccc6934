"""Fast batch inference of an emotion classifier over many short texts.

Texts are tokenized once, sorted by length and cut into batches holding at most
``batch_tokens`` padded tokens, so almost no compute goes to padding and short texts run in big
batches; the forward pass runs under ``torch.inference_mode``.
"""

from typing import Iterator, List, Sequence, Tuple

import numpy as np
import torch

from parlai_empathy.emotions.classifier_files import LoadedClassifier


def tokenize(classifier: LoadedClassifier, texts: Sequence[str]) -> List[List[int]]:
    """Token ids with [CLS]/[SEP], cut to the classifier's max length (empty text -> [CLS][SEP])."""
    encoded = classifier.tokenizer(
        list(texts), truncation=True, max_length=classifier.max_length, add_special_tokens=True
    )
    return encoded['input_ids']


def length_sorted(token_ids: Sequence[Sequence[int]]) -> np.ndarray:
    """Positions ordered by token length (stable, so the order is reproducible)."""
    return np.argsort(np.array([len(t) for t in token_ids]), kind='stable')


def batches(positions: Sequence[int], token_ids: Sequence[Sequence[int]], batch_tokens: int) -> Iterator[List[int]]:
    """Consecutive runs of ``positions`` (already length-sorted) within a padded-token budget."""
    batch, longest = [], 0
    for pos in positions:
        length = len(token_ids[pos])
        if batch and max(longest, length) * (len(batch) + 1) > batch_tokens:
            yield batch
            batch, longest = [], 0
        batch.append(int(pos))
        longest = max(longest, length)
    if batch:
        yield batch


@torch.inference_mode()
def predict(classifier: LoadedClassifier, token_ids: Sequence[Sequence[int]]) -> np.ndarray:
    """Probabilities ``[len(token_ids), num_classes]`` (float32) of one batch."""
    width = max(len(t) for t in token_ids)
    ids = torch.full((len(token_ids), width), classifier.pad_id, dtype=torch.long)
    mask = torch.zeros((len(token_ids), width), dtype=torch.bool)
    for row, tokens in enumerate(token_ids):
        ids[row, : len(tokens)] = torch.as_tensor(tokens)
        mask[row, : len(tokens)] = True
    device = next(classifier.model.parameters()).device
    logits = classifier.model(ids.to(device), mask.to(device))
    return classifier.model.probabilities(logits).float().cpu().numpy()


def decide_labels(probs: np.ndarray, multilabel: bool, threshold: float) -> np.ndarray:
    """Boolean ``[n, num_classes]``: over-threshold labels, or the argmax one-hot."""
    if multilabel:
        return probs >= threshold
    labels = np.zeros(probs.shape, dtype=bool)
    labels[np.arange(len(probs)), probs.argmax(1)] = True
    return labels


def predict_all(
    classifier: LoadedClassifier, texts: Sequence[str], batch_tokens: int = 4096
) -> Tuple[np.ndarray, np.ndarray]:
    """Probabilities and decided labels of ``texts``, in input order."""
    token_ids = tokenize(classifier, texts)
    probs = np.zeros((len(texts), len(classifier.classes)), dtype=np.float32)
    for batch in batches(length_sorted(token_ids), token_ids, batch_tokens):
        probs[batch] = predict(classifier, [token_ids[i] for i in batch])
    return probs, decide_labels(probs, classifier.multilabel, classifier.threshold)
