"""Training and decoding speed of the reference MIME and ETHREED code beside ours, in one run.

``bench/RESULTS.md`` compares our speed with the reference implementations': declare-lab/MIME @
7c34f3a and outsider-lj/ethreed @ 397bb20. This script re-measures those references from
checkouts that *you* supply, side by side with ``-m empathy/mime`` and ``-m empathy/ethreed``, in
one process tree, on the same ED data, at the same batch sizes and thread count, and prints the
ratios ours / reference computed in the same run. No code of the references is copied here: each
reference runs in its own child process, which imports the checkout (its directory on
``sys.path``), executes the checkout's own training script (``main.py``, ``model/lj_train.py``)
with ``runpy`` and applies small runtime shims, listed in ``SHIMS`` below with the reason for each.

Usage (from the repository root)::

    # /tmp/ref-mime, /tmp/ref-ethreed: your clones of declare-lab/MIME and outsider-lj/ethreed
    git -C /tmp/ref-mime checkout 7c34f3a && git -C /tmp/ref-ethreed checkout 397bb20
    # once: a separate venv for the references' own dependencies (torch==2.13.0 first, so pip
    # keeps that build; never installs anything into .venv)
    .venv/bin/python bench/reference_speed.py --setup-ref-venv ../ref-venv
    # the measurement (about 10 minutes on 2 quiet threads with the defaults; the first run
    # also converts and preprocesses ED for both references and builds our dictionaries, about
    # 5 minutes more, cached in --workdir for later runs)
    .venv/bin/python bench/reference_speed.py --mime-repo /tmp/ref-mime --ethreed-repo /tmp/ref-ethreed \\
        --ref-python ../ref-venv/bin/python --ed-dir ../shared/data/empatheticdialogues --threads 2 \\
        --out bench/reference_speed.json
    # a smoke run (seconds to minutes, figures meaningless): the first 200 conversations per split
    .venv/bin/python bench/reference_speed.py --mime-repo /tmp/ref-mime --ethreed-repo /tmp/ref-ethreed \\
        --ref-python ../ref-venv/bin/python --ed-limit 200 --mime-warmup 1 --mime-steps 2 \\
        --ethreed-warmup 1 --ethreed-steps 1 --our-warmup 1 --our-steps 2 --decode-contexts 4

What is measured (every measurement in a fresh child process, so its peak RSS is its own):

* MIME training: the reference's ``main.py`` training loop (its DataLoader with VADER scoring,
  ``train_one_batch``: forward, loss, backward, Noam-Adam step, its TensorBoard logging) at batch
  16 listener-response pairs; ours: ParlAI training steps (``world.parley()``: teacher, vectorize,
  batchify, forward, loss, backward, optimizer) of ``-m empathy/mime -o empathy/mime`` at ``-bs
  16``. Timed after warm-up steps: steps/s, pairs/s, peak RSS. Our dictionary (built over all
  three splits, as the references' vocabularies are) has the reference's size: truncated to it,
  or filled up with unused tokens where the reference counts words we never read (MIME's
  vocabulary holds the situation texts), so both output layers are the same size. Ours
  tokenizes text when it first meets it (nltk, cached per text) where the references tokenized
  everything before training, so our timed steps, first-epoch steps, include tokenization.
* ETHREED training: the reference's ``lj_train.py`` loop (``RLSolver.train``) at its batch of 8
  dialogues (all their listener responses, every sentence padded to 40 tokens); ours:
  ``-m empathy/ethreed -o empathy/ethreed`` ParlAI steps, which batch listener responses, at each
  ``--ethreed-our-batches`` size (default 8, the figure of RESULTS.md, and 16, about the responses
  of 8 dialogues). Both units are reported: responses/s, and dialogues/s (ours: responses/s
  divided by the mean listener responses per training dialogue of the same data).
* Greedy decoding of the first ``--decode-contexts`` test contexts (ETHREED: the listener
  responses of the first test dialogues that hold that many), every reply forced to the full
  length on both sides because the references always decode their maximum (MIME 31 tokens: its
  ``decoder_greedy`` at ``max_dec_step=30``, batch 1; ETHREED 40 tokens: ``max_unroll``, through
  its ``RLSolver.test``, batch 1 dialogue). Ours: the agent's ``batch_act`` on the same contexts
  in one batch, beam size 1 (greedy) with the minimum length set to that maximum. Timed: the
  reference's decoding call (``decoder_greedy``; ``model.forward(decode=True)``), our
  ``batch_act``; data loading excluded on both sides, after one warm-up call on each side.

The data: ``--ed-dir`` (the shared ED csv files) for everyone. The references get it converted by
this script into what they read: MIME the MoEL ``dataset/sys_*_texts.{train,dev,test}.npy``
arrays (every Listener turn, its context all previous utterances; MIME's own ``data_reader``
then tokenizes them and builds its vocabulary and ``dataset_preproc.p``); ETHREED the
``ED_add_labels.json`` layout of its ``add_labels`` step, which its own preprocessing functions
(``lj_EDjson_preprocess.py``: ``clean`` of ``add_labels/EDprepro.py``, ``load_conversations``,
spaCy ``tokenize_conversation``, ``pad_sentences``, ``Vocab``) turn into its pickles. The
listener emotion and the dialogue-act labels of that json come from a BERT classifier we do not
have; the conversation's ED emotion and the first act stand in for them (they are targets of
classification losses: their values do not change the amount of computation). Ours reads the
csv files with ``-t empathy_ed_clean``. Everything derived is cached in ``--workdir``.

Report: a table on stdout and, with ``--out``, a JSON file with every figure, the commands,
versions, the checkouts' commits and the shims applied.
"""

