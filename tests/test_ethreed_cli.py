"""``-m empathy/ethreed`` through the real ``parlai`` CLI (needs ``make reinstall``).

One tiny model on the embedded real ED sample: listener labels from a real tag cache (the
emotions tagging machinery run with a tiny random ED 32-way classifier), training SIGKILLed
after a checkpoint and resumed, then eval_model with generation, a chat with a single
utterance and an empty turn, and ``parlai interactive`` with piped input. Also: a plain
``-t ... -m empathy/ethreed -mf ...`` run saves the paper's settings, the learning rate follows
the reference's milestones, and an out-of-vocabulary word of the user's is copied into the reply.
"""

import json
import os
import shutil
import subprocess

import pytest

import word_table_probe
from parlai_empathy.data.ed_source import sample_dir
from parlai_empathy.data.emotions import ED_EMOTIONS
from resume_helpers import train_kill_resume
from test_emotions_support import make_tiny_bert, make_tiny_classifier

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESET = os.path.join(REPO, 'opt_presets', 'empathy', 'ethreed.opt')
from resume_helpers import PARLAI  # noqa: E402

TINY = [
    '--hidden-size',
    16,
    '--embedding-size',
    16,
    '--dict-maxtokens',
    1500,
    '-bs',
    4,
    '-vme',
    12,
    '--short-final-eval',
    'true',
    '--validation-every-n-epochs',
    -1,
]


