"""``-m empathy/mime`` and ``-m empathy/multitask_transformer`` through the real ``parlai`` CLI.

Needs the package installed non-editably (``make reinstall``). Tiny models, the embedded ED
sample, a few steps each.
"""

import os

import pytest

import word_table_probe

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ['--embedding-size', 32, '--attention-size', 16, '--ffn-size', 32, '--latent-size', 16]


def _train(run_parlai, tmp_path, model, extra=()):
    preset = os.path.join(REPO, 'opt_presets', 'empathy', model.split('/')[1] + '.opt')
    model_file = tmp_path / 'model'
    done = run_parlai(
        'train_model',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-m',
        model,
        '-o',
        preset,
        '-mf',
        model_file,
        '--max-train-steps',
        6,
        '-vstep',
        6,
        '-bs',
        8,
        '--dict-maxtokens',
        2000,
        *extra,
    )
    return model_file, done.stdout + done.stderr


def _final_valid(tmp_path):
    import json

    return json.loads((tmp_path / 'model.trainstats').read_text())['final_valid_report']


def _emotion_figures_agree(report, top_k):
    """The emotion classifier's figures of a run: accuracies of the valid examples, the top-k one
    at least the top-1 one, and a positive finite classification loss."""
    exs = report['exs']
    assert exs > 0
    for key in ('emo_acc', f'emo_acc@{top_k}'):
        assert 0 <= report[key] <= 1 and (report[key] * exs) == pytest.approx(round(report[key] * exs)), key
    assert report['emo_acc'] <= report[f'emo_acc@{top_k}']
    assert 0 < report['loss_cls'] < float('inf')


def test_mime_trains_reports_emotion_metrics_and_answers(run_parlai, tmp_path):
    import re

    from parlai_empathy.data.emotions import polarity

    model_file, log = _train(run_parlai, tmp_path, 'empathy/mime', TINY)
    _emotion_figures_agree(_final_valid(tmp_path), 5)
    found = re.search(r'GloVe init: ([0-9.]+)% of (\d+) words found', log)
    assert found and 0 < float(found.group(1)) <= 100, log[-3000:]
    assert os.path.isfile(model_file)

    script = tmp_path / 'chat.py'
    script.write_text(
        'import sys\n'
        'from parlai.core.agents import create_agent_from_model_file\n'
        "agent = create_agent_from_model_file(sys.argv[1], {'skip_generation': False,"
        " 'inference': 'beam', 'beam_size': 3})\n"
        'from parlai_empathy.data.emotions import ED_EMOTIONS\n'
        'passes = []\n'
        'agent.core_model.encoder.register_forward_hook(lambda m, i, out: passes.append(out.aux))\n'
        "for text in ['I passed my driving test today!', '', 'so ' * 3000]:\n"
        '    passes.clear()\n'
        "    agent.observe({'text': text, 'episode_done': True})\n"
        '    reply = agent.act()\n'
        '    from_generation = ED_EMOTIONS[int(passes[-1].emotion_logits.argmax())]\n'
        '    agree = all(torch.equal(p.emotion_logits, passes[-1].emotion_logits) for p in passes)\n'
        "    print('REPLY', reply['predicted_emotion'], reply['emotion_polarity'],"
        " bool(reply['text'].strip()), len(passes), agree, from_generation == reply['predicted_emotion'])\n"
    )
    script.write_text('import torch\n' + script.read_text())
    done = run_parlai('python', script, model_file)
    replies = [line.split() for line in done.stdout.splitlines() if line.startswith('REPLY')]
    assert len(replies) == 3  # a normal, an empty and a very long message all get answers
    for _, emotion, shown_polarity, has_text, passes, agree, same in replies:
        # at inference mimicry follows the polarity of the emotion the classifier predicted
        assert shown_polarity == polarity(emotion) and has_text == 'True'
        # the reply's emotion is read off the generation's encoder pass (ParlAI's beam loop
        # encodes the batch itself; the agent's own pass just before reads the same)
        assert passes == '2' and agree == 'True' and same == 'True'


ABLATIONS = {  # option -> (mimicry, grouping, stochastic) of the model built from the saved file
    '--mimicry': (False, True, True),
    '--emotion-grouping': (True, False, True),
    '--stochastic': (True, True, False),
}


@pytest.mark.parametrize('switch', sorted(ABLATIONS))
def test_mime_ablation_options_train(run_parlai, tmp_path, switch):
    model_file, _ = _train(run_parlai, tmp_path, 'empathy/mime', TINY + [switch, 'false', '--glove-init', 'false'])
    _emotion_figures_agree(_final_valid(tmp_path), 5)
    script = tmp_path / 'parts.py'
    script.write_text(
        'import sys\n'
        'from parlai.core.agents import create_agent_from_model_file\n'
        'model = create_agent_from_model_file(sys.argv[1]).model\n'
        'names = [n for n, _ in model.named_parameters()]\n'
        "print('PARTS', model.encoder.mimicry, model.encoder.grouping, model.encoder.stochastic,"
        " any('posterior' in n for n in names), any('fusion' in n for n in names),"
        ' model.encoder.sampler.n_groups)\n'
    )
    done = run_parlai('python', script, model_file)
    parts = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith('PARTS')]
    mimicry, grouping, stochastic = ABLATIONS[switch]
    # without sampling there is no posterior network; without grouping one group and no fusion
    assert parts == [
        [str(mimicry), str(grouping), str(stochastic), str(stochastic), str(grouping), '2' if grouping else '1']
    ], done.stdout[-3000:]


