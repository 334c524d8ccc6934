"""-m empathy/hf_lm: only safetensors or GGUF weights are opened, and the gold reply's likelihood
does not depend on how a batch is padded."""
import os

import pytest

from parlai_empathy.models import hf_lm
from conftest import require_llm


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
    turns = [[('user', 'I passed my driving test!')],
             [('user', 'My dog died.'), ('assistant', 'Oh no, I am so sorry.'), ('user', 'I miss him a lot.')],
             [('user', 'Someone stole my bike from the garage last night and I am furious.')]]
    golds = ['Congratulations!', 'That must be hard _comma_ he was family.', 'That is awful.']
    together = smollm2.run(turns, golds, generate=False)
    alone = [smollm2.run([t], [g], generate=False)[0] for t, g in zip(turns, golds)]
    for a, b, gold in zip(together, alone, golds):
        assert a.nll_reply == pytest.approx(b.nll_reply, rel=1e-4) and a.nll_end == pytest.approx(b.nll_end, rel=1e-4)
        assert a.reply is None and gold not in a.prompt
        assert a.prompt.startswith('<|im_start|>system') and a.prompt.endswith('<|im_start|>assistant\n')
    assert together[1].prompt.count('<|im_start|>user') == 2 and 'Oh no, I am so sorry.' in together[1].prompt
    assert os.path.basename(hf_lm.smollm2_gguf()) == hf_lm.SMOLLM2_FILE
