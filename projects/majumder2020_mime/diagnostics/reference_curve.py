"""The reference MIME's own learning curve (declare-lab/MIME @ 7c34f3a), to set beside ours.

The question: our MIME's emotion classifier can stay near chance for thousands of updates (under
the former GloVe fill rule it does) and ends below the paper's 0.34 test accuracy. Is that our code, or does the
reference's classifier learn just as slowly at equal updates? This script answers it by running
the reference's own ``main.py`` training loop (unchanged model, loss, Noam-Adam, data loader,
shuffling) on the same ED files and recording, at equal updates, what its loop computes:

* every ``--log-every`` updates, the means over those updates of what ``train_one_batch`` returns
  (loss, PPL, emotion cross-entropy, emotion accuracy of the batch), and of the two KL terms it
  adds to its loss (positive and negative group, as its ``VAESampling.kl_div`` returns them,
  divided by the batch's pairs: per example, as our ``loss_kl_pos``/``loss_kl_neg``);
* at every validation of its loop (``check_iter = 1000``): the valid loss, PPL and emotion
  accuracy of its ``evaluate(..., ty="valid")``: the same loss pass over the valid loader
  (``train_one_batch(train=False)``) and the same means; the BLEU calls of that function, which
  have no hypotheses at validation, are skipped (they would shell out to a perl script).

Early stopping, as ``main.py``'s loop does it, kept across resumes: its validations up to 10,000
updates are not counted (``config.model == "mimic" and n_iter < 10000``); after them a valid PPL
at or below the best so far resets the patience and becomes the best (its weights are saved beside
``--out``, ``.best.pt``), any other adds one, and the run stops when the patience exceeds 2.
``main.py`` keeps the best PPL, the patience and the best weights in local variables that a resume
would reset (and it counts its 10,000 from the resume), so this script keeps them itself, in its
checkpoint, and stops the run; without a resume the two agree. Then, as ``main.py`` does after its
loop, the best weights are evaluated on test, by the same loss pass as validation (test PPL and
emotion accuracy as the reference's ``evaluate`` computes them; its decoding of the test set, for
BLEU, is skipped): ``test`` in the JSON.

The run stops after ``--steps`` updates at the latest; the JSON (``--out``) is rewritten after every entry, so a
run cut short keeps what it measured. Every ``--save-every`` updates the run saves its own
checkpoint beside ``--out`` (weights, Adam state, the Noam step, the curve so far: tensors and plain
values, loaded with ``weights_only=True``), after the validation of that update where it has one
(so the checkpoint holds that validation and the early-stopping state after it; a run resumed from
a checkpoint saved before its validation finished validates first); a rerun with the same ``--out`` resumes from
it, with a fresh shuffle of the training data and fresh random state (the reference's ``main.py`` seeds
both at its start and has no resume of its own). It reuses the child-process machinery and runtime shims of
``bench/reference_speed.py`` (listed there in ``SHIMS``; no reference code is copied here).

Word table at the start (``--init``):

* ``ours`` (default): every word of our MIME dictionary that the reference also has starts from
  the row our ``-m empathy/mime`` starts it from in distribution: GloVe 6B 50d in the first 50
  columns and N(0, ``--fill-std``) elsewhere, words outside GloVe entirely N(0, ``--fill-std``)
  (``parlai_empathy.models.glove.fit_to_dim``, 'pad'), written as a 300-d text file the
  reference's ``gen_embeddings`` reads; so the curves differ by the code, not the initial table.
  ``--fill-std`` is our agent's ``--glove-fill-std``: ``0.01`` (default; the agent's default and
  the reference's own rule for values its GloVe lacks) or ``glove`` (the std of the found GloVe
  values: the former fill rule, which some committed rows and ``runs/diagnostics/reference`` used);
* ``reference``: an empty embedding file: the reference's own fallback, 0.01 * randn for every
  word (what it does for words its GloVe 300d lacks).

Usage (from the repository root; the workdir of a ``reference_speed.py`` run holds the converted
ED files, or they are written there)::

    .venv/bin/python projects/majumder2020_mime/diagnostics/reference_curve.py --mime-repo /tmp/ref-mime \\
        --ref-python ../ref-venv/bin/python --dict M.dict --steps 8000 --threads 1 --workdir WORKDIR --out curve.json
"""

