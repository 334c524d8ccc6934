"""-m empathy/hf_lm: only safetensors or GGUF weights are opened, and the gold reply's likelihood
does not depend on how a batch is padded."""

import os

import pytest

from conftest import require_llm
from parlai_empathy.models import hf_lm


@pytest.mark.parametrize('name', ['pytorch_model.bin', 'model.pt', 'weights.pth', 'model.ckpt', 'x.pkl'])
def test_a_folder_with_only_pickled_weights_is_refused_unopened(tmp_path, name):
    (tmp_path / 'config.json').write_text('{"model_type": "llama"}')
    (tmp_path / name).write_bytes(b'\x80\x02cposix\nsystem\n')  # a pickle: never opened
    with pytest.raises(hf_lm.HfWeightsRefused, match=r'only pickled weights .*opening a pickle can run code'):
        hf_lm.resolve(str(tmp_path))
    with pytest.raises(hf_lm.HfWeightsRefused, match=r'a pickle'):
        hf_lm.resolve(str(tmp_path / name))


def test_a_folder_without_weights_is_refused_and_safetensors_pass(tmp_path):
    (tmp_path / 'config.json').write_text('{}')
    with pytest.raises(hf_lm.HfWeightsRefused, match='no safetensors or GGUF weights'):
        hf_lm.resolve(str(tmp_path))
    (tmp_path / 'model.safetensors').write_bytes(b'')
    (tmp_path / 'pytorch_model.bin').write_bytes(b'')
    assert hf_lm.resolve(str(tmp_path)) == (str(tmp_path), None)


def test_a_missing_gguf_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r'--hf-model .*x.gguf: no such file'):
        hf_lm.resolve(str(tmp_path / 'x.gguf'))


@pytest.fixture(scope='module')
def smollm2():
    require_llm()
    return hf_lm.HfLm.load(hf_lm.HfLmConfig(hf_micro_batch=3))


def test_smollm2_prompt_and_likelihood_do_not_depend_on_the_batch(smollm2):
    turns = [
        [('user', 'I passed my driving test!')],
        [('user', 'My dog died.'), ('assistant', 'Oh no, I am so sorry.'), ('user', 'I miss him a lot.')],
        [('user', 'Someone stole my bike from the garage last night and I am furious.')],
    ]
    golds = ['Congratulations!', 'That must be hard _comma_ he was family.', 'That is awful.']
    together = smollm2.run(turns, golds, generate=False)
    alone = [smollm2.run([t], [g], generate=False)[0] for t, g in zip(turns, golds)]
    for a, b, gold in zip(together, alone, golds):
        assert a.nll_reply == pytest.approx(b.nll_reply, rel=1e-4) and a.nll_end == pytest.approx(b.nll_end, rel=1e-4)
        assert a.reply is None and gold not in a.prompt
        assert a.prompt.startswith('<|im_start|>system') and a.prompt.endswith('<|im_start|>assistant\n')
    assert together[1].prompt.count('<|im_start|>user') == 2 and 'Oh no, I am so sorry.' in together[1].prompt
    assert os.path.basename(hf_lm.smollm2_gguf()) == hf_lm.SMOLLM2_FILE


def test_world_log_rows_keep_the_per_word_parts_and_the_prompt(tmp_path):
    """A reply's ``ppl_word`` and ``nll_end`` become ``nll_reply``/``words``/``nll_end`` of its row,
    and the rows give the corpus per-word PPL exactly."""
    import json
    import math

    from parlai_empathy.evidence import artifacts as evidence
    from parlai_empathy.leaderboard.worldlogs import generation_rows

    golds = ["I can't _comma_ sorry.", 'Great news!']  # 7 and 3 words: I can ' t , sorry .
    nll_reply, nll_end, tokens = [6.0, 1.5], [2.0, 0.5], [5, 3]
    pairs = [
        [
            {'conv_id': 'c', 'turn': i + 2, 'eval_labels': [g]},
            {
                'text': 'ok',
                'hf_prompt': f'<p{i}>',
                'metrics': {
                    'loss': (nll_reply[i] + nll_end[i]) / tokens[i],
                    'llen': tokens[i],
                    'nll_end': nll_end[i],
                    'ppl_word': math.exp(nll_reply[i] / [7, 3][i]),
                },
            },
        ]
        for i, g in enumerate(golds)
    ]
    logs = tmp_path / 'logs.jsonl'
    logs.write_text(json.dumps({'dialog': pairs}) + '\n')
    rows = generation_rows(str(logs))
    assert [r['words'] for r in rows] == [7, 3] and [r['prompt'] for r in rows] == ['<p0>', '<p1>']
    assert [r['nll_reply'] for r in rows] == pytest.approx(nll_reply)
    assert [r['nll_end'] for r in rows] == pytest.approx(nll_end)
    assert [r['nll'] for r in rows] == pytest.approx([8.0, 2.0])
    assert evidence.recompute(rows)['ppl_word'] == pytest.approx(math.exp(7.5 / 10))