@pytest.mark.parametrize('extra, saved', [([], 0.01), (['--glove-fill-std', 'glove'], 'glove')])
def test_glove_fill_std_reaches_the_word_table_through_the_cli(run_parlai, tmp_path, extra, saved):
    """By default (``--glove-fill-std 0.01``, the reference's randn * 0.01 for what GloVe does not
    give) the rows of words GloVe lacks start at that std; with ``glove`` (the rule of the rows
    trained before this default) at the found GloVe values' own std. The found words start at
    their GloVe vectors either way, and the option is saved with the model."""
    import json

    model_file, log = _train(run_parlai, tmp_path, 'empathy/mime', TINY + extra)
    assert 'GloVe init' in log
    assert json.loads((tmp_path / 'model.opt').read_text())['glove_fill_std'] == saved
    script = tmp_path / 'table.py'
    script.write_text(
        'import sys\n'
        'from parlai.core.agents import create_agent_from_model_file\n'
        'agent = create_agent_from_model_file(sys.argv[1])\n'
        + word_table_probe.PROBE
        + "print('FOUND', int(hit.sum()), float((table[hit] - matrix[hit, :table.size(1)]).abs().max()))\n"
    )
    done = run_parlai('python', script, model_file)
    stats = word_table_probe.stats(done.stdout, ('MISSING', 'FOUND', 'GLOVESTD'))
    expected = 0.01 if saved == 0.01 else float(stats['GLOVESTD'][0])
    assert expected > 0.1 or saved == 0.01  # GloVe's own std is far above the reference's 0.01
    assert int(stats['MISSING'][0]) > 3 and 0.5 * expected < float(stats['MISSING'][1]) < 2 * expected
    # six warm-up updates of the Noam schedule move a weight by far less than 1e-3
    assert int(stats['FOUND'][0]) > 100 and float(stats['FOUND'][1]) < 1e-3


def test_reference_forms_for_new_models_and_older_models_keep_theirs(run_parlai, tmp_path):
    """The reference's Embeddings.forward returns lut(x) * sqrt(d_model), its feed-forward layer
    ends with a ReLU and its CLS/USR/SYS inputs are scaled word rows: a new model saves
    ``embeddings_scale``, ``ffn_final_relu`` and ``reference_tags`` true and computes so; a model
    whose options predate these options was trained without them and loads so."""
    import json

    model_file, _ = _train(run_parlai, tmp_path, 'empathy/multitask_transformer', TINY[:6])
    opt_file = tmp_path / 'model.opt'
    saved = json.loads(opt_file.read_text())
    assert saved['embeddings_scale'] is True and saved['ffn_final_relu'] is True
    assert saved['reference_tags'] is True
    script = tmp_path / 'forms.py'
    script.write_text(
        'import sys\n'
        'from parlai.core.agents import create_agent_from_model_file\n'
        'agent = create_agent_from_model_file(sys.argv[1])\n'
        'model = agent.core_model\n'
        "print('FORMS', model.encoder.embedding.words.scale, agent.opt['embeddings_scale'],\n"
        "      model.decoder.stack.blocks[0].ffn.final_relu, agent.opt['ffn_final_relu'],\n"
        "      model.encoder.embedding.ctx_scale, agent.opt['reference_tags'])\n"
    )

    def forms():
        out = run_parlai('python', script, model_file).stdout.splitlines()
        return [x for x in out if x.startswith('FORMS')]

    assert forms() == [f'FORMS {32**0.5} True True True {2 * 32**0.5} True']
    del saved['embeddings_scale'], saved['ffn_final_relu'], saved['reference_tags']
    opt_file.write_text(json.dumps(saved))
    assert forms() == ['FORMS 1.0 False False False 1.0 False']


