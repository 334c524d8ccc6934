"""Linear probes of a trained MIME's context encoding: does it hold the user's emotion?

Our converged MIME classifies the user's emotion on ED test below the paper's 0.34 (the row's
figure is in the project README). The classifier is a bias-free linear map of ``c = H_0`` (the CTX
position of the context encoder's output) scored against the emotion table. If a linear probe trained on frozen ``c``
does much better than the model's own head, the encoding holds the emotion and the head's
training missed it; if the probe is no better, the encoder never learnt it. Probes (multinomial
logistic regression, trained on ED train, scored on ED valid, every Listener-responding
example) on:

* ``c``: H_0, what the model's classifier reads;
* ``mean_h``: H averaged over the context's positions (the reference's ``--mean_query`` option);
* ``mean_words``: the model's own word table averaged over the context's tokens (no encoder: what
  bag-of-words already gives).

The features come from the model as ``parlai eval_model`` runs it (teacher, history, batches):
forward hooks on the context encoder during a ParlAI world's evaluation loop.

Usage::

    .venv/bin/python projects/majumder2020_mime/diagnostics/mime_probe.py -mf MODEL --out probe.json [--ed-datapath DIR]
"""

import argparse
import json
import sys
import time


def collect(model_file, datatype, ed_datapath, batchsize, limit):
    """Features and gold emotion ids of every example of ``datatype`` (ordered)."""
    import torch
    from parlai.core.agents import create_agent_from_model_file
    from parlai.core.worlds import create_task

    overrides = {
        'datatype': f'{datatype}:evalmode' if datatype == 'train' else datatype,
        'batchsize': batchsize,
        'skip_generation': True,
        'task': 'empathy_ed_clean',
        'num_examples': -1,
    }
    if ed_datapath:
        overrides['ed_datapath'] = ed_datapath
    agent = create_agent_from_model_file(model_file, overrides)
    opt = dict(agent.opt, **overrides)
    world = create_task(opt, agent)
    encoder = agent.model.encoder
    state = {'pending': None}
    rows = {'c': [], 'mean_h': [], 'mean_words': [], 'emotion': [], 'head': []}

    original_batchify = agent.batchify

    def batchify(obs_batch, sort=False):
        batch = original_batchify(obs_batch, sort=sort)
        if batch.get('emotion_ids') is not None:
            state['pending'] = batch['emotion_ids']
        return batch

    agent.batchify = batchify

    def hook(module, inputs, output):
        if state['pending'] is None:  # the second pass (gold polarity) of the same batch
            return
        keep = inputs[1]
        mask = keep.unsqueeze(-1).to(output.dtype)
        rows['c'].append(output[:, 0].detach().float().clone())  # not a view of H
        logits = encoder.classifier_proj(output[:, 0]) @ encoder.emotion_embedding.t()
        rows['head'].append(logits.argmax(-1).cpu())
        rows['mean_h'].append(((output * mask).sum(1) / mask.sum(1).clamp(min=1)).detach().float())
        rows['emotion'].append(state['pending'].cpu())
        state['pending'] = None

    def words_hook(module, inputs, output):
        if state['pending'] is None:
            return
        tokens = inputs[0]
        table = encoder.embedding.words(tokens)  # the word vectors alone, without tags or CTX
        mask = (tokens != encoder.padding_idx).unsqueeze(-1).to(table.dtype)
        rows['mean_words'].append(((table * mask).sum(1) / mask.sum(1).clamp(min=1)).detach().float())

    handles = [encoder.context_encoder.register_forward_hook(hook), encoder.embedding.register_forward_hook(words_hook)]
    seen = 0
    with torch.no_grad():
        while not world.epoch_done():
            world.parley()
            seen = sum(len(e) for e in rows['emotion'])
            if limit and seen >= limit:
                break
    for handle in handles:
        handle.remove()
    out = {key: torch.cat(value) for key, value in rows.items() if value}
    return out


def probe(train_x, train_y, valid_x, valid_y, steps=300, weight_decay=1e-4):
    """Multinomial logistic regression (standardised features, L-BFGS): valid accuracy."""
    import torch

    mean, std = train_x.mean(0), train_x.std(0).clamp(min=1e-6)
    tx, vx = (train_x - mean) / std, (valid_x - mean) / std
    torch.manual_seed(0)
    layer = torch.nn.Linear(tx.shape[1], 32)
    optimizer = torch.optim.LBFGS(layer.parameters(), lr=1, max_iter=steps, line_search_fn='strong_wolfe')

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(layer(tx), train_y) + weight_decay * layer.weight.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        train_acc = (layer(tx).argmax(1) == train_y).float().mean().item()
        valid_acc = (layer(vx).argmax(1) == valid_y).float().mean().item()
    return {'train_accuracy': train_acc, 'valid_accuracy': valid_acc}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('-mf', '--model-file', required=True)
    parser.add_argument('--ed-datapath', default=None)
    parser.add_argument('--batchsize', type=int, default=64)
    parser.add_argument('--train-limit', type=int, default=0, help='first N train examples (smoke)')
    parser.add_argument('--out', required=True)
    args = parser.parse_args()
    import torch

    started = time.time()
    train = collect(args.model_file, 'train', args.ed_datapath, args.batchsize, args.train_limit)
    valid = collect(args.model_file, 'valid', args.ed_datapath, args.batchsize, 0)
    report = {
        'what': 'linear probes of a MIME context encoding for the user emotion '
        '(projects/majumder2020_mime/diagnostics/mime_probe.py)',
        'command': ['python'] + sys.argv,
        'date': time.strftime('%Y-%m-%d %H:%M:%S %z'),
        'train_examples': int(len(train['emotion'])),
        'valid_examples': int(len(valid['emotion'])),
        'chance_majority_valid': float(torch.bincount(valid['emotion'], minlength=32).max() / len(valid['emotion'])),
        'model_head_valid_accuracy': float((valid['head'] == valid['emotion']).float().mean()),
        'probes': {},
    }
    for name in ('c', 'mean_h', 'mean_words'):
        if name in train and name in valid:
            report['probes'][name] = probe(train[name], train['emotion'], valid[name], valid['emotion'])
            print(name, report['probes'][name], flush=True)
    report['seconds'] = time.time() - started
    with open(args.out, 'w') as handle:
        json.dump(report, handle, indent=1)


if __name__ == '__main__':
    main()