@pytest.fixture(scope='module')
def ed32_tagged(tmp_path_factory):
    """A complete tag cache of the sample by an ED 32-way (single-label) classifier."""
    base = tmp_path_factory.mktemp('ed32')
    bert = make_tiny_bert(str(base / 'bert'))
    model_file = make_tiny_classifier(str(base / 'clf' / 'model'), bert, ED_EMOTIONS, multilabel=False)
    # the one command that produces listener labels, as a user runs it
    done = subprocess.run(
        [
            PARLAI,
            'empathy_tag_ed',
            '-mf',
            model_file,
            '--ed-datapath',
            'sample',
            '--tag-cache-dir',
            str(base / 'cache'),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, HF_HUB_OFFLINE='1'),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert 'cache complete' in done.stdout
    return {
        'classifier': model_file,
        'root': str(base / 'cache'),
        'folder': done.stdout.split('tag cache: ', 1)[1].split()[0],
    }


@pytest.fixture(scope='module')
def listener_tags(ed32_tagged):
    return ed32_tagged['folder']


def train_args(model_file, tags, *extra):
    return [
        'train_model',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-m',
        'empathy/ethreed',
        '-o',
        PRESET,
        '-mf',
        model_file,
        '--listener-emotions',
        tags,
        *TINY,
        *extra,
    ]


@pytest.fixture(scope='module')
def trained(tmp_path_factory, listener_tags, ed_dir):
    """Train, SIGKILL once a checkpoint is saved, resume to a few more updates."""
    folder = tmp_path_factory.mktemp('ethreed')
    model_file = str(folder / 'model')
    env = dict(os.environ, PARLAI_EMPATHY_ED_DIR=ed_dir, HF_HUB_OFFLINE='1')
    log, done_updates, target = train_kill_resume(
        lambda *extra: train_args(model_file, listener_tags, *extra), model_file, folder, env
    )
    return model_file, log, done_updates, target


def test_resumes_after_sigkill_and_reports_losses(trained):
    model_file, log, done_updates, target = trained
    for metric in ('emo_acc', 'loss_emo', 'loss_kl', 'loss_cov', 'ppl', 'ppl_ex'):
        assert metric in log


def test_eval_model_generates_and_logs_predicted_emotions(trained, run_parlai, tmp_path):
    model_file = trained[0]
    world_log = tmp_path / 'world.jsonl'
    done = run_parlai(
        'eval_model',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-dt',
        'test',
        '-mf',
        model_file,
        '--skip-generation',
        'false',
        '--num-examples',
        6,
        '--world-logs',
        world_log,
        '-bs',
        3,
    )
    log = done.stdout + done.stderr
    for metric in ('emo_acc', 'ppl', 'ppl_ex', 'dist-1', 'dist-2_nltk'):
        assert metric in log
    with open(world_log) as f:
        replies = [turn[1] for line in f for turn in json.loads(line)['dialog']]
    assert len(replies) == 6
    for reply in replies:
        assert reply['predicted_emotion'] in ED_EMOTIONS
        assert reply['predicted_listener_emotion'] in ED_EMOTIONS
        assert max(reply['emotion_scores'], key=reply['emotion_scores'].get) == reply['predicted_emotion']


def test_interactive_answers_a_single_utterance_and_an_empty_turn(trained, run_parlai, tmp_path):
    script = tmp_path / 'chat.py'
    script.write_text(
        'import sys\n'
        'from parlai.core.agents import create_agent_from_model_file\n'
        "agent = create_agent_from_model_file(sys.argv[1], {'skip_generation': False,"
        " 'interactive_mode': True, 'beam_size': 2, 'inference': 'beam'})\n"
        "agent.observe({'text': 'I passed my driving test today!', 'episode_done': False})\n"
        'reply = agent.act()\n'
        "print('REPLY', reply['predicted_emotion'], reply['predicted_listener_emotion'], bool(reply['text'].strip()))\n"
        "agent.observe({'text': '', 'episode_done': False})\n"
        "print('EMPTY', agent.act()['text'])\n"
        '# outside chat (an evaluation example) the model answers an empty turn from its dialogue state\n'
        "agent = create_agent_from_model_file(sys.argv[1], {'skip_generation': False, 'inference': 'greedy'})\n"
        "agent.observe({'text': '', 'episode_done': True})\n"
        'reply = agent.act()\n'
        "print('REPLY', reply['predicted_emotion'], reply['predicted_listener_emotion'], bool(reply['text'].strip()))\n"
    )
    done = run_parlai('python', script, trained[0])
    replies = [line.split() for line in done.stdout.splitlines() if line.startswith('REPLY')]
    assert len(replies) == 2, done.stdout[-3000:]
    for _, speaker, planned, has_text in replies:
        assert speaker in ED_EMOTIONS and planned in ED_EMOTIONS and has_text == 'True'
    from parlai_empathy.agents.safety import EMPTY_INPUT_REPLY

    assert f'EMPTY {EMPTY_INPUT_REPLY}' in done.stdout.splitlines()


def test_listener_labels_named_by_their_classifier(ed32_tagged, run_parlai, tmp_path):
    """``--listener-emotions`` also takes the classifier that tagged ED: its cache is found."""
    clf, root = ed32_tagged['classifier'], ed32_tagged['root']
    done = run_parlai(*train_args(tmp_path / 'model', clf, '--tag-cache-dir', root, '--max-train-steps', 2))
    assert 'loss_emo' in done.stdout + done.stderr
    # the same classifier, but no tags under another root: the error says what to run
    done = run_parlai(*train_args(tmp_path / 'other', clf, '--tag-cache-dir', tmp_path / 'empty'), check=False)
    assert done.returncode != 0 and 'empathy_tag_ed' in done.stderr


def test_missing_listener_labels_say_what_to_run(run_parlai, tmp_path):
    done = run_parlai(*train_args(tmp_path / 'model', tmp_path / 'no-such-cache'), check=False)
    assert done.returncode != 0 and 'empathy_tag_ed' in done.stderr


def test_exported_labels_train_ethreed_without_the_cache(ed32_tagged, run_parlai, tmp_path):
    """``parlai empathy_tag_ed --export-labels DIR`` writes the portable label folder (the tag
    cache is reused, not recomputed); ETHREED trains on it alone, and refuses it for other text."""
    labels = tmp_path / 'labels'
    done = run_parlai(
        'empathy_tag_ed',
        '-mf',
        ed32_tagged['classifier'],
        '--ed-datapath',
        'sample',
        '--tag-cache-dir',
        ed32_tagged['root'],
        '--export-labels',
        labels,
    )
    assert 'tagged now' in done.stdout and ' 0 tagged now' in done.stdout and 'listener labels:' in done.stdout
    done = run_parlai(*train_args(tmp_path / 'model', labels, '--max-train-steps', 2))
    assert 'loss_emo' in done.stdout + done.stderr
    other = tmp_path / 'ed'
    shutil.copytree(sample_dir(), other)
    rows = (other / 'train.csv').read_text(encoding='utf-8').splitlines(keepends=True)
    fields = rows[2].split(',')
    fields[5] = 'Text that was never labelled.'
    rows[2] = ','.join(fields)
    (other / 'train.csv').write_text(''.join(rows), encoding='utf-8')
    args = train_args(tmp_path / 'other', labels, '--max-train-steps', 2)
    args[args.index('sample')] = other
    done = run_parlai(*args, check=False)
    assert done.returncode != 0
    assert f'train {fields[0]} utterance {fields[1]}: other text' in done.stderr


def test_multiprocessing_train_on_two_cpu_workers(run_parlai, tmp_path):
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
        1500,
    )
    done = run_parlai(
        'multiprocessing_train',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-m',
        'empathy/ethreed',
        '-o',
        PRESET,
        '-mf',
        model_file,
        '--listener-emotions',
        'none',
        '--glove-init',
        'false',
        '--distributed-world-size',
        2,
        '--max-train-steps',
        3,
        *TINY,
        timeout=180,
    )
    log = done.stdout + done.stderr
    assert 'Distributed group initialized' in log and 'Traceback' not in log
    assert 'emo_acc' in log and model_file.exists()