def test_plain_adam_for_new_models_and_older_models_keep_amsgrad(run_parlai, tmp_path):
    """ParlAI builds ``--optimizer adam`` with ``amsgrad=True``; the references step plain Adam.
    A new model trains without AMSGrad and saves ``amsgrad: false``; ``--amsgrad true`` asks for
    it; a model whose options predate the option was trained with AMSGrad and resumes with it, its
    running maximum started from the saved second moment when its state had none."""
    import json

    model_file, _ = _train(run_parlai, tmp_path, 'empathy/multitask_transformer', TINY[:6])
    opt_file = tmp_path / 'model.opt'
    saved = json.loads(opt_file.read_text())
    assert saved['amsgrad'] is False
    script = tmp_path / 'optim.py'
    script.write_text(
        'import sys\n'
        'from parlai.core.agents import create_agent_from_model_file\n'
        "override = {'datatype': 'train'}\n"
        "if len(sys.argv) > 2: override['amsgrad'] = sys.argv[2] == 'true'\n"
        'agent = create_agent_from_model_file(sys.argv[1], override)\n'
        'optimizer = agent.optimizer\n'
        'states = [optimizer.state[p] for g in optimizer.param_groups for p in g["params"] if p in optimizer.state]\n'
        'flags = {g["amsgrad"] for g in optimizer.param_groups}\n'
        'ready = all("max_exp_avg_sq" in s for s in states) if flags == {True} else True\n'
        "print('OPTIM', type(optimizer).__name__, sorted(flags), agent.opt['amsgrad'], bool(states), ready)\n"
        'agent.train_step(agent.batchify([agent.observe({"text": "hi there", "labels": ["hello"], '
        '"emotion": "joyful", "episode_done": True})]))\n'
        "print('STEPPED', agent._number_training_updates)\n"
    )

    def optim(*extra):
        out = run_parlai('python', script, model_file, *extra).stdout.splitlines()
        return [x for x in out if x.startswith(('OPTIM', 'STEPPED'))]

    assert optim() == ['OPTIM Adam [False] False True True', 'STEPPED 7']
    assert optim('true') == ['OPTIM Adam [True] True True True', 'STEPPED 7']
    del saved['amsgrad']
    opt_file.write_text(json.dumps(saved))
    assert optim() == ['OPTIM Adam [True] True True True', 'STEPPED 7']


def test_adam_steps_all_parameters_at_once_with_the_same_weights(run_parlai, tmp_path):
    """The optimizer uses Adam's multi-tensor step (``foreach``), which ends in the very weights of
    PyTorch's default one-tensor loop on the CPU: the same model, trained from the same state on
    the same batches, is identical to the bit either way (``bench/mime_step_profile.py`` times
    both)."""
    model_file, _ = _train(run_parlai, tmp_path, 'empathy/mime', TINY)
    script = tmp_path / 'foreach.py'
    script.write_text(
        'import sys, torch\n'
        'from parlai.core.agents import create_agent_from_model_file\n'
        'TEXTS = [("I lost my wallet today", "oh no, did you find it?", "sad"),\n'
        '         ("we won the final!", "congratulations, that is great", "proud")] * 2\n'
        'def trained(foreach):\n'
        "    agent = create_agent_from_model_file(sys.argv[1], {'datatype': 'train'})\n"
        '    flags = {g["foreach"] for g in agent.optimizer.param_groups}\n'
        '    for group in agent.optimizer.param_groups:\n'
        '        group["foreach"] = foreach\n'
        '    torch.manual_seed(0)\n'
        '    for step in range(4):\n'
        '        batch = []\n'
        '        for text, label, emotion in TEXTS:\n'
        '            agent.reset()\n'
        '            batch.append(agent.observe({"text": text, "labels": [label], '
        '"emotion": emotion, "episode_done": True}))\n'
        '        agent.batch_act(batch)\n'
        '    return flags, {k: v.clone() for k, v in agent.model.state_dict().items()}\n'
        'flags, fast = trained(True)\n'
        '_, slow = trained(False)\n'
        'same = all(torch.equal(fast[k], slow[k]) for k in fast)\n'
        'moved = any(not torch.equal(fast[k], v) for k, v in '
        'create_agent_from_model_file(sys.argv[1]).model.state_dict().items())\n'
        "print('FOREACH', sorted(flags), same, moved)\n"
    )
    out = run_parlai('python', script, model_file).stdout.splitlines()
    assert [line for line in out if line.startswith('FOREACH')] == ['FOREACH [True] True True']


def test_an_agent_leaves_glibc_allocation_thresholds_alone(run_parlai, tmp_path):
    """Building a generator for training changes nothing process-wide in how glibc allocates:
    allocating and freeing two 42 MB tensors (above glibc's largest dynamic mmap threshold, 32 MiB)
    five times faults in fresh pages every time, before the agent is built and after (glibc maps
    them and gives them back each time). A user who wants them kept on the heap sets glibc's
    thresholds for the command (docs/models.md)."""
    model_file, _ = _train(run_parlai, tmp_path, 'empathy/mime', TINY)
    script = tmp_path / 'heap.py'
    script.write_text(
        'import resource, sys, torch\n'
        'from parlai.core.agents import create_agent_from_model_file\n'
        'def page_faults():\n'
        '    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n'
        '    for _ in range(5):\n'
        '        a = torch.ones(40 << 20, dtype=torch.uint8)\n'
        '        b = torch.ones(40 << 20, dtype=torch.uint8)\n'
        '        del a, b\n'
        '    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before\n'
        'page_faults()\n'
        'first = page_faults()\n'
        "create_agent_from_model_file(sys.argv[1], {'datatype': 'train'})\n"
        'page_faults()\n'
        "print('FAULTS', first > 20000, page_faults() > 20000)\n"
    )
    out = run_parlai('python', script, model_file).stdout.splitlines()
    assert [line for line in out if line.startswith('FAULTS')] == ['FAULTS True True']