import argparse
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_ED = os.environ.get('PARLAI_EMPATHY_ED_DIR') or os.path.join(
    os.path.dirname(REPO), 'shared', 'data', 'empatheticdialogues'
)
EXPECTED_COMMITS = {'mime': '7c34f3a', 'ethreed': '397bb20'}
# The references' own dependencies, for --setup-ref-venv (torch first: pip then keeps that build).
REF_TORCH = 'torch==2.13.0'
REF_PACKAGES = [
    'numpy',
    'nltk',
    'tqdm',
    'scikit-learn',
    'scipy',
    'pandas',
    'matplotlib',
    'tensorboardX',
    'vaderSentiment',
    'spacy',
    'six',
]
ETHREED_ACTION = 'acknowleding'  # the first of the reference's DIALOG_ACTIONS, spelled as there
ETHREED_MAX_SENTENCE = 40  # lj_EDjson_preprocess.py's default --max_sentence_length
ETHREED_VOCAB = dict(max_size=30000, min_freq=3)  # its --max_vocab_size / --min_vocab_frequency

# Every runtime shim, with why. Source edits are applied in memory when the module is imported
# (the checkout is never written to); each must match the checkout's text or the run stops.
SOURCE_PATCHES = {
    'ethreed': {
        'model/utils/convert.py': [
            ('async=False)', 'async_=False)', '`async` is a reserved word since Python 3.7: the file does not compile'),
            ('x.cuda(gpu_id, async)', 'x.cuda(gpu_id, async_)', 'the same parameter, renamed'),
        ],
        'model/lj_solver.py': [
            (
                'for e in enumerate(emo):',
                'for i, e in enumerate(emo):',
                'RLSolver.test() calls int() on an (index, label) tuple and crashes before decoding',
            ),
        ],
    },
}
SHIMS = {
    'both': [
        'CPU instead of CUDA: torch.Tensor.cuda and nn.Module.cuda are no-ops (the code calls '
        '.cuda() unconditionally in places; this torch has no CUDA)',
        "numpy 2: the removed aliases np.float and np.int are set to the builtins (MIME's timing signal uses np.float)",
        'no network: nltk.download is a no-op, and nltk.word_tokenize (whose trained Punkt model '
        "cannot be downloaded) is nltk's Treebank word tokenizer after an untrained Punkt "
        'sentence splitter, the same stand-in as our parlai_empathy.data.moel_text',
        'bytecode is not written (sys.dont_write_bytecode): nothing is written into the checkout',
        'threads: torch.set_num_threads(--threads) and OMP/MKL_NUM_THREADS in the environment',
    ],
    'mime': [
        'argv: --batch_size 16 --save_path <workdir>/save/ --emb_file <empty file>; the process '
        'runs in <workdir>, where dataset/ holds the converted ED npy files',
        'config.USE_CUDA = False after utils/config.py parsed argv (--cuda is store_true with '
        'default True: no flag turns it off)',
        'GloVe 300d absent: --emb_file is an empty file, so gen_embeddings keeps its own random '
        'init (0.01 * randn) for every row: same shape, same code path',
        'stop after the timed steps: model.common_layer.make_infinite is wrapped to time and count '
        'the batches it yields and raise a BaseException (main.py catches KeyboardInterrupt only) '
        "after the last one; the model and loaders are then read from main.py's globals",
    ],
    'ethreed': [
        'source: model/utils/convert.py `async` parameter renamed (Python >= 3.7)',
        'source: model/lj_solver.py test() loop variable (its int() of a tuple crashes)',
        'missing module: layers/__init__.py imports .lj_layers_add, which is not in the '
        'repository; an empty module stands in (nothing uses a name from it)',
        'configs.Config.behavior_state = False: lj_model.py reads config.behavior_state, which '
        'configs.py never defines (AttributeError)',
        'paths: configs.project_dir/save_dir/data_dict point at the prepared copy in <workdir> '
        '(the code keeps data, vocabulary and checkpoints inside the checkout)',
        'GloVe 840B 300d absent: an empty glove.840B.300d.txt, so Vocab.load_embeddings loads '
        "nothing and the embedding keeps nn.Embedding's own init (same shape)",
        'spaCy en_core_web_sm absent (spaCy publishes it outside PyPI): spacy.load falls back to '
        'spacy.blank("en"), spaCy\'s English tokenizer rules; the reference uses token.text only '
        '(preprocessing)',
        "preprocessing: lj_EDjson_preprocess.py's functions are called in the order of its "
        '__main__ block, which cannot run unchanged (numpy 2 rejects np.shape of ragged lists; '
        'it writes into the checkout; a Pool of 6 workers); tokenization runs serially',
        'argv: --batch_size 8; stop after the timed steps: lj_dataloader.get_loader wraps the '
        'training loader to time and count its batches and raise a BaseException after the last',
        'decoding: RLSolver.test() on a loader of one test dialogue at a time; model.forward is '
        'wrapped to time its decode=True call and to stop test() at the loss pass after it, '
        "which unpacks 5 values from the model's 4 and crashes",
    ],
}


# ================================================================================================
# parent: data conversion, children, report
# ================================================================================================


def sha256_of(paths):
    digest = hashlib.sha256()
    for path in paths:
        with open(path, 'rb') as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b''):
                digest.update(chunk)
    return digest.hexdigest()


def limited_ed_dir(ed_dir, limit, workdir):
    """The first ``limit`` conversations of each split, raw lines copied (smoke runs)."""
    out = os.path.join(workdir, f'ed-first{limit}')
    os.makedirs(out, exist_ok=True)
    for split in ('train', 'valid', 'test'):
        target = os.path.join(out, split + '.csv')
        if os.path.isfile(target):
            continue
        seen, kept = set(), []
        with open(os.path.join(ed_dir, split + '.csv'), encoding='utf-8', errors='surrogateescape') as handle:
            kept.append(next(handle))
            for line in handle:
                conv = line.split(',', 1)[0]
                if conv not in seen:
                    if len(seen) == limit:
                        break
                    seen.add(conv)
                kept.append(line)
        with open(target + '.tmp', 'w', encoding='utf-8', errors='surrogateescape') as handle:
            handle.writelines(kept)
        os.replace(target + '.tmp', target)
    return out