def test_interactive_cli_shows_the_tracked_and_the_planned_emotion(trained, run_parlai):
    done = run_parlai(
        'interactive', '-mf', trained[0], input='I passed my driving test today!\nThanks, I was so nervous.\n[EXIT]\n'
    )
    out = done.stdout
    speaker = [line.split(']:', 1)[1].strip() for line in out.splitlines() if '[predicted_emotion]:' in line]
    planned = [line.split(']:', 1)[1].strip() for line in out.splitlines() if '[predicted_listener_emotion]:' in line]
    replies = [line.split(']:', 1)[1].strip() for line in out.splitlines() if '[Ethreed]:' in line]
    assert len(speaker) == len(planned) == len(replies) == 2, out[-3000:]
    assert all(e in ED_EMOTIONS for e in speaker + planned) and all(replies)


def test_plain_training_run_saves_the_papers_settings(run_parlai, tmp_path):
    model_file = tmp_path / 'model'
    run_parlai(
        'train_model',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        'sample',
        '-m',
        'empathy/ethreed',
        '-mf',
        model_file,
        '--hidden-size',
        16,
        '--embedding-size',
        16,
        '--glove-init',
        'false',
        '--max-train-steps',
        2,
        '-vme',
        8,
        '--short-final-eval',
        'true',
    )
    with open(f'{model_file}.opt') as f:
        opt = json.load(f)
    expected = {
        # the listener labels of the li_ethreed/ed32_utterance row, shipped with the package
        'listener_emotions': 'ed32-utterance',
        'dict_tokenizer': 'ethreed',
        'dict_minfreq': 3,
        'dict_maxtokens': -1,
        'dropout': 0.5,
        'batchsize': 16,
        'optimizer': 'adam',
        'learningrate': 5e-4,
        'gradient_clip': 1.0,
        'lr_scheduler': 'fixed',
        'lr_scheduler_decay': 0.3,
        'lr_milestones': '4,5',
        'num_epochs': 7,
        'label_truncate': 40,
        'utterance_truncate': 40,
        'inference': 'greedy',
        'kl_weight': 1.0,
        'history_attention': 'simple',
        'train_experiencer_only': True,
        'validation_metric': 'ppl',
    }
    assert {key: opt.get(key) for key in expected} == expected
    with open(f'{model_file}.dict') as f:
        counts = [int(line.rstrip('\n').split('\t')[1]) for line in f]
    assert min(counts) >= 3  # every word seen at least 3 times in train


