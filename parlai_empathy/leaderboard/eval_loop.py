"""ParlAI's evaluation loop, as ``eval_model`` runs it, with a progress bar over examples; sharded
over several processes as ``parlai multiprocessing_eval`` runs it.

:func:`run_eval` returns ParlAI's report and leaves the world logs the evidence is read from
(:mod:`parlai_empathy.leaderboard.worldlogs`); :func:`eval_command` is the ParlAI command that
evaluates the same way, recorded beside each figure.
"""

import os
import shlex
import shutil
from typing import List, Optional


def run_eval(opt_args: List[str], world_logs: Optional[str], desc: str, progress: bool, workers: int = 1):
    """ParlAI's eval loop (as in ``eval_model``) with a progress bar over examples; ``workers`` > 1
    shards it over that many processes (as ``parlai multiprocessing_eval`` does, see
    :func:`_sharded_eval`)."""
    if workers > 1:
        return _sharded_eval(opt_args, world_logs, desc, progress, workers)
    return _eval_loop(_eval_opt(opt_args, world_logs), world_logs, desc, progress)


def _eval_opt(opt_args: List[str], world_logs: Optional[str]):
    """``eval_model``'s options for these arguments (and world logs)."""
    from parlai.scripts.eval_model import setup_args

    return setup_args().parse_args(list(opt_args) + (['--world-logs', world_logs] if world_logs else []))


def eval_command(args: List[str], workers: int = 1) -> str:
    """The ParlAI command that evaluates like :func:`run_eval` with these arguments."""
    if workers > 1:
        return 'parlai multiprocessing_eval ' + shlex.join(['--distributed-world-size', str(workers)] + list(args))
    return 'parlai eval_model ' + shlex.join(args)


def _shard_logs(world_logs: str, rank: int) -> str:
    base, extension = os.path.splitext(world_logs)
    return f'{base}_{rank}{extension}'


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _sharded_eval(opt_args: List[str], world_logs: Optional[str], desc: str, progress: bool, workers: int):
    """The evaluation sharded over ``workers`` processes: this one (rank 0) and ``workers - 1``
    spawned ones, as ``parlai multiprocessing_eval --distributed-world-size N`` runs it (ParlAI's
    teachers give rank r the episodes i with i % N == r in evaluation; the reports are summed, so
    counts, accuracies, BLEU and corpus Distinct-n equal the 1-worker figures and float sums such as
    PPL agree to rounding: tests/test_sharded_eval.py). Each rank writes its own world log; rank 0
    joins them into ``world_logs`` in rank order (so the examples are not in the 1-worker order)."""
    import torch.multiprocessing

    port = _free_port()
    spawned = torch.multiprocessing.start_processes(
        _eval_shard,
        args=(opt_args, world_logs, desc, False, workers, port, 1),
        nprocs=workers - 1,
        join=False,
        start_method='spawn',
    )
    try:
        report = _eval_shard(0, opt_args, world_logs, desc, progress, workers, port, 0)
        spawned.join()
    except BaseException:
        for process in spawned.processes:
            if process.is_alive():
                process.terminate()
        raise
    if world_logs:
        with open(world_logs, 'w', encoding='utf-8') as out:
            for rank in range(workers):
                with open(_shard_logs(world_logs, rank), encoding='utf-8') as f:
                    shutil.copyfileobj(f, out)
                os.remove(_shard_logs(world_logs, rank))
    return report


def _eval_shard(
    index: int,
    opt_args: List[str],
    world_logs: Optional[str],
    desc: str,
    progress: bool,
    workers: int,
    port: int,
    rank_offset: int,
):
    """One rank of :func:`_sharded_eval` (``index + rank_offset``; spawned ranks start at 1)."""
    from parlai.core.metrics import aggregate_unnamed_reports
    from parlai.utils import distributed as distributed_utils

    rank = index + rank_offset
    logs = _shard_logs(world_logs, rank) if world_logs else None
    opt = _eval_opt(opt_args, logs)
    opt['distributed_world_size'] = workers
    with distributed_utils.distributed_context(index, opt, rank_offset, init_method=f'tcp://localhost:{port}') as opt:
        opt['multiprocessing'] = True
        report = _eval_loop(opt, logs, f'{desc} (rank 0 of {workers})', progress)
        return aggregate_unnamed_reports(distributed_utils.all_gather_list(report))


def _eval_loop(opt, world_logs: Optional[str], desc: str, progress: bool):
    from parlai.core.agents import create_agent
    from parlai.core.worlds import create_task
    from parlai.utils.world_logging import WorldLogger
    from tqdm import tqdm

    agent = create_agent(opt, requireModelExists=True)
    world_logger = WorldLogger(opt) if world_logs else None
    world = create_task(opt, agent)
    total = world.num_examples()
    if opt['num_examples'] > 0:  # -ne N, as in eval_model
        total = min(total, opt['num_examples'])
    shards = opt.get('distributed_world_size') or 1 if opt.get('multiprocessing') else 1
    # a shard's share of the examples (rank 0's may be one more or less)
    bar = tqdm(total=-(-total // shards), desc=desc, unit='ex', disable=not progress, leave=False)
    seen = 0
    while not world.epoch_done() and seen < total:
        world.parley()
        if world_logger is not None:
            world_logger.log(world)
        # count the examples this parley really held: a batch slot whose episode is over holds
        # padding, and counting batchsize per parley would stop the loop while longer episodes
        # still have turns (it once dropped 2 of the 5,200 P@1,100 examples at -bs 64)
        done = _examples_in_parley(world)
        seen += done
        bar.update(done)
    bar.close()
    if world_logger is not None:
        world_logger.reset()
        world_logger.write(world_logs, world, file_format='conversations')
    report = world.report()
    world.reset()
    return report


def _examples_in_parley(world) -> int:
    """How many real (non-padding) teacher messages the last ``parley()`` of ``world`` held."""
    from parlai.core.message import Message

    acts = world.get_acts()
    if acts and isinstance(acts[0], (list, tuple)):  # a batch world: one list of slots per agent
        teacher_acts = acts[0]
    else:
        teacher_acts = acts[:1]
    return sum(1 for act in teacher_acts if act and not Message(act).is_padding())
