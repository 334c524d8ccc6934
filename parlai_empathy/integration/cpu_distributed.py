"""Let ParlAI 1.7.2's ``multiprocessing_train`` run on CPU-only machines (gloo instead of nccl).

ParlAI assumes CUDA in three places: ``distributed_context`` picks ``rank % cuda.device_count()``
as the GPU and initializes nccl, ``all_gather_list`` builds CUDA buffers, and the agents wrap
their model in ``DistributedDataParallel(device_ids=[gpu])``, which torch refuses for a CPU module.
Each repair below only acts when CUDA is unavailable, so GPU runs are untouched. The same repairs
serve ParlAI's SLURM scripts (``distributed_train``/``distributed_eval``, which pass SLURM's local
task id as the "GPU": on CPU it is ignored).

Rendezvous: ParlAI initializes with ``init_method='tcp://HOST:PORT'``, whose store listens on every
interface. On CPU the primary worker instead binds the store's socket to the address HOST resolves
to (127.0.0.1 for ``localhost`` and a one-node cluster), and the group is built on that store.

Importing this module changes nothing; :func:`install` arms the repairs through
:func:`parlai_empathy.integration.compat.repair` (import-light: torch is only imported when a repaired ParlAI
module is). The start-up hook (:mod:`parlai_empathy.integration.startup`) calls it in every process that
imports ParlAI, spawned workers included.

Teardown: torch's gloo process group joins its worker threads in its C++ destructor, which runs
with the GIL held (the last reference usually goes with DDP's reducer, when the train loop is
freed). A worker thread that has just run the last collective (the ``Join`` all-reduce ParlAI's
loop ends with) may still be releasing that collective's tensors, and releasing a tensor that has
a Python wrapper needs the GIL: each thread waits for the other, and the process never exits
(a spawned worker or the launcher, at random). So the CPU context keeps the group referenced
until the interpreter shuts down, long after its threads went idle; see :func:`_keep_until_exit`.

Exit of a spawned worker: interpreter shutdown itself then destroys torch's and gloo's objects in no
fixed order, and now and then a worker died there with ``terminate called without an active
exception`` (SIGABRT, a C++ thread object destroyed unjoined) after its work was done and reported;
the launcher then fails the whole command (exit 1; seen once in CI, on ``multiprocessing_eval``).
A spawned worker whose distributed context ended normally has nothing left to do (ParlAI's
``multiprocess_train``/``multiprocess_eval`` and our sharded leaderboard return from inside the
context, and ``torch.multiprocessing`` discards a worker's return value), so it flushes its output
and leaves with ``os._exit(0)``, skipping that shutdown; see :func:`_leave_spawned_worker`. A worker
whose context ended with an exception exits the ordinary way, with its traceback and status. The
launcher (rank 0, the main process) is never cut short: its caller still writes the report.
"""

import contextlib
import socket
from urllib.parse import urlsplit

from parlai_empathy.integration.compat import _ModuleView, repair

# gloo process groups whose destruction is left to interpreter shutdown (see the module docstring)
_GROUPS_KEPT_UNTIL_EXIT = []


def _keep_until_exit(group):
    """Hold ``group`` so its destructor cannot run right after the run's last collective.

    ParlAI still calls ``dist.destroy_process_group()``, which unregisters the group (a new one
    can be initialized); only the object's destruction, which joins the gloo threads, is deferred.
    """
    _GROUPS_KEPT_UNTIL_EXIT.append(group)


def _leave_spawned_worker():
    """End a spawned worker (not the main process) now, with status 0, after flushing its output."""
    import logging
    import multiprocessing
    import os
    import sys

    if multiprocessing.current_process().name == 'MainProcess':
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(0)


def _cuda_missing(torch) -> bool:
    return not torch.cuda.is_available()


def _bound_listener(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``'s own address (IPv4 first), not on every interface."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, _, _, _, address = sorted(infos, key=lambda info: info[0] != socket.AF_INET)[0]
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(address)
    listener.listen(128)
    return listener


def tcp_store(dist, init_method: str, rank: int, world_size: int, timeout=None):
    """The c10d store of ``tcp://HOST:PORT``; the primary worker (rank 0) serves it on HOST's
    address only (the socket is handed to torch, which then owns it)."""
    url = urlsplit(init_method)
    kwargs = {} if timeout is None else {'timeout': timeout}
    if rank != 0:
        return dist.TCPStore(url.hostname, url.port, world_size, False, **kwargs)
    listener = _bound_listener(url.hostname, url.port)
    return dist.TCPStore(url.hostname, url.port, world_size, True, master_listen_fd=listener.detach(), **kwargs)


def _repair_distributed(module):
    torch = module.torch
    if isinstance(torch, _ModuleView) or not _cuda_missing(torch):
        return
    real_dist = module.dist

    def init_process_group(*args, backend=None, init_method=None, **kwargs):
        if init_method and init_method.startswith('tcp://') and not args and 'store' not in kwargs:
            kwargs['store'] = tcp_store(
                real_dist, init_method, kwargs['rank'], kwargs['world_size'], kwargs.get('timeout')
            )
            init_method = None
        return real_dist.init_process_group(*args, backend='gloo', init_method=init_method, **kwargs)

    def all_gather_list(data, max_size=None):
        """Every worker's ``data`` (picklable), gathered with gloo's object collective."""
        if not module.is_distributed():
            return [data]
        gathered = [None] * real_dist.get_world_size()
        real_dist.all_gather_object(gathered, data)
        return gathered

    real_context = module.distributed_context

    @contextlib.contextmanager
    def distributed_context(rank, opt, rank_offset=0, gpu=None, **kwargs):
        # The worker's "device" is the CPU: opt['gpu'] = 'cpu' is what ParlAI's join hook and
        # DDP wrapping then receive; agents never select it, as torch.cuda.is_available() is False.
        # (SLURM's context passes the task's local id as gpu: there is no GPU to pick on CPU.)
        with real_context(rank, opt, rank_offset, 'cpu', **kwargs) as worker_opt:
            _keep_until_exit(real_dist.distributed_c10d._get_default_group())
            yield worker_opt
        _leave_spawned_worker()  # reached only when the context ended without an exception

    cpu_cuda = _ModuleView(torch.cuda, set_device=lambda device: None, init=lambda: None)
    module.torch = _ModuleView(torch, cuda=cpu_cuda)
    module.dist = _ModuleView(real_dist, init_process_group=init_process_group)
    module.all_gather_list = all_gather_list
    module.distributed_context = distributed_context


def _repair_ddp_wrapping(module):
    torch = module.torch
    if isinstance(torch, _ModuleView) or not _cuda_missing(torch):
        return
    real_ddp = torch.nn.parallel.DistributedDataParallel

    class DistributedDataParallel(real_ddp):
        """A class, not a function: ParlAI also uses the name in ``isinstance`` checks."""

        def __init__(self, module, device_ids=None, **kwargs):
            if all(p.device.type == 'cpu' for p in module.parameters()):
                device_ids = None  # torch requires None for CPU modules
            super().__init__(module, device_ids=device_ids, **kwargs)

    parallel = _ModuleView(torch.nn.parallel, DistributedDataParallel=DistributedDataParallel)
    module.torch = _ModuleView(torch, nn=_ModuleView(torch.nn, parallel=parallel))


def install() -> None:
    """Arm the repairs (idempotent); each acts only where CUDA is unavailable."""
    repair('parlai.utils.distributed', _repair_distributed)
    for agent_module in ('parlai.core.torch_ranker_agent', 'parlai.core.torch_generator_agent'):
        repair(agent_module, _repair_ddp_wrapping)
