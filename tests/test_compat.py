"""parlai_empathy.integration.compat: the version shims ParlAI 1.7.2 needs on torch 2.13 / numpy 2 / setuptools>=81."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from parlai_empathy.integration import compat


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
        from parlai_empathy.integration import compat
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


def test_crowd_patches_refuse_a_file_they_were_not_made_for():
    from parlai_empathy.integration import compat

    upstream = 'x = 1\n    task: TaskRunArgs = TaskRunArgs()\n'
    patched = compat.patch_text(upstream, compat.CROWD_SOURCE_PATCHES['mephisto.operations.hydra_config'][:1], 'f.py')
    assert 'field(default_factory=TaskRunArgs)' in patched
    with pytest.raises(compat.CrowdVersionError, match=r'f.py: expected the upstream line hydra_config.py:39'):
        compat.patch_text(upstream, compat.CROWD_SOURCE_PATCHES['mephisto.operations.hydra_config'], 'f.py')


def test_a_process_that_runs_no_crowd_command_gets_no_mephisto_patches():
    import subprocess
    import sys

    code = (
        'import sys, parlai.core.params; from parlai_empathy.integration import compat; '
        'print(any(isinstance(f, compat._PatchSourceOnImport) for f in sys.meta_path))'
    )
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == 'False', done.stderr[-2000:]