def listener_turns(ed_dir, split):
    """Per conversation with a Listener turn: (conversation, [position of each Listener turn])."""
    from parlai_empathy.data.ed_episodes import LISTENER, role_of
    from parlai_empathy.data.ed_raw import read_clean

    conversations, _ = read_clean(os.path.join(ed_dir, split + '.csv'))
    out = []
    for conv in conversations:
        positions = [p for p in range(1, len(conv.utterances)) if role_of(conv.utterances[p].utterance_idx) == LISTENER]
        if positions:
            out.append((conv, positions))
    return out


def write_mime_dataset(splits, folder):
    """MoEL's npy arrays (what MIME's utils/data_reader.py reads): one entry per Listener turn."""
    import numpy as np

    os.makedirs(folder, exist_ok=True)
    for split, name in (('train', 'train'), ('valid', 'dev'), ('test', 'test')):
        rows = {'dialog': [], 'target': [], 'emotion': [], 'situation': []}
        for conv, positions in splits[split]:
            texts = [u.text for u in conv.utterances]
            for p in positions:
                rows['dialog'].append(texts[:p])
                rows['target'].append(texts[p])
                rows['emotion'].append(conv.emotion)
                rows['situation'].append(conv.situation)
        for key, values in rows.items():
            array = np.empty(len(values), dtype=object)  # element by element: lists stay lists
            for i, value in enumerate(values):
                array[i] = value
            np.save(os.path.join(folder, f'sys_{key}_texts.{name}.npy'), array, allow_pickle=True)


def write_ethreed_json(splits, path):
    """ED in the layout of ETHREED's ED_add_labels.json (the output of its add_labels step)."""
    data = {}
    for split in ('train', 'valid', 'test'):
        dialogues = []
        for conv, positions in splits[split]:
            texts = [u.text for u in conv.utterances]
            dialogues.append(
                {
                    'personality': [],
                    'utterances': [
                        {
                            'id': f'{conv.conv_id}:{conv.utterances[p].utterance_idx}',
                            'history': texts[:p],
                            'reply': [texts[p]],
                            'situation': [conv.situation],
                            'speaker_emotion': [conv.emotion],
                            'listener_emotion': [conv.emotion],  # stand-in for the classifier's label
                            'speaker_action': [ETHREED_ACTION],
                            'listener_action': [ETHREED_ACTION],
                        }
                        for p in positions
                    ],
                }
            )
        data[split] = dialogues
    with open(path + '.tmp', 'w', encoding='utf-8') as handle:
        json.dump(data, handle, ensure_ascii=False)
    os.replace(path + '.tmp', path)