def test_evaluation_encodes_each_context_once_for_both_polarities(run_parlai, tmp_path):
    """A labelled evaluation batch (what every validation runs) scores the gold and the predicted
    polarity and fills the reply's emotion fields from one context encoding, the fields equal to
    those of a fresh encoder pass."""
    model_file, _ = _train(run_parlai, tmp_path, 'empathy/mime', TINY)
    script = tmp_path / 'once.py'
    script.write_text(
        'import sys, torch\n'
        'from parlai.core.agents import create_agent_from_model_file\n'
        'from parlai_empathy.data.emotions import ED_EMOTIONS\n'
        "agent = create_agent_from_model_file(sys.argv[1], {'skip_generation': True, 'datatype': 'valid'})\n"
        'encoder = agent.core_model.encoder\n'
        'calls = []\n'
        'read = encoder.read_context\n'
        'encoder.read_context = lambda *a, **k: calls.append(1) or read(*a, **k)\n'
        'TEXTS = [("I lost my wallet today", "oh no, did you find it?", "sad"),\n'
        '         ("we won the final!", "congratulations, that is great", "proud")]\n'
        'batch = []\n'
        'for text, label, emotion in TEXTS:\n'
        '    agent.reset()\n'
        '    batch.append(agent.observe({"text": text, "eval_labels": [label], "emotion": emotion, '
        '"episode_done": True}))\n'
        'replies = agent.batch_act(batch)\n'
        'metrics = replies[0].get("metrics", {})\n'
        'vec = agent.batchify(batch)\n'
        'with torch.no_grad():\n'
        '    fresh = encoder(vec.text_vec, vec.get("speaker_vec")).aux.emotion_logits.argmax(-1).tolist()\n'
        "print('ONCE', len(calls) - 1, [r['predicted_emotion'] for r in replies] == [ED_EMOTIONS[i] for i in fresh],"
        " 'ppl_ex_gold' in metrics and 'ppl_ex' in metrics)\n"
    )
    out = run_parlai('python', script, model_file).stdout.splitlines()
    assert [line for line in out if line.startswith('ONCE')] == ['ONCE 1 True True']


