"""Helpers shared by the emotion tests: a tiny random BERT saved like a real model directory.

Random weights make the tests fast and offline; they exercise every code path a real encoder
does (tokenizer files, config, safetensors), only the predictions are meaningless.
"""

import os
import string

SPECIAL = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', '[unused1]']  # [unused1]: the ranker's turn separator
WORDS = [
    'i',
    'you',
    'the',
    'a',
    'is',
    'was',
    'so',
    'my',
    'it',
    'and',
    'to',
    'that',
    'love',
    'happy',
    'sad',
    'sorry',
    'thanks',
    'great',
    'bad',
    'what',
    'not',
    'he',
    'she',
    '!',
    '?',
    '.',
    ',',
    "'",
]


def make_tiny_bert(directory, hidden=32, layers=2, seed=0):
    """Write a random 2-layer BERT (config, weights, uncased WordPiece vocab) into ``directory``."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    os.makedirs(directory, exist_ok=True)
    pieces = list(string.ascii_lowercase + string.digits) + ['##' + c for c in string.ascii_lowercase + string.digits]
    vocab = SPECIAL + WORDS + [p for p in pieces if p not in WORDS]
    with open(os.path.join(directory, 'vocab.txt'), 'w', encoding='utf-8') as f:
        f.write('\n'.join(vocab) + '\n')
    tokenizer = BertTokenizerFast(vocab={tok: i for i, tok in enumerate(vocab)}, do_lower_case=True)
    tokenizer.save_pretrained(directory)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(directory)
    return directory


def make_tiny_classifier(model_file, bert_dir, classes, multilabel=True, threshold=0.3, seed=0):
    """Write the files ``empathy/emotion_classifier`` saves (weights, .opt, .hf/) for a random model."""
    import json

    import torch

    from parlai_empathy.models.bi_encoder import load_tokenizer
    from parlai_empathy.models.emotion_classifier import EmotionClassifier

    torch.manual_seed(seed)
    model = EmotionClassifier.from_pretrained(bert_dir, len(classes), multilabel, pooling='mean')
    os.makedirs(os.path.dirname(model_file), exist_ok=True)
    torch.save({'model': model.state_dict()}, model_file)
    opt = {
        'model': 'empathy/emotion_classifier',
        'classes': list(classes),
        'multilabel': multilabel,
        'multilabel_threshold': threshold,
        'max_length': 32,
        'pooling': 'mean',
    }
    with open(model_file + '.opt', 'w') as f:
        json.dump(opt, f)
    load_tokenizer(bert_dir).save_pretrained(model_file + '.hf')
    model.config.save_pretrained(model_file + '.hf')
    return model_file
