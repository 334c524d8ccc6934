"""parlai_empathy.compat: the version shims ParlAI 1.7.2 needs on torch 2.13 / numpy 2 / setuptools>=81."""
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

    compat.install()
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
