"""A tiny random BERT (2 layers, 32 dims) with a WordPiece vocab of real ED words, for tests.

Built once per test session in a temp folder: config.json, model.safetensors and the tokenizer
files, so it loads exactly like a real local model directory.
"""

import collections
import os
import re
import string

SPECIALS = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', '[unused1]']  # [unused1]: the turn separator


def real_vocab(ed_train_csv, size=1500):
    """The most frequent lower-cased words of ED plus every character, so nothing is all [UNK]."""
    counts = collections.Counter()
    with open(ed_train_csv, encoding='utf-8') as f:
        for line in f:
            fields = line.split(',')
            if len(fields) >= 6:
                counts.update(re.findall(r'[a-z]+|[^\sa-z]', fields[5].replace('_comma_', ',').lower()))
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    words = [w for w, _ in counts.most_common(size) if w not in chars]
    return SPECIALS + chars + ['##' + c for c in string.ascii_lowercase] + words


def build_tiny_bert(directory, ed_train_csv, seed=0):
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    os.makedirs(directory, exist_ok=True)
    vocab = real_vocab(ed_train_csv)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        initializer_range=0.2,  # BERT's 0.02 makes every random CLS vector nearly the same
    )
    BertModel(config).save_pretrained(directory)
    tokenizer = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    tokenizer.save_pretrained(directory)
    with open(os.path.join(directory, 'vocab.txt'), 'w', encoding='utf-8') as f:
        f.write('\n'.join(vocab) + '\n')
    return directory
