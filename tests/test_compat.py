"""parlai_empathy.compat repairs ParlAI 1.7.2 for torch 2.13 / numpy 2 / setuptools>=81."""
import subprocess
import sys
import textwrap

import numpy as np
import torch

from parlai_empathy import compat


def _run(code):
    done = subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_reduce_on_plateau_works_in_a_fresh_process():
    """The .pth start-up hook repairs ParlAI's scheduler module as soon as it is imported."""
    out = _run(
        """
        import torch
        from parlai.nn.lr_scheduler import ReduceOnPlateauLRScheduler
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        sched = ReduceOnPlateauLRScheduler(opt, patience=0, decay=0.5, warmup_updates=0, warmup_rate=1e-4)
        for loss in (1.0, 2.0, 3.0):
            sched.valid_step({'loss': loss})
        print(opt.param_groups[0]['lr'])
        """
    )
    assert float(out.strip()) < 1.0  # it really decayed


def test_torch_and_numpy_themselves_are_untouched():
    import parlai.core.dict
    import parlai.nn.lr_scheduler

    compat.apply()
    assert 'verbose' not in torch.optim.lr_scheduler.ReduceLROnPlateau.__init__.__code__.co_varnames
    assert not hasattr(np, 'int')
    assert parlai.core.dict.np.int is int
    assert parlai.nn.lr_scheduler.optim.lr_scheduler.ReduceLROnPlateau is not torch.optim.lr_scheduler.ReduceLROnPlateau


def test_dictionary_txt2vec_to_ndarray():
    from parlai.core.dict import DictionaryAgent
    from parlai.core.params import ParlaiParser

    parser = ParlaiParser(False, False)
    DictionaryAgent.add_cmdline_args(parser)
    d = DictionaryAgent(parser.parse_args([]))
    d.add_to_dict(['i', 'feel', 'sad'])
    vec = d.txt2vec('i feel sad', vec_type=np.ndarray)
    assert isinstance(vec, np.ndarray) and vec.tolist() == [d['i'], d['feel'], d['sad']]


def test_pkg_resources_stand_in_when_setuptools_has_none():
    out = _run(
        """
        import sys
        sys.modules['pkg_resources'] = None  # what setuptools>=81 looks like
        from parlai_empathy import compat
        compat.ensure_pkg_resources()
        import pkg_resources
        assert 'stand-in' in pkg_resources.__doc__
        import parlai.core.opt
        print(pkg_resources.resource_exists('parlai', 'opt_presets/docs.py'),
              pkg_resources.resource_exists('parlai', 'opt_presets/nope.opt'))
        print(pkg_resources.resource_filename('parlai', 'opt_presets/docs.py'))
        """
    )
    exists, missing, path = out.split()
    assert (exists, missing) == ('True', 'False') and path.endswith('opt_presets/docs.py')


def test_replay_validations_follows_train_loop_bookkeeping():
    from parlai_empathy.compat import replay_validations

    reports = [{'train_steps': s, 'ppl': p, 'acc': a}
               for s, p, a in [(1000, 50.0, 0.1), (2000, 40.0, 0.3), (3000, 41.0, 0.2), (4000, 42.0, 0.25)]]
    assert replay_validations(reports, 'ppl', -1) == (40.0, 2)
    assert replay_validations(reports, 'acc', 1) == (0.3, 2)
    # --count-validations-after: validations at or before it start the bookkeeping afresh
    assert replay_validations(reports, 'ppl', -1, count_after=2000) == (41.0, 1)
    assert replay_validations(reports, 'ppl', -1, count_after=4000) == (None, 0)
    assert replay_validations(reports + [{'train_steps': 5000}], 'ppl', -1) is None


def test_seed_fixes_the_initial_weights_too(run_parlai, tmp_path):
    """``--seed`` is set before the model is built (ParlAI 1.7.2 seeds after), so two runs with
    the same seed train the same weights and another seed trains others."""
    from parlai_empathy.safe_loading import load_checkpoint

    def weights(name, seed):
        model_file = tmp_path / name / 'model'
        run_parlai('train_model', '-t', 'empathy_ed_clean', '--ed-datapath', 'sample', '-m', 'empathy/mime',
                   '-mf', model_file, '--embedding-size', 16, '--attention-size', 8, '--ffn-size', 16,
                   '--latent-size', 8, '--n-heads', 2, '--glove-init', 'false', '-bs', 4, '--max-train-steps', 2,
                   '-vme', 8, '--short-final-eval', 'true', '--skip-generation', 'true', '--seed', seed)
        return load_checkpoint(str(model_file))['model']

    first, again, other = weights('a', 5), weights('b', 5), weights('c', 6)
    assert first.keys() == again.keys() == other.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)


def test_a_schedule_that_ends_by_its_linear_learning_rate_is_validated_at_its_end(run_parlai, tmp_path):
    """ParlAI's linear schedule ends training by an exception out of the world's parley, before the
    loop's budget check and its validation: the last stretch was trained and thrown away (the model
    stayed the last validated one). Its end is validated too, and a better end becomes the model."""
    model_file = tmp_path / 'model'
    done = run_parlai('train_model', '-t', 'empathy_ed_clean', '--ed-datapath', 'sample', '-m', 'empathy/mime',
                      '-mf', model_file, '--embedding-size', 16, '--attention-size', 8, '--ffn-size', 16,
                      '--latent-size', 8, '--n-heads', 2, '--glove-init', 'false', '-bs', 4, '-lr', 1e-3,
                      '--lr-scheduler', 'linear', '--warmup-updates', 0, '--max-train-steps', 6, '-vstep', 4,
                      '-vme', 8, '-vmt', 'ppl', '-vmm', 'min', '--short-final-eval', 'true',
                      '--skip-generation', 'true')
    log = done.stdout + done.stderr
    assert 'End of Linear LR Schedule' in log
    assert 'the training schedule ends at 6 updates: validating its last weights' in log
    import json

    stats = json.loads((tmp_path / 'model.trainstats').read_text())
    assert [report['total_train_updates'] for report in stats['valid_reports']] == [4, 6]