import argparse
import json
import os
import platform
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(REPO, 'bench'))  # reference_speed: how a reference checkout is made to run
import reference_speed as rs  # noqa: E402


class StopCurve(BaseException):
    """Raised after the last update (a BaseException: main.py catches KeyboardInterrupt only)."""


def write_init_file(dict_path, path, dim=300, seed=0, fill_std=None):
    """Our MIME's initial word rows (see module doc), as a GloVe-style text file."""
    import torch

    from parlai_empathy.models.glove import fit_to_dim, load_glove

    words = []
    with open(dict_path, encoding='utf-8') as handle:
        for line_no, line in enumerate(handle, start=1):
            word, sep, _count = line.rstrip('\n').rpartition('\t')
            if not sep:
                raise ValueError(f'{dict_path}:{line_no}: field "word<TAB>count" expected')
            if word and not word.startswith('__') and ' ' not in word:
                words.append(word)
    matrix, hit = load_glove(words)
    table = fit_to_dim(matrix, hit, dim, generator=torch.Generator().manual_seed(seed), fill_std=fill_std)
    with open(path + '.tmp', 'w', encoding='utf-8') as handle:
        for word, row in zip(words, table.tolist()):
            handle.write(word + ' ' + ' '.join(f'{v:.5f}' for v in row) + '\n')
    os.replace(path + '.tmp', path)
    return {
        'words': len(words),
        'in_glove': int(hit.sum()),
        'dim': dim,
        'seed': seed,
        'fill_std': 'glove' if fill_std is None else fill_std,
    }


def our_curve(path):
    """Valid points of one of our runs: a ``meta.json`` (``training.curve``) or a diagnostic's
    ``curve.json`` (``curve``)."""
    with open(path) as handle:
        data = json.load(handle)
    points = data.get('curve') or (data.get('training') or {}).get('curve')
    if not points:
        raise ValueError(f'{path}: no "curve" nor "training.curve" list')
    return {int(p['updates']): p for p in points}


def comparison_table(reference_path, ours):
    """Markdown: the reference's valid figures beside ours at the same updates (within 10).

    The reference's valid PPL is exp of the mean over its batches of each batch's mean token NLL
    (``evaluate``); ours are given both ways that bracket it: token-weighted over the corpus
    (``ppl_gold``) and exp of the mean over examples of each example's mean (``ppl_ex_gold``).
    Emotion accuracy is per example on both sides."""
    with open(reference_path) as handle:
        ref = json.load(handle)
    curves = [(name, our_curve(path)) for name, path in ours]
    head = ['updates', 'reference: valid PPL (its definition)', 'reference: valid emotion acc.']
    for name, _ in curves:
        head += [f'{name}: valid PPL, corpus / per example (gold polarity)', f'{name}: valid emotion acc.']
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for point in ref['valid']:
        row = [f'{point["updates"]:,}', f'{point["ppl"]:.1f}', f'{point["emo_acc_per_example"]:.3f}']
        for _, curve in curves:
            near = [u for u in curve if abs(u - point['updates']) <= 10]
            mine = curve[near[0]] if near else None
            row += (
                [f'{mine["ppl_gold"]:.1f} / {mine["ppl_ex_gold"]:.1f}', f'{mine["emo_acc"]:.3f}'] if mine else ['', '']
            )
        lines.append('| ' + ' | '.join(row) + ' |')
    return '\n'.join(lines)


