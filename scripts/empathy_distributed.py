"""``parlai distributed_train`` and ``parlai distributed_eval``: ParlAI's SLURM scripts as commands.

ParlAI 1.7.2 ships ``parlai/scripts/distributed_{train,eval}.py`` but registers neither, so only
``python -m parlai.scripts.distributed_train`` runs them. They are registered here under ParlAI's
own names and run ParlAI's code, with one addition: ``--distributed-world-size`` defaults to
SLURM's task count (``SLURM_NTASKS``), which ParlAI leaves to the caller (without it every task
waits for a world of unknown size). Run them under ``srun``, one task per GPU (or per CPU worker):

    srun -n 2 parlai distributed_train -t empathy_ed_clean -m empathy/mime -mf runs/mime/model --port 29511

On machines without CUDA, ``parlai_empathy.integration.cpu_distributed`` makes them use gloo on the CPU.
"""

import os

import parlai.scripts.distributed_eval as parlai_distributed_eval
import parlai.scripts.distributed_train as parlai_distributed_train
from parlai.core.script import register_script

from parlai_empathy.integration.commands import prepare


def world_size_from_slurm(opt) -> None:
    """Fill ``distributed_world_size`` from ``SLURM_NTASKS``; a given size must agree with it."""
    tasks = os.environ.get('SLURM_NTASKS')
    if tasks is None:
        raise RuntimeError('not inside a SLURM job step (no SLURM_NTASKS): run this command under srun')
    given = opt.get('distributed_world_size')
    if given is None:
        opt['distributed_world_size'] = int(tasks)
    elif int(given) != int(tasks):
        raise ValueError(
            f'--distributed-world-size {given} but SLURM started {tasks} tasks: every task '
            'would wait for workers that never come; leave the option out under srun'
        )


@register_script('distributed_train', hidden=True)
class DistributedTrain(parlai_distributed_train.DistributedTrain):
    @classmethod
    def setup_args(cls):
        return prepare(super().setup_args())  # each option listed once in --help

    def run(self):
        world_size_from_slurm(self.opt)
        return super().run()


@register_script('distributed_eval', hidden=True)
class DistributedEval(parlai_distributed_eval.DistributedEval):
    @classmethod
    def setup_args(cls):
        return prepare(super().setup_args())  # each option listed once in --help

    def run(self):
        world_size_from_slurm(self.opt)
        return super().run()