def test_learning_rate_drops_after_the_4th_and_the_5th_validation(run_parlai, tmp_path):
    script = tmp_path / 'schedule.py'
    script.write_text(
        'import sys\n'
        'from parlai.core.agents import create_agent\n'
        'from parlai.scripts.train_model import setup_args\n'
        "opt = setup_args().parse_args(['-t', 'empathy_ed_clean', '--ed-datapath', 'sample', '-m',"
        " 'empathy/ethreed', '-mf', sys.argv[1], '--listener-emotions', 'none', '--glove-init', 'false',"
        " '--hidden-size', '8', '--embedding-size', '8'])\n"
        'agent = create_agent(opt)\n'
        'for _ in range(6):\n'
        "    agent.receive_metrics({'ppl': 10.0, 'loss': 2.0})\n"
        "    print('LR', agent.optimizer.param_groups[0]['lr'])\n"
    )
    done = run_parlai('python', script, tmp_path / 'model')
    rates = [float(line.split()[1]) for line in done.stdout.splitlines() if line.startswith('LR ')]
    assert rates == pytest.approx([5e-4, 5e-4, 5e-4, 1.5e-4, 4.5e-5, 4.5e-5])


def test_a_word_outside_the_vocabulary_is_copied_into_the_reply_and_scored(trained, run_parlai, tmp_path):
    """The user's unknown word gets an id after the dictionary's; a model that copies writes the
    word itself in its reply, and a gold response with the word is scored against that id."""
    script = tmp_path / 'copy_word.py'
    script.write_text(
        'import sys, math, torch\n'
        'from parlai.core.agents import create_agent_from_model_file\n'
        "agent = create_agent_from_model_file(sys.argv[1], {'skip_generation': False, 'inference': 'greedy',"
        " 'interactive_mode': True})\n"
        'size = len(agent.dict)\n'
        "assert 'zyzzyvas' not in agent.dict.tok2ind\n"
        'with torch.no_grad():  # a decoder that always copies\n'
        '    agent.model.decoder.copy_switch.weight.zero_()\n'
        '    agent.model.decoder.copy_switch.bias.fill_(30.0)\n'
        "agent.observe({'text': 'zyzzyvas', 'episode_done': True})\n"
        "print('REPLY', agent.act()['text'])\n"
        'agent.reset()\n'
        "obs = agent.observe({'text': 'my zyzzyvas died', 'eval_labels': ['sorry about your zyzzyvas'],"
        " 'episode_done': True})\n"
        'batch = agent.batchify([obs])\n'
        "print('SOURCE', batch.source_tokens[0].tolist().count(size), 'LABEL', batch.label_ext[0].tolist().count(size),"
        " 'UNK', batch.label_vec[0].tolist().count(agent.dict[agent.dict.unk_token]))\n"
        'agent.model.eval()\n'
        'loss = agent.compute_loss(batch)\n'
        "print('LOSS', math.isfinite(float(loss)))\n"
    )
    done = run_parlai('python', script, trained[0])
    lines = {
        line.split()[0]: line.split()[1:] for line in done.stdout.splitlines() if line[:4] in ('REPL', 'SOUR', 'LOSS')
    }
    assert lines['REPLY'][0] == 'zyzzyvas', done.stdout[-2000:]
    assert lines['SOURCE'] == ['1', 'LABEL', '1', 'UNK', '1']  # the label's unknown word has the source's id
    assert lines['LOSS'] == ['True']


