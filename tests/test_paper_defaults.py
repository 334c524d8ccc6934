"""Plain ``-m <agent>`` is the paper's model and training setup.

Each agent is trained with nothing but ``-t``, ``-m`` and ``-mf`` (plus the embedded sample, a
two-step budget and a short final evaluation, which only bound the test) and the options saved with
the model are checked.
"""

import json

import pytest

MIME_SETUP = {
    'dict_tokenizer': 'moel',
    'optimizer': 'adam',
    'lr_scheduler': 'invsqrt',
    'warmup_updates': 8000,
    'invsqrt_lr_decay_gamma': 8000,
    'betas': [0.9, 0.98],
    'adam_eps': 1e-9,
    'gradient_clip': -1,
    'batchsize': 16,
    'train_experiencer_only': True,
    'label_smoothing': 0.1,
    'ffn_kernel': 3,
    'embedding_size': 300,
    'n_heads': 2,
    'attention_size': 40,
    'ffn_size': 50,
    'n_layers': 1,
    'validation_every_n_steps': 1000,
    'validation_patience': 3,
    'validation_metric': 'ppl_ex',
    'inference': 'beam',
    'beam_size': 5,
    'beam_length_penalty': 0.0,
    'max_response_length': 50,
    'embeddings_scale': True,
    'ffn_final_relu': True,
    'reference_tags': True,
    'amsgrad': False,
    'ed_history_length': 1000,
    'glove_fill_std': 0.01,
}
CASES = {
    'empathy/mime': (
        'empathy_ed_clean',
        [],
        dict(
            MIME_SETUP,
            latent_size=300,
            mimicry=True,
            emotion_grouping=True,
            stochastic=True,
            count_validations_after=10000,
            validation_metric='ppl_ex_gold',
        ),
    ),
    'empathy/multitask_transformer': ('empathy_ed_clean', [], dict(MIME_SETUP, count_validations_after=0)),
    'empathy/emotion_classifier': (
        'empathy_goemotions',
        ['--encoder', 'offline-minilm'],
        {
            'learningrate': 5e-5,
            'batchsize': 16,
            'num_epochs': 4,
            'max_length': 50,
            'optimizer': 'adamw',
            'multilabel_threshold': 0.3,
        },
    ),
    # the reference's BERT fine-tuning (--bert-model: its bert-base-cased needs the hub; offline-minilm
    # is the smallest encoder that runs offline)
    'empathy/bert_ranker': (
        'empathy_ed_clean',
        ['--bert-model', 'offline-minilm'],
        {
            'share_encoders': False,
            'pooling': 'cls',
            'similarity': 'dot',
            'projection_dim': 300,
            'add_special_tokens': False,
            'truncate_side': 'right',
            'turn_separator': '[unused1]',
            'context_turns': 4,
            'text_truncate': 100,
            'label_truncate': 100,
            'freeze_word_embeddings': True,
            'train_experiencer_only': False,
            'candidates': 'batch',
            'eval_candidates': 'batch',
            'optimizer': 'adamax',
            'learningrate': 1e-5,
            'lr_scheduler': 'none',
            'gradient_clip': -1,
            'batchsize': 256,
            'num_epochs': 100,
            'validation_every_n_epochs': 1,
            'validation_metric': 'loss',
            'validation_metric_mode': 'min',
            'validation_patience': 10,
            'bf16': False,
        },
    ),
}


@pytest.mark.parametrize('model', list(CASES))
def test_plain_agent_trains_with_the_papers_setup(model, run_parlai, tmp_path, goemotions_dir):
    task, needed, expected = CASES[model]
    model_file = tmp_path / 'model'
    run_parlai(
        'train_model',
        '-t',
        task,
        '-m',
        model,
        '-mf',
        model_file,
        *needed,
        '--ed-datapath' if task.startswith('empathy_ed') else '--goemotions-datapath',
        'sample' if task.startswith('empathy_ed') else goemotions_dir,
        '--max-train-steps',
        2,
        '-vme',
        16,
        '--short-final-eval',
        'true',
        timeout=900,
    )
    saved = json.loads((tmp_path / 'model.opt').read_text())
    for key, value in expected.items():
        got = saved[key]
        assert got == pytest.approx(value) if isinstance(value, float) else got == value, (key, got, value)
    assert not saved.get('init_opt'), 'no preset was used'
    # not the paper's: a checkpoint after every validation, so a killed run resumes with its best
    assert saved['save_after_valid'] is True