def child_mime_curve(spec):
    import runpy

    import numpy as np
    import torch

    root, work = spec['repo'], spec['workdir']
    main_py = os.path.join(root, 'main.py')
    os.chdir(work)
    sys.path.insert(0, root)
    rs.reference_shims(root, {})
    torch.set_num_threads(spec['threads'])
    sys.argv = [
        main_py,
        '--batch_size',
        str(spec['batch']),
        '--save_path',
        spec['save_path'],
        '--emb_file',
        spec['emb_file'],
    ]
    from utils import config  # parses sys.argv

    config.USE_CUDA = False
    from model import common_layer, trainer

    curve = dict(spec['report'], train=[], valid=[])
    window, clock = [], {'train_s': 0.0}

    def dump():
        curve['updates_done'] = clock.get('updates', 0)
        curve['train_seconds'] = clock['train_s']
        with open(spec['out'] + '.tmp', 'w') as handle:
            json.dump(curve, handle, indent=1)
        os.replace(spec['out'] + '.tmp', spec['out'])

    original = trainer.Train_MIME.train_one_batch
    # the KL terms its train_one_batch adds to the loss but does not return: recorded as its
    # VAESampling.kl_div computes them (summed over the batch and the latent dimensions)
    from model import VAE_noEmo_posterior as vae

    kl_calls, original_kl = [], vae.VAESampling.kl_div

    def kl_div(*args, **kwargs):
        value = original_kl(*args, **kwargs)
        if state.get('training_step'):
            kl_calls.append(float(value.detach()))
        return value

    vae.VAESampling.kl_div = staticmethod(kl_div)

    checkpoint = spec.get('checkpoint')
    check_iter = 1000  # main.py's validation interval (its ``check_iter``)
    best_path = checkpoint[: -len('.checkpoint.pt')] + '.best.pt' if checkpoint else None
    state = {'offset': 0, 'resumed': False}
    # main.py's early stopping, kept here across resumes (see the module doc)
    stopping = {
        'best_ppl': spec.get('initial_best_ppl', 1000.0),
        'best_updates': None,
        'patience': 0,
    }  # main.py starts best_ppl at 1000; it stops at patience > 2
    curve['early_stopping'] = stopping

    def resume(model):
        """At the first update: load our checkpoint of an earlier run of this curve, if any
        (weights, Adam state, the Noam step, the curve so far; tensors and plain values only,
        read with weights_only=True)."""
        state['resumed'] = True
        if not checkpoint or not os.path.isfile(checkpoint):
            return
        saved = torch.load(checkpoint, weights_only=True)
        model.load_state_dict(saved['model'])
        model.optimizer.optimizer.load_state_dict(saved['adam'])
        model.optimizer._step, model.optimizer._rate = saved['noam_step'], saved['noam_rate']
        state['offset'] = clock['updates'] = saved['updates']
        clock['train_s'] = saved['train_s']
        curve['train'], curve['valid'] = saved['curve_train'], saved['curve_valid']
        stopping.update(saved.get('early_stopping') or {})
        curve.setdefault('resumed_at', []).append(
            {'updates': saved['updates'], 'date': time.strftime('%Y-%m-%d %H:%M:%S %z')}
        )

    def save(model):
        torch.save(
            {
                'model': model.state_dict(),
                'adam': model.optimizer.optimizer.state_dict(),
                'noam_step': model.optimizer._step,
                'noam_rate': model.optimizer._rate,
                'updates': clock['updates'],
                'train_s': clock['train_s'],
                'curve_train': curve['train'],
                'curve_valid': curve['valid'],
                'early_stopping': dict(stopping),
            },
            checkpoint + '.tmp',
        )
        os.replace(checkpoint + '.tmp', checkpoint)

    def catch_up(model, loop_globals):
        """Resumed from a checkpoint of a validation update whose validation did not finish (or
        was saved before it, as earlier versions of this script saved them): validate now, as
        main.py would have; the early stop it may reach propagates like main.py's ``break``."""
        done = state['offset']
        if not done or done % check_iter or any(p['updates'] == done for p in curve['valid']):
            return
        loader = loop_globals['data_loader_val']
        smoke = spec.get('smoke_valid_batches')
        model.eval()
        evaluate(model, [b for _, b in zip(range(smoke), loader)] if smoke else loader)
        model.train()

    def train_one_batch(self, batch, n_iter, train=True):
        if not train:
            return original(self, batch, n_iter, train)
        if not state['resumed']:
            resume(self)
            if stopping['patience'] > 2:
                raise StopCurve()  # stopped, and killed before its test pass
            catch_up(self, sys._getframe(1).f_globals)  # main.py's loop called us: its globals
        if n_iter + state['offset'] >= spec['steps']:
            raise StopCurve()  # here, not after the last update: main.py validates after it first
        updates = n_iter + 1 + state['offset']
        started = time.perf_counter()
        kl_calls.clear()
        state['training_step'] = True
        out = original(self, batch, updates - 1, train)
        state['training_step'] = False
        clock['train_s'] += time.perf_counter() - started
        clock['updates'] = updates
        pairs = len(batch['input_lengths'])
        kl = [value / pairs for value in kl_calls] if len(kl_calls) == 2 else [float('nan')] * 2
        window.append(tuple(out) + tuple(kl))
        if updates % spec['log_every'] == 0:
            loss, ppl, bce, acc, kl_pos, kl_neg = (float(np.mean(col)) for col in zip(*window))
            curve['train'].append(
                {
                    'updates': updates,
                    'loss': loss,
                    'ppl_mean': ppl,
                    'loss_cls': bce,
                    'emo_acc': acc,
                    'kl_pos_per_example': kl_pos,
                    'kl_neg_per_example': kl_neg,
                    'train_minutes': clock['train_s'] / 60,
                }
            )
            window.clear()
            dump()
        if checkpoint and updates % spec['save_every'] == 0 and updates % check_iter:
            save(self)  # a validation update's checkpoint is saved after its validation (evaluate)
        return out

    def loss_pass(model, data):
        """The loss pass of the reference's evaluate() and its means (no decoding)."""
        rows, started = [], time.perf_counter()
        with torch.no_grad():
            for batch in data:
                rows.append(model.train_one_batch(batch, 0, train=False) + (len(batch['input_lengths']),))
        loss, _ppl, bce, acc = (float(np.mean([r[i] for r in rows])) for i in range(4))
        examples = sum(r[4] for r in rows)
        acc_ex = sum(r[3] * r[4] for r in rows) / examples
        return {
            'updates': clock['updates'],
            'loss': loss,
            'ppl': float(np.exp(loss)),
            'loss_cls': bce,
            'emo_acc': acc,
            'emo_acc_per_example': acc_ex,
            'examples': examples,
            'train_minutes': clock['train_s'] / 60,
            'seconds': time.perf_counter() - started,
        }

    def evaluate(model, data, ty='valid', max_dec_step=30, write_summary=False):
        assert ty == 'valid', ty  # main.py's test evaluation is replaced by test_best below
        point = loss_pass(model, data)
        point['valid_seconds'] = point.pop('seconds')
        curve['valid'].append(point)
        # main.py: `if config.model == "mimic" and n_iter < 10000: continue` (n_iter = updates - 1)
        if point['updates'] > spec.get('count_after', 10000):
            if point['ppl'] <= stopping['best_ppl']:
                stopping.update(best_ppl=point['ppl'], best_updates=point['updates'], patience=0)
                torch.save(model.state_dict(), best_path + '.tmp')
                os.replace(best_path + '.tmp', best_path)
            else:
                stopping['patience'] += 1
        dump()
        if checkpoint and point['updates'] % spec['save_every'] == 0:
            save(model)  # with this validation and the early-stopping state after it
        if stopping['patience'] > 2:
            raise StopCurve()  # main.py: `if (patient > 2): break`, then its test evaluation
        return point['loss'], point['ppl'], point['loss_cls'], point['emo_acc'], 0.0, 0.0, 0.0

    def test_best(names, batches=None):
        """main.py after its loop: the best weights, evaluated on test (the loss pass)."""
        model = names['model']
        model.load_state_dict(torch.load(best_path, weights_only=True))
        model.eval()
        point = loss_pass(model, names['data_loader_tst'] if batches is None else batches)
        point['weights_of_updates'] = stopping['best_updates']
        curve['test'] = point

    trainer.Train_MIME.train_one_batch = train_one_batch
    common_layer.evaluate = evaluate
    try:
        runpy.run_path(main_py, run_name='__main__')
    except StopCurve as stop:
        names = rs.script_globals(stop, main_py)
        smoke = spec.get('smoke_valid_batches')
        if smoke:  # a smoke run: one validation on a few valid batches (and test, if it counted)

            def first(loader):
                return [b for _, b in zip(range(smoke), loader)]

            names['model'].eval()
            if stopping['patience'] <= 2:  # stopped by --steps, not early-stopped: the last weights
                try:
                    evaluate(names['model'], first(names['data_loader_val']))
                except StopCurve:
                    pass  # that validation ran out of patience: the test pass below, as main.py's
            if stopping['best_updates'] is not None:  # with --count-after below the updates made
                test_best(names, first(names['data_loader_tst']))
        elif stopping['best_updates'] is not None:  # early-stopped, or --steps reached after 10,000
            test_best(names)
    curve['finished'] = True
    dump()
    rs.write_result(spec, {'updates': clock.get('updates', 0)})


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--mime-repo', required=False)
    parser.add_argument('--ref-python', default=os.environ.get('PARLAI_EMPATHY_REF_PYTHON', sys.executable))
    parser.add_argument('--ed-dir', default=rs.DEFAULT_ED)
    parser.add_argument('--dict', help="our MIME dictionary (a model's .dict), for --init ours")
    parser.add_argument('--init', choices=['ours', 'reference'], default='ours')
    # Read as text and checked by the parent only: the child runs in the reference's venv, which has
    # no parlai_empathy to read it with (argparse converts even an unused default).
    parser.add_argument(
        '--fill-std',
        default='0.01',
        help='--init ours: the std of the values GloVe 50d does not give, as our '
        'agent\'s --glove-fill-std (0.01, the default, or "glove")',
    )
    parser.add_argument('--steps', type=int, default=8000)
    parser.add_argument('--log-every', type=int, default=250)
    parser.add_argument('--batch', type=int, default=16)
    parser.add_argument(
        '--save-every',
        type=int,
        default=1000,
        help="updates between checkpoints (a multiple of 1,000 keeps the reference's "
        'validations at multiples of 1,000 after a resume); a rerun with the same --out resumes',
    )
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--workdir', default='/tmp/parlai_empathy_reference_speed')
    parser.add_argument('--out', required=False)
    parser.add_argument(
        '--smoke-valid-batches',
        type=int,
        default=0,
        help='smoke test: after the last update, validate on this many valid batches',
    )
    parser.add_argument(
        '--count-after',
        type=int,
        default=10000,
        help='validations up to this many updates are not counted for early stopping '
        '(main.py: 10,000; lower only for a smoke test of the early-stopping path)',
    )
    parser.add_argument(
        '--initial-best-ppl',
        type=float,
        default=1000.0,
        help='the best valid PPL before the first counted validation (main.py: 1000; '
        'higher only for a smoke test of the early-stopping path)',
    )
    parser.add_argument(
        '--table', metavar='CURVE', help='print a markdown table of this reference curve beside --ours curves'
    )
    parser.add_argument(
        '--ours',
        nargs='*',
        default=[],
        metavar='NAME=PATH',
        help='with --table: our runs (meta.json or a diagnostic curve.json)',
    )
    parser.add_argument('--child', choices=['mime-curve'], help=argparse.SUPPRESS)
    parser.add_argument('--spec', help=argparse.SUPPRESS)
    return parser