def git_commit(folder):
    try:
        return subprocess.run(
            ['git', '-C', folder, 'rev-parse', 'HEAD'], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def run_child(python, role, spec, workdir, threads, label, script=None):
    """Run one measurement in a fresh process; its output goes to <workdir>/logs/<label>.log.
    ``script``: the file whose ``--child ROLE --spec FILE`` runs it (default: this one)."""
    logs = os.path.join(workdir, 'logs')
    os.makedirs(logs, exist_ok=True)
    spec_path = os.path.join(logs, f'{label}.spec.json')
    result_path = os.path.join(logs, f'{label}.result.json')
    if os.path.exists(result_path):
        os.remove(result_path)
    spec = dict(spec, result=result_path, threads=threads)
    with open(spec_path, 'w') as handle:
        json.dump(spec, handle, indent=1)
    env = dict(
        os.environ,
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        PYTHONDONTWRITEBYTECODE='1',
        TQDM_MININTERVAL='30',
        HF_HUB_OFFLINE='1',
    )
    command = [python, os.path.abspath(script or __file__), '--child', role, '--spec', spec_path]
    log_path = os.path.join(logs, f'{label}.log')
    print(f'[{time.strftime("%H:%M:%S")}] {label}: {" ".join(command)}  (log: {log_path})', flush=True)
    started = time.perf_counter()
    with open(log_path, 'w') as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0 or not os.path.isfile(result_path):
        with open(log_path, errors='replace') as handle:
            tail = handle.read()[-6000:]
        raise SystemExit(f'{label} failed (exit {done.returncode}); the end of {log_path}:\n{tail}')
    with open(result_path) as handle:
        result = json.load(handle)
    result['wall_s'] = time.perf_counter() - started
    return result


def setup_ref_venv(folder):
    python = os.path.join(folder, 'bin', 'python')
    if not os.path.isfile(python):
        subprocess.run([sys.executable, '-m', 'venv', folder], check=True)
    subprocess.run([python, '-m', 'pip', 'install', '-q', REF_TORCH], check=True)
    subprocess.run([python, '-m', 'pip', 'install', '-q'] + REF_PACKAGES, check=True)
    return python


def ratio(ours, reference):
    return ours / reference if ours and reference else None


def fmt(value, digits=2):
    if value is None:
        return '-'
    return f'{value:,.{digits}f}' if isinstance(value, float) else f'{value:,}'


def table(rows):
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        lines.append('| ' + ' | '.join(str(c).ljust(w) for c, w in zip(row, widths)) + ' |')
        if n == 0:
            lines.append('|' + '|'.join('-' * (w + 2) for w in widths) + '|')
    return '\n'.join(lines)


def main_parent(args):
    from parlai_empathy.evidence import (
        artifacts as evidence,  # the parent runs in our environment; the references' children do not
    )

    if args.setup_ref_venv:
        args.ref_python = setup_ref_venv(os.path.abspath(args.setup_ref_venv))
        print(f'reference venv ready: {args.ref_python}')
        if not (args.mime_repo or args.ethreed_repo):
            return
    if not (args.mime_repo or args.ethreed_repo):
        raise SystemExit('give --mime-repo DIR and/or --ethreed-repo DIR (checkouts of the references)')
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    ed_dir = os.path.abspath(args.ed_dir)
    if args.ed_limit:
        ed_dir = limited_ed_dir(ed_dir, args.ed_limit, workdir)
    key = sha256_of([os.path.join(ed_dir, s + '.csv') for s in ('train', 'valid', 'test')])[:12]
    splits = {split: listener_turns(ed_dir, split) for split in ('train', 'valid', 'test')}
    train_dialogues = len(splits['train'])
    train_responses = sum(len(p) for _, p in splits['train'])
    responses_per_dialogue = train_responses / train_dialogues
    ours_data = os.path.join(workdir, f'ours-{key}')
    os.makedirs(ours_data, exist_ok=True)

    report = {
        'command': [os.path.basename(sys.executable)] + evidence.portable(sys.argv, evidence.path_placeholders()),
        'platform': platform.platform(),
        # the machine and its load at the start, our code's commit, the kernel settings
        **evidence.benchmark_record(REPO),
        'threads': args.threads,
        'ed_dir': ed_dir,
        'ed_sha256_12': key,
        'ed_limit': args.ed_limit,
        'train_dialogues': train_dialogues,
        'train_listener_responses': train_responses,
        'shims': {
            name: SHIMS[name] for name in ['both'] + [m for m in ('mime', 'ethreed') if getattr(args, m + '_repo')]
        },
    }
    common = dict(
        ed_dir=ed_dir, datapath=os.path.join(ours_data, 'parlai-data'), warmup=args.our_warmup, steps=args.our_steps
    )
    rows = [('measure', 'reference', 'ours', 'ours / reference')]

    if args.mime_repo:
        repo = os.path.abspath(args.mime_repo)
        mime_dir = os.path.join(workdir, f'mime-{key}')
        if not os.path.isfile(os.path.join(mime_dir, 'dataset', 'sys_target_texts.test.npy')):
            write_mime_dataset(splits, os.path.join(mime_dir, 'dataset'))
        ref = run_child(
            args.ref_python,
            'mime-ref',
            dict(
                repo=repo,
                workdir=mime_dir,
                batch=args.mime_batch,
                warmup=args.mime_warmup,
                steps=args.mime_steps,
                decode=args.decode_contexts,
                decode_tokens=args.mime_decode_tokens,
            ),
            workdir,
            args.threads,
            'mime-reference',
        )
        ours = run_child(
            sys.executable,
            'ours',
            dict(
                common,
                model='mime',
                batch=args.mime_batch,
                vocab=ref['vocab'],
                dict_file=os.path.join(ours_data, f'mime-all-splits-{ref["vocab"]}.dict'),
                decode=args.decode_contexts,
                decode_tokens=args.mime_decode_tokens,
            ),
            workdir,
            args.threads,
            'mime-ours',
        )
        report['mime'] = {
            'reference': dict(ref, repo=repo, commit=git_commit(repo), expected_commit=EXPECTED_COMMITS['mime']),
            'ours': ours,
            'ratio': {
                k: ratio(ours[k], ref[k])
                for k in ('steps_per_s', 'examples_per_s', 'decode_contexts_per_s', 'peak_rss_mb')
            },
        }
        r = report['mime']['ratio']
        rows += [
            (
                f'MIME train, batch {args.mime_batch} pairs: pairs/s',
                fmt(ref['examples_per_s']),
                fmt(ours['examples_per_s']),
                fmt(r['examples_per_s']) + 'x',
            ),
            (
                'MIME train: steps/s',
                fmt(ref['steps_per_s'], 3),
                fmt(ours['steps_per_s'], 3),
                fmt(r['steps_per_s']) + 'x',
            ),
            ('MIME train: peak RSS MB', fmt(ref['peak_rss_mb'], 0), fmt(ours['peak_rss_mb'], 0), fmt(r['peak_rss_mb'])),
            (
                'MIME params (vocab)',
                f'{ref["params"]:,} ({ref["vocab"]:,})',
                f'{ours["params"]:,} ({ours["vocab"]:,}; {ours["vocab_unused_fill"]:,} unused)',
                '',
            ),
            (
                'MIME context tokens per pair (timed batches)',
                fmt(ref['context_tokens_per_example'], 1),
                fmt(ours['context_tokens_per_example'], 1),
                '',
            ),
            (
                f'MIME greedy decode, {args.decode_contexts} test contexts x {args.mime_decode_tokens} '
                f'tokens: contexts/s (ref batch 1, ours batch {ours["decode_batch"]})',
                fmt(ref['decode_contexts_per_s']),
                fmt(ours['decode_contexts_per_s']),
                fmt(r['decode_contexts_per_s']) + 'x',
            ),
        ]

    if args.ethreed_repo:
        repo = os.path.abspath(args.ethreed_repo)
        eth_dir = os.path.join(workdir, f'ethreed-{key}')
        prepared = os.path.join(eth_dir, 'prepared.json')
        if not os.path.isfile(prepared):
            os.makedirs(eth_dir, exist_ok=True)
            write_ethreed_json(splits, os.path.join(eth_dir, 'ED_add_labels.json'))
            run_child(
                args.ref_python,
                'ethreed-prep',
                dict(repo=repo, workdir=eth_dir),
                workdir,
                args.threads,
                'ethreed-preprocess',
            )
        with open(prepared) as handle:
            prep = json.load(handle)
        # the first test dialogues holding --decode-contexts listener responses
        count, dialogues = 0, 0
        for _, positions in splits['test']:
            if count >= args.decode_contexts:
                break
            count, dialogues = count + len(positions), dialogues + 1
        ref = run_child(
            args.ref_python,
            'ethreed-ref',
            dict(
                repo=repo,
                workdir=eth_dir,
                batch=args.ethreed_batch,
                warmup=args.ethreed_warmup,
                steps=args.ethreed_steps,
                decode_dialogues=dialogues,
            ),
            workdir,
            args.threads,
            'ethreed-reference',
        )
        ref['dialogues_per_s'] = ref['steps_per_s'] * args.ethreed_batch
        report['ethreed'] = {
            'reference': dict(
                ref, repo=repo, commit=git_commit(repo), expected_commit=EXPECTED_COMMITS['ethreed'], preprocessing=prep
            ),
            'responses_per_train_dialogue': responses_per_dialogue,
            'ours': {},
        }
        rows += [
            (
                f'ETHREED reference train, batch {args.ethreed_batch} dialogues '
                f'({ref["examples_per_step"]:.1f} responses/step)',
                '',
                '',
                '',
            ),
        ]
        for batch in args.ethreed_our_batches:
            ours = run_child(
                sys.executable,
                'ours',
                dict(
                    common,
                    model='ethreed',
                    batch=batch,
                    vocab=prep['vocab'],
                    dict_file=os.path.join(ours_data, f'ethreed-all-splits-{prep["vocab"]}.dict'),
                    decode=count,
                    decode_tokens=args.ethreed_decode_tokens,
                ),
                workdir,
                args.threads,
                f'ethreed-ours-bs{batch}',
            )
            ours['dialogues_per_s'] = ours['examples_per_s'] / responses_per_dialogue
            ours['ratio'] = {
                k: ratio(ours[k], ref[k])
                for k in ('steps_per_s', 'examples_per_s', 'dialogues_per_s', 'decode_contexts_per_s', 'peak_rss_mb')
            }
            report['ethreed']['ours'][f'bs{batch}'] = ours
            r = ours['ratio']
            rows += [
                (
                    f'ETHREED train, ours -bs {batch} responses: responses/s',
                    fmt(ref['examples_per_s']),
                    fmt(ours['examples_per_s']),
                    fmt(r['examples_per_s']) + 'x',
                ),
                (
                    f'  dialogues/s (ours: responses/s / {responses_per_dialogue:.2f} responses per dialogue)',
                    fmt(ref['dialogues_per_s'], 3),
                    fmt(ours['dialogues_per_s'], 3),
                    fmt(r['dialogues_per_s']) + 'x',
                ),
                ('  steps/s', fmt(ref['steps_per_s'], 3), fmt(ours['steps_per_s'], 3), fmt(r['steps_per_s']) + 'x'),
                ('  peak RSS MB', fmt(ref['peak_rss_mb'], 0), fmt(ours['peak_rss_mb'], 0), fmt(r['peak_rss_mb'])),
            ]
        first = next(iter(report['ethreed']['ours'].values()))
        rows += [
            (
                'ETHREED params (vocab)',
                f'{ref["params"]:,} ({ref["vocab"]:,})',
                f'{first["params"]:,} ({first["vocab"]:,}; {first["vocab_unused_fill"]:,} unused)',
                '',
            ),
            (
                f'ETHREED greedy decode, {count} test responses x {args.ethreed_decode_tokens} tokens: '
                f'responses/s (ref batch 1 dialogue, ours batch {first["decode_batch"]})',
                fmt(ref['decode_contexts_per_s']),
                fmt(first['decode_contexts_per_s']),
                fmt(first['ratio']['decode_contexts_per_s']) + 'x',
            ),
        ]

    text = table(rows)
    report['table'] = text
    print()
    counts = [
        f'{name} {getattr(args, name.lower() + "_warmup")}+{getattr(args, name.lower() + "_steps")}'
        for name in ('MIME', 'ETHREED')
        if getattr(args, name.lower() + '_repo')
    ]
    print(
        f'Reference code vs parlai-empathy, {args.threads} threads, {platform.machine()}, ED '
        f'{"first %d conversations per split" % args.ed_limit if args.ed_limit else "full"} '
        f'(sha256 {key}); warm-up+timed steps: reference {", ".join(counts)}; ours '
        f'{args.our_warmup}+{args.our_steps}'
    )
    print(text)
    for name in ('mime', 'ethreed'):
        ref = report.get(name, {}).get('reference')
        if ref and not (ref['commit'] or '').startswith(ref['expected_commit']):
            print(f'note: {name} checkout is at {ref["commit"]}, not {ref["expected_commit"]}')
    evidence.finish_benchmark_record(report)
    if args.out:
        with open(args.out, 'w') as handle:
            json.dump(report, handle, indent=1)
        print(f'report: {args.out}')


# ================================================================================================
# children
# ================================================================================================


class StopTimedRun(BaseException):
    """Raised after the last timed batch. Not an Exception: the references catch those (MIME's
    main.py catches KeyboardInterrupt to go on to testing)."""


class TimedBatches:
    """Yields ``warmup + steps`` batches of ``source``, timing from the request of the first timed
    batch to the request of the one after the last (= loading + training of the timed steps),
    then raises :class:`StopTimedRun`."""

    def __init__(self, source, warmup, steps, stats):
        self.source, self.warmup, self.steps, self.stats = source, warmup, steps, stats
        self.examples = self.context_tokens = 0
        self.started = self.elapsed = None

    def __len__(self):
        return self.warmup + self.steps

    def __iter__(self):
        iterator = iter(self.source)
        for step in range(self.warmup + self.steps):
            if step == self.warmup:
                self.started = time.perf_counter()
            batch = next(iterator)
            if step >= self.warmup:
                examples, tokens = self.stats(batch)
                self.examples += examples
                self.context_tokens += tokens
            yield batch
        self.elapsed = time.perf_counter() - self.started
        raise StopTimedRun()

    def result(self):
        return {
            'timed_steps': self.steps,
            'warmup_steps': self.warmup,
            'seconds': self.elapsed,
            'steps_per_s': self.steps / self.elapsed,
            's_per_step': self.elapsed / self.steps,
            'examples_per_s': self.examples / self.elapsed,
            'examples_per_step': self.examples / self.steps,
            'context_tokens_per_example': self.context_tokens / max(self.examples, 1),
        }


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def script_globals(stop, script):
    """The module namespace of ``script`` (run by runpy) from the traceback of ``stop``."""
    tb, found = stop.__traceback__, None
    while tb is not None:
        if os.path.realpath(tb.tb_frame.f_code.co_filename) == os.path.realpath(script):
            found = tb.tb_frame.f_globals
        tb = tb.tb_next
    if found is None:
        raise RuntimeError(f'{script} did not reach the timed loop')
    return found


def reference_shims(root, patches):
    """The runtime shims every reference process gets (see SHIMS['both'])."""
    import importlib.abc
    import importlib.machinery

    import nltk
    import numpy as np
    import torch
    from nltk.tokenize import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    sys.dont_write_bytecode = True
    for name, value in (('float', float), ('int', int)):
        if not hasattr(np, name):
            setattr(np, name, value)
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.nn.Module.cuda = lambda self, *args, **kwargs: self
    sentences, words = PunktSentenceTokenizer(), NLTKWordTokenizer()
    nltk.download = lambda *args, **kwargs: True
    nltk.word_tokenize = lambda text, *args, **kwargs: [
        token for sentence in sentences.tokenize(text) for token in words.tokenize(sentence)
    ]

    edits = {os.path.realpath(os.path.join(root, rel)): e for rel, e in patches.items()}

    class PatchedLoader(importlib.machinery.SourceFileLoader):
        def get_code(self, fullname):
            source = self.get_data(self.path).decode('utf-8')
            for old, new, why in edits[os.path.realpath(self.path)]:
                if old not in source:
                    raise RuntimeError(
                        f'shim for {self.path} ({why}) does not apply: {old!r} not '
                        'found; is the checkout at the expected commit?'
                    )
                source = source.replace(old, new)
            return compile(source, self.path, 'exec', dont_inherit=True)

    class PatchFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None or not spec.origin or os.path.realpath(spec.origin) not in edits:
                return None
            spec.loader = PatchedLoader(fullname, spec.origin)
            return spec

    sys.meta_path.insert(0, PatchFinder())


def write_result(spec, result):
    with open(spec['result'], 'w') as handle:
        json.dump(result, handle, indent=1)


def child_mime_ref(spec):
    import runpy

    import torch

    root, work = spec['repo'], spec['workdir']
    main_py = os.path.join(root, 'main.py')
    os.chdir(work)  # MIME reads dataset/*.npy and writes dataset/dataset_preproc.p relative to here
    os.makedirs('vectors', exist_ok=True)
    open('vectors/empty.txt', 'w').close()
    sys.path.insert(0, root)
    reference_shims(root, {})
    torch.set_num_threads(spec['threads'])
    sys.argv = [
        main_py,
        '--batch_size',
        str(spec['batch']),
        '--save_path',
        'save/test/',
        '--emb_file',
        'vectors/empty.txt',
    ]
    from utils import config  # parses sys.argv

    config.USE_CUDA = False
    from model import common_layer

    def stats(batch):  # pairs, and their context tokens without the CLS token MIME puts first
        pairs = len(batch['input_lengths'])
        return pairs, int(sum(batch['input_lengths'])) - pairs

    timed = {}

    def make_infinite(dataloader):
        timed['batches'] = TimedBatches(original(dataloader), spec['warmup'], spec['steps'], stats)
        return iter(timed['batches'])

    original = common_layer.make_infinite
    common_layer.make_infinite = make_infinite
    try:
        runpy.run_path(main_py, run_name='__main__')
        raise RuntimeError('main.py ended without reaching the timed steps')
    except StopTimedRun as stop:
        names = script_globals(stop, main_py)
    result = timed['batches'].result()
    result['peak_rss_mb'] = peak_rss_mb()
    model, vocab = names['model'], names['vocab']
    result['params'] = sum(p.numel() for p in model.parameters())
    result['vocab'] = vocab.n_words
    # greedy decoding as its evaluate() calls it on the test loader (batch 1, no torch.no_grad)
    model.eval()
    iterator = iter(names['data_loader_tst'])
    batches = [next(iterator) for _ in range(spec['decode'])]
    model.decoder_greedy(batches[0], max_dec_step=spec['decode_tokens'] - 1)  # warm-up call
    started = time.perf_counter()
    for batch in batches:
        model.decoder_greedy(batch, max_dec_step=spec['decode_tokens'] - 1)
    seconds = time.perf_counter() - started
    result.update(
        decode_contexts=len(batches),
        decode_seconds=seconds,
        decode_contexts_per_s=len(batches) / seconds,
        decode_batch=1,
        torch=torch.__version__,
    )
    write_result(spec, result)


def spacy_blank_fallback():
    import spacy

    load = spacy.load

    def load_or_blank(name, *args, **kwargs):
        try:
            return load(name, *args, **kwargs)
        except OSError:
            print(f'[shim] spaCy model {name} is not installed: spacy.blank("en") tokenizes')
            return spacy.blank('en')

    spacy.load = load_or_blank


def child_ethreed_prep(spec):
    import pickle
    import runpy

    root, work = spec['repo'], spec['workdir']
    sys.path.insert(0, root)
    reference_shims(root, SOURCE_PATCHES['ethreed'])
    spacy_blank_fallback()
    edprepro = runpy.run_path(os.path.join(root, 'add_labels', 'EDprepro.py'), run_name='edprepro')
    prepro = runpy.run_path(os.path.join(root, 'lj_EDjson_preprocess.py'), run_name='lj_preprocess')
    with open(os.path.join(work, 'ED_add_labels.json'), encoding='utf-8') as handle:
        data = json.load(handle)
    clean = edprepro['clean']  # what EDprepro.py applies to every utterance of its ED.json
    out, summary, padded = os.path.join(work, 'ED'), {}, {}
    layout = (('train', 'train', 'tr'), ('valid', 'validation', 'va'), ('test', 'test', 'te'))
    for split, folder, tag in layout:
        for dialogue in data[split]:
            for turn in dialogue['utterances']:
                turn['history'] = [clean(text) for text in turn['history']]
                turn['reply'] = [clean(text) for text in turn['reply']]
        _, conversations, lengths, turns, speakers, emotions, actions = prepro['load_conversations'](data[split], tag)
        tokens = [prepro['tokenize_conversation'](conversation) for conversation in conversations]
        sentences, sentence_lengths = prepro['pad_sentences'](tokens, max_sentence_length=ETHREED_MAX_SENTENCE)
        padded[split] = sentences
        os.makedirs(os.path.join(out, folder), exist_ok=True)
        with open(os.path.join(out, folder, 'data.pkl'), 'wb') as handle:
            pickle.dump([sentences, sentence_lengths, lengths, turns, speakers, emotions, actions], handle)
        summary[split] = {'dialogues': len(conversations), 'responses': int(sum(turns))}
    vocab = prepro['Vocab'](prepro['tokenizer'])
    vocab.add_dataframe(padded['train'] + padded['valid'])
    vocab.update(**ETHREED_VOCAB)
    vocab.pickle(os.path.join(out, 'word2id.pkl'), os.path.join(out, 'id2word.pkl'))
    summary['vocab'] = len(vocab)
    os.makedirs(os.path.join(work, 'datasets'), exist_ok=True)
    open(os.path.join(work, 'datasets', 'glove.840B.300d.txt'), 'w').close()  # GloVe absent
    with open(os.path.join(work, 'prepared.json'), 'w') as handle:
        json.dump(summary, handle)
    write_result(spec, summary)


def child_ethreed_ref(spec):
    import pickle
    import runpy
    import types
    from pathlib import Path

    import torch

    root, work = spec['repo'], spec['workdir']
    model_dir = os.path.join(root, 'model')
    lj_train = os.path.join(model_dir, 'lj_train.py')
    os.chdir(work)
    sys.path.insert(0, model_dir)
    reference_shims(root, SOURCE_PATCHES['ethreed'])
    stub = types.ModuleType('layers.lj_layers_add')  # imported by layers/__init__.py, not in the repo
    stub.__all__ = []
    sys.modules['layers.lj_layers_add'] = stub
    torch.set_num_threads(spec['threads'])
    sys.argv = [lj_train, '--batch_size', str(spec['batch'])]
    import configs

    configs.project_dir = configs.save_dir = Path(work)
    configs.data_dict['ED'] = Path(work) / 'ED'
    configs.Config.behavior_state = False
    import lj_dataloader

    def stats(batch):
        _, sentence_lengths, _, turns, _, _ = batch
        return int(sum(turns)), int(sum(int(n.sum()) for n in sentence_lengths))

    timed = {}
    original = lj_dataloader.get_loader

    def get_loader(all_data, batch_size=80, data=None, shuffle=True):
        loader = original(all_data, batch_size=batch_size, data=data, shuffle=shuffle)
        if shuffle and 'batches' not in timed:  # lj_train.py's training loader
            timed['batches'] = TimedBatches(loader, spec['warmup'], spec['steps'], stats)
            return timed['batches']
        return loader

    lj_dataloader.get_loader = get_loader
    try:
        runpy.run_path(lj_train, run_name='__main__')
        raise RuntimeError('lj_train.py ended without reaching the timed steps')
    except StopTimedRun as stop:
        names = script_globals(stop, lj_train)
    result = timed['batches'].result()
    result['peak_rss_mb'] = peak_rss_mb()
    solver = names['solver']
    result['params'] = sum(p.numel() for p in solver.model.parameters())
    result['vocab'] = solver.config.vocab_size
    # decoding: RLSolver.test() on each of the first test dialogues (its own input preparation and
    # generate_sentence); only the model's decode=True calls are timed. After decoding, test()
    # unpacks 5 values from the model's 4 (it crashes): the call after the decode is stopped.
    with open(names['test_config'].sentences_path, 'rb') as handle:
        test_data = pickle.load(handle)
    first = [part[: spec['decode_dialogues']] for part in test_data]
    forward, decoded = solver.model.forward, {'seconds': 0.0, 'calls': 0}

    def timed_forward(*args, **kwargs):
        if not kwargs.get('decode'):
            raise StopTimedRun()
        started = time.perf_counter()
        out = forward(*args, **kwargs)
        decoded['seconds'] += time.perf_counter() - started
        decoded['calls'] += 1
        return out

    solver.model.forward = timed_forward
    for run, i in enumerate([0] + list(range(spec['decode_dialogues']))):
        if run == 1:  # the first run was a warm-up call
            decoded.update(seconds=0.0, calls=0)
        solver.test_data_loader = original(
            all_data=[part[i : i + 1] for part in test_data], batch_size=1, shuffle=False
        )
        try:
            solver.test()
        except StopTimedRun:
            pass
    responses = int(sum(first[3]))
    result.update(
        decode_dialogues=decoded['calls'],
        decode_contexts=responses,
        decode_seconds=decoded['seconds'],
        decode_contexts_per_s=responses / decoded['seconds'],
        decode_batch=1,
        torch=torch.__version__,
    )
    write_result(spec, result)


def child_ours(spec):
    import random

    import numpy as np
    import torch

    torch.set_num_threads(spec['threads'])
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    from parlai.core.agents import create_agent
    from parlai.core.message import Message
    from parlai.core.worlds import create_task
    from parlai.scripts.build_dict import build_dict
    from parlai.scripts.train_model import setup_args

    from parlai_empathy.data.ed_episodes import build_episodes
    from parlai_empathy.data.ed_raw import read_clean

    model, tokens = spec['model'], spec['decode_tokens']
    workdir = os.path.dirname(spec['dict_file'])
    arguments = [
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        spec['ed_dir'],
        '--datapath',
        spec['datapath'],
        '-m',
        f'empathy/{model}',
        '-o',
        f'empathy/{model}',
        '-mf',
        os.path.join(workdir, f'{model}-bs{spec["batch"]}', 'model'),
        '--dict-file',
        spec['dict_file'],
        '--dict-maxtokens',
        str(spec['vocab']),
        '--glove-init',
        'false',
        '-dt',
        'train',
        '-bs',
        str(spec['batch']),
        # the dictionary counts every split, as the references' vocabularies do
        '--dict-include-valid',
        'true',
        '--dict-include-test',
        'true',
        # decoding: greedy (beam 1) forced to the references' fixed length; history lines split
        # into utterances (the decode contexts are given whole, one line per utterance)
        '--skip-generation',
        'false',
        '--inference',
        'beam',
        '--beam-size',
        '1',
        '--beam-min-length',
        str(tokens),
        '--split-lines',
        'true',
    ]
    if model == 'mime':
        arguments += ['--max-response-length', str(tokens)]
    else:
        arguments += ['--listener-emotions', 'none', '--label-truncate', str(tokens)]
    opt = setup_args().parse_args(arguments)
    os.makedirs(os.path.dirname(opt['model_file']), exist_ok=True)
    if not os.path.isfile(spec['dict_file']):
        build_dict(opt)
        # Same output-layer size as the reference: its vocabulary also holds words ours never
        # reads (MIME's counts the situation texts); unused tokens fill ours up to its size.
        with open(spec['dict_file'], encoding='utf-8') as handle:
            missing = spec['vocab'] - sum(1 for _ in handle)
        with open(spec['dict_file'], 'a', encoding='utf-8') as handle:
            handle.writelines(f'__unused_{i}__\t0\n' for i in range(missing))
    agent = create_agent(opt)
    world = create_task(opt, agent)
    null = agent.NULL_IDX
    counted = {'on': False, 'examples': 0, 'tokens': 0}
    train_step = agent.train_step

    def counting_train_step(batch):
        if counted['on']:
            counted['examples'] += batch.batchsize
            lengths = batch.get('utt_lengths')  # ETHREED: every context utterance's tokens
            counted['tokens'] += int(lengths.sum() if lengths is not None else batch.text_vec.ne(null).sum())
        return train_step(batch)

    agent.train_step = counting_train_step
    for _ in range(spec['warmup']):
        world.parley()
    counted['on'] = True
    started = time.perf_counter()
    for _ in range(spec['steps']):
        world.parley()
    seconds = time.perf_counter() - started
    result = {
        'timed_steps': spec['steps'],
        'warmup_steps': spec['warmup'],
        'seconds': seconds,
        'steps_per_s': spec['steps'] / seconds,
        's_per_step': seconds / spec['steps'],
        'examples_per_s': counted['examples'] / seconds,
        'examples_per_step': counted['examples'] / spec['steps'],
        'context_tokens_per_example': counted['tokens'] / max(counted['examples'], 1),
        'peak_rss_mb': peak_rss_mb(),
        'batch': spec['batch'],
        'params': sum(p.numel() for p in agent.model.parameters()),
        'vocab': len(agent.dict),
        'vocab_unused_fill': sum(1 for tok in agent.dict.tok2ind if tok.startswith('__unused_')),
        'torch': torch.__version__,
    }
    # greedy decoding of the first test contexts (Listener turns in file order, whole history)
    conversations, _ = read_clean(os.path.join(spec['ed_dir'], 'test.csv'))
    examples = [ex for episode in build_episodes(conversations, both_sides=False) for ex in episode]

    def observed(chosen):
        observations = []
        for example in chosen:
            message = example.to_message()
            del message['labels']  # generation only, as the references' decoding calls
            message.update(text='\n'.join(example.context_utterances), episode_done=True)
            agent.reset()
            observations.append(agent.observe(Message(message)))
        agent.reset()
        return observations

    agent.batch_act(observed(examples[:1]))  # a warm-up call, as on the references' side
    observations = observed(examples[: spec['decode']])
    started = time.perf_counter()
    replies = agent.batch_act(observations)
    seconds = time.perf_counter() - started
    lengths = [len(agent.dict.txt2vec(r.get('text', ''))) for r in replies]
    result.update(
        decode_contexts=len(observations),
        decode_seconds=seconds,
        decode_contexts_per_s=len(observations) / seconds,
        decode_batch=len(observations),
        decode_mean_reply_tokens=sum(lengths) / max(len(lengths), 1),
    )
    write_result(spec, result)


CHILDREN = {
    'mime-ref': child_mime_ref,
    'ethreed-prep': child_ethreed_prep,
    'ethreed-ref': child_ethreed_ref,
    'ours': child_ours,
}


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument('--mime-repo', help='checkout of declare-lab/MIME (7c34f3a)')
    parser.add_argument('--ethreed-repo', help='checkout of outsider-lj/ethreed (397bb20)')
    parser.add_argument(
        '--ref-python',
        default=os.environ.get('PARLAI_EMPATHY_REF_PYTHON', sys.executable),
        help="python of the references' venv (see --setup-ref-venv)",
    )
    parser.add_argument(
        '--setup-ref-venv', metavar='DIR', help=f'create DIR as that venv ({REF_TORCH}, then {" ".join(REF_PACKAGES)})'
    )
    parser.add_argument('--ed-dir', default=DEFAULT_ED)
    parser.add_argument(
        '--ed-limit', type=int, default=0, help='only the first N conversations of each split (smoke runs)'
    )
    parser.add_argument(
        '--workdir',
        default='/tmp/parlai_empathy_reference_speed',
        help='converted data, caches, logs (the checkouts are never written to)',
    )
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--mime-batch', type=int, default=16)
    parser.add_argument('--mime-warmup', type=int, default=20)
    parser.add_argument('--mime-steps', type=int, default=40)
    parser.add_argument('--ethreed-batch', type=int, default=8, help="dialogues (the reference's unit)")
    parser.add_argument('--ethreed-warmup', type=int, default=5)
    parser.add_argument('--ethreed-steps', type=int, default=20)
    parser.add_argument(
        '--ethreed-our-batches',
        type=lambda s: [int(x) for x in s.split(',')],
        default=[8, 16],
        help='our -bs values (listener responses), comma-separated',
    )
    parser.add_argument('--our-warmup', type=int, default=10)
    parser.add_argument('--our-steps', type=int, default=40)
    parser.add_argument('--decode-contexts', type=int, default=100)
    parser.add_argument('--mime-decode-tokens', type=int, default=31)
    parser.add_argument('--ethreed-decode-tokens', type=int, default=40)
    parser.add_argument('--out', help='write the JSON report here')
    parser.add_argument('--child', choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument('--spec', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        with open(args.spec) as handle:
            spec = json.load(handle)
        CHILDREN[args.child](spec)
    else:
        main_parent(args)


if __name__ == '__main__':
    main()