def _sparse_training(flush_every, steps=2400):
    """A word table and output layer under Adam (foreach) where words 8-63 appear in the first 20
    steps only: their moments then decay into float32's subnormal range and stop there. Words
    8-15 come back for the last 100 steps. Returns the weights and the subnormal moment count."""
    import torch

    from parlai_empathy.agents.encoder_readout import flush_subnormal_moments

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(64, 8), torch.nn.Linear(8, 64))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-9, foreach=True)
    for step in range(steps):
        high = 64 if step < 20 else (16 if step >= steps - 100 else 8)
        words = torch.randint(0, high, (32,), generator=torch.Generator().manual_seed(step))
        loss = torch.nn.functional.cross_entropy(model[1](torch.tanh(model[0](words))), words.flip(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if flush_every and (step + 1) % flush_every == 0:
            flush_subnormal_moments(optimizer)
    left = flush_subnormal_moments(optimizer)  # counts (and flushes) what is subnormal at the end
    return [p.detach().clone() for p in model.parameters()], left


def test_flushing_subnormal_adam_moments_changes_no_weight():
    """Adam's moments of words absent from the batches end as subnormal float32 numbers (the CPU's
    slow path) unless flushed; flushed every 10 or 100 steps, the weights are the same to the
    bit, also after those words come back."""
    import torch

    kept, subnormal = _sparse_training(flush_every=0)
    assert subnormal > 200  # the premise: they stay subnormal without the flush
    for every in (10, 100):
        flushed, left = _sparse_training(flush_every=every)
        assert left < subnormal and all(torch.equal(a, b) for a, b in zip(kept, flushed))


def test_training_flushes_subnormal_moments_every_100_updates(run_parlai, tmp_path):
    """On the CPU a generator's ``update_params`` flushes Adam's subnormal moments after every
    100th update, not in between."""
    model_file, _ = _train(run_parlai, tmp_path, 'empathy/mime', TINY)
    script = tmp_path / 'flush.py'
    script.write_text(
        'import sys, torch\n'
        'from parlai.core.agents import create_agent_from_model_file\n'
        "agent = create_agent_from_model_file(sys.argv[1], {'datatype': 'train'})\n"
        'optimizer = getattr(agent.optimizer, "optimizer", agent.optimizer)\n'
        'state = next(iter(optimizer.state.values()))\n'
        'seen = []\n'
        'for update in range(agent._number_training_updates + 1, 202):\n'
        '    state["exp_avg_sq"].view(-1)[0] = 1e-40  # subnormal\n'
        '    optimizer.step = lambda *a, **k: None  # only the bookkeeping of a step\n'
        '    agent.update_params()\n'
        '    if float(state["exp_avg_sq"].view(-1)[0]) == 0.0:\n'
        '        seen.append(agent._number_training_updates)\n'
        "print('FLUSHED', seen)\n"
    )
    out = run_parlai('python', script, model_file).stdout.splitlines()
    assert [line for line in out if line.startswith('FLUSHED')] == ['FLUSHED [100, 200]']


def test_multitask_transformer_trains(run_parlai, tmp_path):
    _train(run_parlai, tmp_path, 'empathy/multitask_transformer', TINY[:6])
    _emotion_figures_agree(_final_valid(tmp_path), 2)


def test_interactive_shows_predicted_emotion_and_polarity(run_parlai, tmp_path):
    from parlai_empathy.agents.safety import EMPTY_INPUT_REPLY

    model_file, _ = _train(run_parlai, tmp_path, 'empathy/mime', TINY)
    # no --display-add-fields: the agent shows its emotion fields by default
    done = run_parlai(
        'interactive',
        '-mf',
        model_file,
        '--skip-generation',
        'false',
        input='I finally got the job I wanted!\n\nand I start on Monday\n[EXIT]\n',
    )
    assert 'Traceback' not in done.stderr
    polarities = [
        line.split('[emotion_polarity]:')[1].strip()
        for line in done.stdout.splitlines()
        if '[emotion_polarity]:' in line
    ]
    emotions = [
        line.split('[predicted_emotion]:')[1].strip()
        for line in done.stdout.splitlines()
        if '[predicted_emotion]:' in line
    ]
    # the empty turn is answered without the model, so without fields
    assert len(polarities) == len(emotions) == 2, done.stdout[-3000:]
    assert f'[Mime]: {EMPTY_INPUT_REPLY}' in done.stdout
    from parlai_empathy.data.emotions import ED_EMOTIONS, polarity

    assert set(emotions) <= set(ED_EMOTIONS)
    # each reply shows the polarity of its own predicted emotion (what mimicry followed)
    assert polarities == [polarity(emotion) for emotion in emotions]


def test_mime_multiprocessing_train_on_two_cpu_workers(run_parlai, tmp_path):
    """Stock ``multiprocessing_train`` with 2 gloo workers trains, evaluates on both and exits."""
    import json

    model_file = tmp_path / 'model'
    run_parlai(
        'build_dict',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-df',
        f'{model_file}.dict',
        '--dict-maxtokens',
        2000,
    )
    done = run_parlai(
        'multiprocessing_train',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-m',
        'empathy/mime',
        '-o',
        'empathy/mime',
        '-mf',
        model_file,
        '--distributed-world-size',
        2,
        '--max-train-steps',
        3,
        '-bs',
        4,
        '-vme',
        4,
        '--short-final-eval',
        'true',
        '--glove-init',
        'false',
        *TINY,
        timeout=180,  # a gloo teardown that hangs at exit must fail the test, not block the suite
    )
    log = done.stdout + done.stderr
    assert 'Distributed group initialized' in log and 'Traceback' not in log
    assert 'emo_acc' in log and model_file.exists()
    stats = json.loads((tmp_path / 'model.trainstats').read_text())
    assert stats['train_steps'] == 3
    # -vme 4 is split across the workers (2 each), and each evaluates one whole batch of 4: 8 gathered
    # examples (a single process would stop at 4) mean both workers evaluated and were synced
    assert stats['final_valid_report']['exs'] == 8 and stats['final_test_report']['exs'] == 8
    assert (tmp_path / 'model.valid').exists() and (tmp_path / 'model.test').exists()


def _sample_training(model_file):
    """``train_model`` arguments of a tiny MIME on the sample, plus the ``extra`` given."""

    def train_args(*extra):
        return [
            'train_model',
            '-t',
            'empathy_ed_clean',
            '--ed-datapath',
            'sample',
            '-m',
            'empathy/mime',
            '-o',
            'empathy/mime',
            '-mf',
            model_file,
            '-bs',
            8,
            '--dict-maxtokens',
            2000,
            '--glove-init',
            'false',
            *TINY,
            *extra,
        ]

    return train_args


def test_mime_resumes_after_sigkill(run_parlai, tmp_path, ed_dir):
    from resume_helpers import train_kill_resume

    model_file = tmp_path / 'model'
    env = dict(os.environ, PARLAI_EMPATHY_ED_DIR=ed_dir)
    log, done_updates, target = train_kill_resume(_sample_training(model_file), str(model_file), tmp_path, env)
    assert target == done_updates + 3 and 'loss_cls' in log


@pytest.mark.parametrize('victim', ['.checkpoint.opt', '.checkpoint.trainstats'])
def test_mime_resumes_after_a_kill_in_the_middle_of_saving(tmp_path, ed_dir, victim):
    """ParlAI writes a checkpoint's ``.opt`` and ``.trainstats`` in place: a run killed while
    writing one left a truncated file, and resuming stopped on it (a JSON error). Each goes
    through a temporary file now, so the last complete one is still there."""
    from resume_helpers import train_die_while_saving

    model_file = tmp_path / 'model'
    env = dict(os.environ, PARLAI_EMPATHY_ED_DIR=ed_dir)
    train_die_while_saving(_sample_training(model_file), str(model_file), f'{model_file}{victim}', tmp_path, env)
    # the temporary file the kill interrupted was removed by the resumed run's next save
    assert not [name for name in os.listdir(tmp_path) if '.tmp-' in name]


def test_flattened_contexts_keep_their_speakers():
    """``--ed-history-length N`` puts each example's context in one text (turns joined by the history
    delimiter, each example its own episode, so training batches are drawn example by example, as
    the reference's are); its speaker ids are those of the same turns kept as separate messages."""
    from parlai_empathy.agents.emotion_generator import history_turns, utterance_speakers
    from parlai_empathy.data.moel_text import moel_tokens

    turns = ['i got a new puppy today!', "that's great. what breed?", "a beagle. he's so cute."]
    vocab = {}

    def parse(text):
        return [vocab.setdefault(t, len(vocab)) for t in moel_tokens(text)]

    separate = [parse(t) for t in turns]
    joined = '\n'.join(turns)
    flat = history_turns([joined], [parse(joined)], parse, '\n', 0)
    assert flat == separate
    total = sum(len(v) for v in separate)
    assert utterance_speakers(flat, 0, total) == utterance_speakers(separate, 0, total)
    assert len(set(utterance_speakers(flat, 0, total))) == 2
    # a message whose pieces do not tokenize to its tokens stays one turn
    assert history_turns([joined], [parse(joined)[:-1]], parse, '\n', 0) == [parse(joined)[:-1]]


def test_a_resumed_run_keeps_its_validation_grid(run_parlai, tmp_path):
    """ParlAI 1.7.2 restores only the epoch of the last validation on resuming, so ``-vstep 3``
    would validate again at the resumed run's first update (5); the project's training loop restores the update count
    too, and the resumed run validates at 6, on the grid. The end of each run's schedule (4, then 7)
    is validated too: ParlAI checks its budget before its validation schedule, so the last updates
    of a fixed schedule would never be validated."""
    import json

    model_file = tmp_path / 'model'

    def train(steps):
        run_parlai(
            'train_model',
            '-t',
            'empathy_ed_clean',
            '--ed-datapath',
            'sample',
            '-m',
            'empathy/mime',
            '-mf',
            model_file,
            '--max-train-steps',
            steps,
            '-vstep',
            3,
            '-bs',
            4,
            '-vme',
            8,
            '--dict-maxtokens',
            2000,
            '--glove-init',
            'false',
            '--skip-generation',
            'true',
            *TINY,
        )
        return json.loads((tmp_path / 'model.trainstats').read_text())

    assert [v['train_steps'] for v in train(4)['valid_reports']] == [3, 4]
    assert [v['train_steps'] for v in train(7)['valid_reports']] == [3, 4, 6, 7]


def test_validations_before_count_validations_after_neither_select_nor_exhaust_patience(run_parlai, tmp_path):
    """``-vmt exs -vmm max -vp 1`` (cutoff out of reach): every validation has the same ``exs``, so only a first one is
    a new best and the second would stop training at once. With ``--count-validations-after 4`` the
    validations at 2 and 4 are not counted: training goes on, 6 is the first counted (a new best)
    and 8 runs out of patience, as the MIME reference's loop would (it counts after 10,000)."""
    import json

    model_file = tmp_path / 'model'

    def train(*extra):
        done = run_parlai(
            'train_model',
            '-t',
            'empathy_ed_clean',
            '--ed-datapath',
            'sample',
            '-m',
            'empathy/mime',
            '-mf',
            model_file,
            '--max-train-steps',
            20,
            '-vstep',
            2,
            '-vme',
            8,
            '-vmt',
            'exs',
            '-vmm',
            'max',
            '--validation-cutoff',
            1e9,
            '-vp',
            1,
            '-bs',
            4,
            '--dict-maxtokens',
            2000,
            '--glove-init',
            'false',
            '--skip-generation',
            'true',
            *TINY,
            *extra,
        )
        stats = json.loads((tmp_path / 'model.trainstats').read_text())
        return [v['train_steps'] for v in stats['valid_reports']], done.stdout + done.stderr

    steps, log = train('--count-validations-after', 4)
    assert steps == [2, 4, 6, 8] and 'ran out of patience' in log
    assert 'validation at 4 updates not counted' in log and 'validation at 6 updates not counted' not in log
    # an uncounted validation says what it does, and never announces a new best: only 6 does
    assert (
        'validation at 2 updates not counted for the best model or patience (--count-validations-after 4): '
        f'exs 8; its weights are saved to {model_file} until a counted validation replaces them'
    ) in log
    assert log.count('new best exs') == 1 and log.count('saving best valid model') == 1, log[-6000:]
    assert log.index('validation at 4 updates not counted') < log.index('new best exs')
    for name in os.listdir(tmp_path):
        if name.startswith('model'):
            os.remove(tmp_path / name)
    steps, log = train('--count-validations-after', 0)
    assert steps == [2, 4] and 'ran out of patience' in log


def test_a_run_resumed_under_another_validation_metric_recomputes_its_best(run_parlai, tmp_path):
    """Saved under ``-vmt exs -vmm max`` (best 8), resumed under ``-vmt ppl -vmm min``: ParlAI
    would compare the new PPLs with 8 (never beaten: the best stays 8 and no model is saved);
    the project's training loop recomputes the best from the earlier validations' ``ppl`` and says so."""
    import json

    model_file = tmp_path / 'model'

    def train(steps, *extra):
        done = run_parlai(
            'train_model',
            '-t',
            'empathy_ed_clean',
            '--ed-datapath',
            'sample',
            '-m',
            'empathy/mime',
            '-mf',
            model_file,
            '--max-train-steps',
            steps,
            '-vstep',
            3,
            '-bs',
            4,
            '-vme',
            8,
            '-vp',
            10,
            '--count-validations-after',
            0,
            '--dict-maxtokens',
            2000,
            '--glove-init',
            'false',
            '--skip-generation',
            'true',
            *TINY,
            *extra,
        )
        return json.loads((tmp_path / 'model.trainstats').read_text()), done.stdout + done.stderr

    stats, _ = train(4, '-vmt', 'exs', '-vmm', 'max', '--validation-cutoff', 1e9)
    assert stats['best_valid'] == 8
    stats, log = train(7, '-vmt', 'ppl', '-vmm', 'min')
    assert 'selected under another --validation-metric' in log
    ppls = [v['ppl'] for v in stats['valid_reports']]
    assert len(ppls) == 4 and stats['best_valid'] == min(ppls)  # 3, 4 (the end), 6, 7 (the end)


def test_a_run_killed_before_its_next_checkpoint_keeps_the_better_model_file(run_parlai, tmp_path):
    """Killed after a validation saved a new best model but before the next checkpoint (as
    ``--save-every-n-secs`` alone allows), a run resumes from the older checkpoint, whose best
    figure predates that model: ParlAI would let a worse repeated validation overwrite the model
    file, and a resumed run that never beats its best would end by saving its last weights over it.
    the project's training loop keeps the model file's best and the file itself (and our agents default to
    ``--save-after-valid``, which leaves no such gap), and the run's final reports are of that
    file."""
    import json
    import shutil

    model_file = tmp_path / 'model'
    aside = tmp_path / 'aside'
    aside.mkdir()

    def train(steps, *extra):
        done = run_parlai(
            'train_model',
            '-t',
            'empathy_ed_clean',
            '--ed-datapath',
            'sample',
            '-m',
            'empathy/mime',
            '-mf',
            model_file,
            '--max-train-steps',
            steps,
            '-vstep',
            3,
            '-bs',
            4,
            '-vme',
            8,
            '-vp',
            10,
            '-vmt',
            'ppl',
            '-vmm',
            'min',
            '--count-validations-after',
            0,
            '--dict-maxtokens',
            2000,
            '--glove-init',
            'false',
            '--skip-generation',
            'true',
            *TINY,
            *extra,
        )
        return json.loads((tmp_path / 'model.trainstats').read_text()), done.stdout + done.stderr

    stats, _ = train(4)  # validates at 3 and 4 (the end) and, by default, checkpoints right after
    assert json.loads((tmp_path / 'model.opt').read_text())['save_after_valid'] is True
    checkpoint = json.loads((tmp_path / 'model.checkpoint.trainstats').read_text())
    assert checkpoint['train_steps'] == 4 and checkpoint['best_valid'] == stats['best_valid']
    for name in os.listdir(tmp_path):
        if name.startswith('model.checkpoint'):
            shutil.copy(tmp_path / name, aside / name)
    # a run to 7 validates at 6 and 7; give the model file a best at 6 that no validation of this
    # tiny run reaches, as if that validation had been a new best
    stats, _ = train(7)
    better = dict(stats, train_steps=6, best_valid=stats['best_valid'] / 2)
    better['valid_reports'][-1] = dict(better['valid_reports'][-1], ppl=better['best_valid'], train_steps=6)
    (tmp_path / 'model.trainstats').write_text(json.dumps(better))
    for name in os.listdir(aside):  # ... and killed before the checkpoint after that validation
        shutil.copy(aside / name, tmp_path / name)
    weights = (tmp_path / 'model').read_bytes()
    stats, log = train(7)
    assert 'was saved at 6 updates with the best ppl' in log
    assert stats['best_valid'] == better['best_valid']  # the repeated validation at 6 did not replace it
    assert 'new best ppl' not in log.split('was saved at 6 updates')[1]
    assert (tmp_path / 'model').read_bytes() == weights  # not overwritten by the last weights
    # the final valid/test reports are of the model file, not of the checkpoint the run resumed from
    loads = [
        line.split('Loading existing model params from ')[1].split()[0]
        for line in log.splitlines()
        if 'Loading existing model params from ' in line
    ]
    assert loads[0] == f'{model_file}.checkpoint' and loads[-1] == str(model_file), loads


def _run_search(search_class):
    """Feed one scripted sequence of log-probabilities (vocabulary: 0 pad, 1 bos, 2 end, 3 'a', 4 'b')
    into a beam of 2 and return the reply and the steps taken."""
    import torch
    from parlai.core.torch_generator_agent import BeamSearch  # noqa: F401

    inf = float('-inf')
    search = search_class(
        2,
        min_length=0,
        block_ngram=-1,
        context_block_ngram=-1,
        length_penalty=0.0,
        padding_token=0,
        bos_token=1,
        eos_token=2,
        device='cpu',
    )
    steps = [
        # step 0: 'a' (-0.7) leads, the end token (-1.0) is second
        torch.tensor([[inf, inf, -1.0, -0.7, -3.0], [inf, inf, -1.0, -0.7, -3.0]]),
        # step 1: after 'a', 'b' (-0.2); after the end token, nothing likely (-1.0 at best)
        torch.tensor([[inf, inf, -2.0, -3.0, -0.2], [inf, inf, -1.0, -2.0, -2.0]]),
        # step 2: after 'a b', the end token (-0.3)
        torch.tensor([[inf, inf, -0.3, -2.0, -2.0], [inf, inf, -1.0, -2.0, -2.0]]),
        torch.tensor([[inf, inf, -0.1, -2.0, -2.0], [inf, inf, -0.1, -2.0, -2.0]]),
    ]
    for step, logprobs in enumerate(steps):
        if search.is_done():
            break
        search.advance(logprobs.clone(), step)
    tokens = search.get_rescored_finished()[0][0].tolist()
    return [t for t in tokens if t != 1], step


def test_reference_beam_stops_when_the_top_hypothesis_ends():
    """ParlAI's beam keeps the end token of step 0 as a finished reply (-1.0) and returns it over
    'a b' (-1.2), an empty reply; the reference's rule never returns to it: the search stops at the
    step where the top of the beam ends, 'a b' + end."""
    from parlai.core.torch_generator_agent import BeamSearch

    from parlai_empathy.agents.reference_beam import ReferenceBeamSearch

    assert _run_search(BeamSearch)[0] == [2]
    assert _run_search(ReferenceBeamSearch) == ([3, 4, 2], 3)


def test_bf16_autocasts_the_training_forward_only_and_saves_the_resolved_choice(run_parlai, tmp_path):
    """``--bf16 auto`` is saved as the true/false it resolved to on this machine; under ``--bf16
    true`` the training forward runs in bfloat16 while the weights stay float32, and evaluation
    (every perplexity, generation) runs in float32, so figures compare with float32 runs."""
    import json

    from parlai_empathy.models.precision import native_bf16

    model_file, log = _train(run_parlai, tmp_path, 'empathy/mime', TINY + ['--bf16', 'auto'])
    assert 'ppl_ex_gold' in log
    assert json.loads((tmp_path / 'model.opt').read_text())['bf16'] is native_bf16()
    script = tmp_path / 'dtypes.py'
    script.write_text(
        'import sys\n'
        'from parlai.core.agents import create_agent_from_model_file\n'
        "agent = create_agent_from_model_file(sys.argv[1], {'datatype': 'train', 'bf16': True})\n"
        'seen = []\n'
        'agent.core_model.output.register_forward_hook(lambda m, i, out: seen.append(str(out.dtype)))\n'
        'obs = {"text": "my dog died", "labels": ["i am so sorry"], "emotion": "sad", "episode_done": True}\n'
        'agent.batch_act([agent.observe(dict(obs))])\n'
        "print('TRAIN', seen[-1], {str(p.dtype) for p in agent.model.parameters()})\n"
        'agent.reset()\n'
        "obs['eval_labels'] = obs.pop('labels')\n"
        'agent.batch_act([agent.observe(dict(obs))])\n'
        "print('EVAL', seen[-1])\n"
    )
    out = [x for x in run_parlai('python', script, model_file).stdout.splitlines() if x.startswith(('TRAIN', 'EVAL'))]
    assert out == ["TRAIN torch.bfloat16 {'torch.float32'}", 'EVAL torch.float32']