def main():
    parser = build_parser()
    args = parser.parse_args()
    if args.child:
        with open(args.spec) as handle:
            child_mime_curve(json.load(handle))
        return
    if args.table:
        print(comparison_table(args.table, [tuple(item.split('=', 1)) for item in args.ours]))
        return
    from parlai_empathy.models.glove import glove_fill_std  # the parent's venv has our package

    try:
        args.fill_std = glove_fill_std(args.fill_std)  # read as our agents read --glove-fill-std
    except ValueError:
        parser.error(f'argument --fill-std: a non-negative number or "glove", not {args.fill_std!r}')
    if not (args.mime_repo and args.out):
        raise SystemExit('give --mime-repo DIR (a checkout of declare-lab/MIME) and --out FILE')
    if args.init == 'ours' and not args.dict:
        raise SystemExit('--init ours needs --dict (the .dict of a -m empathy/mime model)')
    workdir = os.path.abspath(args.workdir)
    ed_dir = os.path.abspath(args.ed_dir)
    key = rs.sha256_of([os.path.join(ed_dir, s + '.csv') for s in ('train', 'valid', 'test')])[:12]
    mime_dir = os.path.join(workdir, f'mime-{key}')
    if not os.path.isfile(os.path.join(mime_dir, 'dataset', 'sys_target_texts.test.npy')):
        splits = {split: rs.listener_turns(ed_dir, split) for split in ('train', 'valid', 'test')}
        rs.write_mime_dataset(splits, os.path.join(mime_dir, 'dataset'))
    os.makedirs(os.path.join(mime_dir, 'vectors'), exist_ok=True)
    init = {'init': args.init}
    if args.init == 'ours':
        from parlai_empathy.models.glove import fill_std_value

        fill_std = fill_std_value(args.fill_std)
        emb_file = os.path.join(mime_dir, 'vectors', f'ours_init_300d_fill_{args.fill_std}.txt')
        init.update(write_init_file(args.dict, emb_file, fill_std=fill_std))
    else:
        emb_file = os.path.join(mime_dir, 'vectors', 'empty.txt')
        open(emb_file, 'w').close()
    report = {
        'what': 'declare-lab/MIME main.py training loop, unchanged, its train and valid figures '
        'at equal updates (projects/majumder2020_mime/diagnostics/reference_curve.py)',
        'command': ['python'] + [a for a in sys.argv],
        'date': time.strftime('%Y-%m-%d %H:%M:%S %z'),
        'reference_commit': rs.git_commit(os.path.abspath(args.mime_repo)),
        'machine': {
            'platform': platform.platform(),
            'processor': platform.processor(),
            'cpu_count': os.cpu_count(),
            'python': platform.python_version(),
        },
        'threads': args.threads,
        'batch': args.batch,
        'ed_sha256_12': key,
        'word_table': init,
        'shims': rs.SHIMS['both']
        + rs.SHIMS['mime'][1:2]
        + [
            'argv: --batch_size B --save_path save/curve/ --emb_file <the --init file>; the '
            'process runs in <workdir>/mime-<ED hash>, where dataset/ holds the converted ED files',
            'stop after --steps updates: Train_MIME.train_one_batch is wrapped to record what it '
            'returns and raise a BaseException after the last update',
            'KL: model.VAE_noEmo_posterior.VAESampling.kl_div is wrapped to record the values it '
            'returns during training updates (unchanged)',
            'resume: after a rerun, the first update loads our checkpoint (weights, Adam, Noam step); '
            "the loader reshuffles and the random state is main.py's seed again",
            'validation: model.common_layer.evaluate is replaced by its own loss pass and means '
            '(train_one_batch(train=False) over the valid loader) without its BLEU calls, which '
            'have no hypotheses at validation; under torch.no_grad',
            "early stopping: main.py's rule (validations after --count-after updates counted, "
            'patience > 2 stops), kept by this script across resumes with the best weights saved '
            'beside --out; then the best weights get the same loss pass on test (no decoding)',
        ],
        'load_at_start': os.getloadavg(),
    }
    spec = dict(
        repo=os.path.abspath(args.mime_repo),
        workdir=mime_dir,
        batch=args.batch,
        steps=args.steps,
        log_every=args.log_every,
        emb_file=emb_file,
        save_path='save/curve/',
        out=os.path.abspath(args.out),
        report=report,
        smoke_valid_batches=args.smoke_valid_batches,
        save_every=args.save_every,
        count_after=args.count_after,
        initial_best_ppl=args.initial_best_ppl,
        checkpoint=os.path.abspath(args.out) + '.checkpoint.pt',
    )
    print(f'reference curve: {args.out}', flush=True)
    rs.run_child(args.ref_python, 'mime-curve', spec, workdir, args.threads, 'mime-curve', script=__file__)


if __name__ == '__main__':
    main()