def test_conversation_labels_give_listener_turns_the_conversations_emotion(run_parlai, tmp_path):
    """``--listener-emotions conversation`` (the diagnostic upper bound): every L1 label of a
    batch, the listener's included, is the conversation's ED emotion."""
    script = tmp_path / 'labels.py'
    script.write_text(
        'import sys\n'
        'from parlai.core.agents import create_agent\n'
        'from parlai.core.teachers import create_task_agent_from_taskname\n'
        'from parlai.scripts.train_model import setup_args\n'
        'from parlai_empathy.data.emotions import emotion_to_id\n'
        "opt = setup_args().parse_args(['-t', 'empathy_ed_clean', '--ed-datapath', 'sample', '-m',"
        " 'empathy/ethreed', '-mf', sys.argv[1], '--listener-emotions', 'conversation',"
        " '--glove-init', 'false', '--hidden-size', '8', '--embedding-size', '8'])\n"
        'agent = create_agent(opt)\n'
        'teacher = create_task_agent_from_taskname(opt)[0]\n'
        'observed = []\n'
        'for _ in range(12):\n'
        '    observed.append(agent.observe(teacher.act()))\n'
        '    agent.reset()\n'
        'batch = agent.batchify(observed)\n'
        'gold = [emotion_to_id(o["emotion"]) for o in observed]\n'
        "print('RESPONSE', batch['response_labels'].tolist() == gold)\n"
        "print('ANSWERED', batch['answered_labels'].tolist() == gold)\n"
    )
    done = run_parlai('python', script, tmp_path / 'model')
    assert 'RESPONSE True' in done.stdout and 'ANSWERED True' in done.stdout, done.stdout[-2000:]


@pytest.mark.parametrize('extra, saved', [([], 'glove'), (['--glove-fill-std', '0.01'], 0.01)])
def test_glove_fill_std_sets_the_padded_columns_and_the_missing_words(run_parlai, tmp_path, extra, saved):
    """``--glove-fill-std``: with the offline 50-d vectors in a wider table, the columns beyond 50
    and the rows of words GloVe lacks start at N(0, std): by default (``glove``, the rule of the
    ETHREED rows) at the found GloVe values' own std, with ``0.01`` near zero. The found words'
    first 50 columns are their GloVe vectors either way."""
    script = tmp_path / 'table.py'
    script.write_text(
        'import sys\n'
        'from parlai.core.agents import create_agent\n'
        'from parlai.scripts.build_dict import build_dict\n'
        'from parlai.scripts.train_model import setup_args\n'
        "opt = setup_args().parse_args(['-t', 'empathy_ed_clean', '--ed-datapath', 'sample', '-m',"
        " 'empathy/ethreed', '-mf', sys.argv[1], '--listener-emotions', 'none', '--hidden-size', '8',"
        " '--embedding-size', '64'] + sys.argv[2:])\n"
        "opt['dict_file'] = sys.argv[1] + '.dict'\n"
        'build_dict(opt, skip_if_built=True)  # as train_model does before it builds the agent\n'
        'agent = create_agent(opt)\n'
        "print('SAVED', repr(agent.opt['glove_fill_std']))\n"
        + word_table_probe.PROBE
        + "print('PADDED', float(table[hit, 50:].std()))\n"
        "print('FOUND', int(hit.sum()), float((table[hit, :50] - matrix[hit, :50]).abs().max()))\n"
    )
    done = run_parlai('python', script, tmp_path / 'model', *extra)
    stats = word_table_probe.stats(done.stdout, ('SAVED', 'MISSING', 'PADDED', 'FOUND', 'GLOVESTD'))
    assert stats['SAVED'] == [repr(saved)]
    glove_std = float(stats['GLOVESTD'][0])
    expected = glove_std if saved == 'glove' else 0.01
    assert glove_std > 0.1  # GloVe's own std is far above 0.01
    assert 0.5 * expected < float(stats['PADDED'][0]) < 2 * expected
    assert int(stats['MISSING'][0]) > 3 and 0.5 * expected < float(stats['MISSING'][1]) < 2 * expected
    assert int(stats['FOUND'][0]) > 100 and float(stats['FOUND'][1]) == 0.0
