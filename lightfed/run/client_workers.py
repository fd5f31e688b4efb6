"""Several clients of a round trained at once in one process: one thread per copy of the client."""

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from lightning import LightningModule
from lightning.fabric import Fabric
from torch import nn

from lightfed.adapters import copy_without_trainer
from lightfed.core.logged_values import LoggedValues
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.privacy.base import NO_PRIVACY
from lightfed.run.client import ClientTrainer
from lightfed.run.client_training import Deliver, DeliverRows, TrainingJob
from lightfed.run.cores import available_cores

Work = Callable[[int, ClientTrainer, int], None]  # (worker, its client, job index)
SERIAL_BETWEEN_BELOW = 2**20  # weights of a model whose rounds' work between the workers' runs takes one thread
HEAVY_LAYERS = (  # much compute per weight
    *(nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d),
    *(nn.RNNBase, nn.MultiheadAttention),
)
THREADS_FROM = 2**20  # weights from which "auto" trains several clients at once on a CPU without HEAVY_LAYERS


class ClientWorkers:
    """Client training (``lightfed.run.client_training.ClientTraining``) one client at a time per worker: worker w
    (its lane) trains jobs w, w + W, w + 2W, ... of a round (W workers), all workers at once.

    Which worker trains which job and the order in which each worker adds its updates depend only on the job's index,
    never on timing. Worker threads run torch ops on ``threads`` intra-op threads each (1 by default: the workers are
    the parallelism), on a CPU. One worker trains in the calling thread, as before (on one intra-op thread with
    ``one_thread``), on any device. The calling thread's own work between the workers' runs takes one thread
    with a small model (``between_runs``).

    Torch's global random generator is one per process, so concurrent clients cannot each draw from it
    reproducibly. The first job of a run is trained alone, and if it drew from it (dropout, ...) the workers are
    refused (``strict``) or the run stays on one worker.
    """

    def __init__(
        self, clients: list[ClientTrainer], threads: int = 1, strict: bool = True, one_thread: bool = False
    ) -> None:
        self.clients, self.threads, self.strict, self.one_thread = clients, threads, strict, one_thread
        self._probed = len(clients) == 1
        self._pool: ThreadPoolExecutor | None = None

    @classmethod
    def build(
        cls,
        fabric: Fabric,
        model: LightningModule,
        data: FederatedDataModule,
        clients_in_parallel: int | str,
        clients_per_round: int,
        **client: Any,
    ) -> "ClientWorkers":
        """The workers of this process: ``clients_in_parallel`` ("auto": on a CPU one per core of the process, cores /
        processes per node; one on another device, with ``client["privacy"]``, with ``data.num_workers`` > 0, or for
        a model whose steps are too short for threads that share Python's lock: no ``HEAVY_LAYERS`` and under
        ``THREADS_FROM`` weights, docs/results/performance-tiny-clients.md), at most this process's share of a round;
        worker 0 trains ``model`` itself, the others a copy each. More than one only on a CPU. ``client``: the
        ``ClientTrainer``'s other settings."""
        cores = max(1, available_cores() // getattr(fabric.strategy, "num_processes", 1))  # processes per node
        workers = clients_in_parallel
        if isinstance(workers, int) and workers > 1 and fabric.device.type != "cpu":
            raise ConfigError(
                f"trainer.clients_in_parallel > 1 trains clients on CPU threads, not on a {fabric.device.type} device "
                "(on CUDA streams they gave other weights than one client at a time): set it to 1, 'auto', or "
                "'vectorized' to train a round's clients as one batched computation"
            )
        if isinstance(workers, int) and workers > 1 and data.num_workers > 0:
            raise ConfigError(
                "trainer.clients_in_parallel > 1 cannot be used with data.num_workers > 0 (DataLoader processes "
                "forked from concurrent training threads can deadlock): set one of them to 1 / 0"
            )
        short_steps = False
        if workers == "auto":
            private = client.get("privacy", NO_PRIVACY).private
            parallel = fabric.device.type == "cpu" and not private and data.num_workers == 0
            short_steps = not private and short_cpu_steps(fabric, model, data)  # one worker on one thread
            workers = cores if parallel and not short_steps else 1
        workers = min(int(workers), math.ceil(clients_per_round / fabric.world_size))
        modules = [model, *(copy_without_trainer(model) for _ in range(workers - 1))]
        clients = [ClientTrainer(fabric, module, data, **client) for module in modules]
        threads = 1 if short_steps else max(1, cores // workers)
        return cls(clients, threads, strict=clients_in_parallel != "auto", one_thread=short_steps)

    @property
    def lanes(self) -> int:
        return len(self.clients)

    @property
    def block(self) -> int:
        return 1  # no job is batched with another

    @property
    def reference(self) -> ClientTrainer:
        return self.clients[0]

    def train(self, jobs: Sequence[TrainingJob], deliver: Deliver, deliver_rows: DeliverRows | None = None) -> None:
        """Trains ``jobs[k]`` on worker k % W and delivers its update in lane k % W (each alone: never as rows)."""

        def work(worker: int, client: ClientTrainer, k: int) -> None:
            deliver(worker, k, client.train(jobs[k].plan, jobs[k].params, jobs[k].buffers))

        self.run(len(jobs), work)

    def run(self, jobs: int, work: Work) -> None:
        """Calls ``work(w, clients[w], k)`` for every job k < ``jobs``, worker w = k % W; re-raises the first error."""
        start, main_threads = 0, torch.get_num_threads()
        if not self._probed and jobs:
            self._probe(work)
            start = 1
        if self.lanes == 1:
            with torch_threads(1) if self.one_thread else nullcontext():
                for k in range(start, jobs):
                    work(0, self.clients[0], k)
            return
        failed = threading.Event()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.lanes, "lightfed-client")
        futures = [
            self._pool.submit(self._serve, w, range(start + (w - start) % self.lanes, jobs, self.lanes), work, failed)
            for w in range(self.lanes)
        ]
        errors = [future.exception() for future in futures]
        torch.set_num_threads(main_threads)  # worker threads set the process-wide default too
        error = next((e for e in errors if e is not None), None)
        if error is not None:
            raise error

    def _serve(self, worker: int, jobs: range, work: Work, failed: threading.Event) -> None:
        """One worker's jobs of the round, stopping early when another worker failed."""
        torch.set_num_threads(self.threads)  # per thread: the pool's threads take the workers' tasks in any order
        for k in jobs:
            if failed.is_set():
                return
            try:
                work(worker, self.clients[worker], k)
            except BaseException:
                failed.set()
                raise

    def _probe(self, work: Work) -> None:
        """Trains job 0 alone on worker 0 (on a worker's threads) and checks whether it drew from torch's global
        random generator."""
        with torch_threads(self.threads):
            work(0, self.clients[0], 0)
        self._probed = True
        if not _drew_global_random(self.clients[0].last_seed):
            return
        if self.strict:
            raise ConfigError(
                "the model draws from torch's global random generator while training (dropout, ...), which concurrent "
                "clients share: set trainer.clients_in_parallel 1 (or 'auto') for reproducible runs"
            )
        self.clients = self.clients[:1]

    @contextmanager
    def between_runs(self) -> Iterator[None]:
        """The calling thread's work between the workers' runs (a round's planning, reduction and server step), on
        one intra-op thread when several workers train a model under ``SERIAL_BETWEEN_BELOW`` weights (its count is
        restored after): OpenMP's idle threads would spin on the workers' cores (measured:
        docs/results/performance-loops.md)."""
        small = self.clients[0].flat.params.numel() < SERIAL_BETWEEN_BELOW
        with torch_threads(1) if self.lanes > 1 and small else nullcontext():
            yield

    def call(self, hook: str) -> None:
        """Calls the module hook ``hook`` (``on_fit_start``, ``on_fit_end``) of every worker's module."""
        for client in self.clients:
            getattr(client.module, hook)()

    def logged(self) -> LoggedValues:
        """What every worker's module logged this round, in the first worker's ``LoggedValues``."""
        first = self.clients[0]
        for client in self.clients[1:]:
            first.logged.absorb(client.logged, first.module, client.module)
        return first.logged

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()


def short_cpu_steps(fabric: Fabric, model: LightningModule, data: FederatedDataModule) -> bool:
    """Whether ``model`` trains on a CPU, without DataLoader workers, in steps too short for worker threads to pay
    (no ``HEAVY_LAYERS``: a convolution, a recurrence or attention; under ``THREADS_FROM`` weights): "auto" then
    trains its clients on one thread, one at a time or vectorized, the same on any number of processes."""
    if fabric.device.type != "cpu" or data.num_workers > 0:
        return False
    return not has_heavy_layers(model) and sum(p.numel() for p in model.parameters() if p.requires_grad) < THREADS_FROM


def has_heavy_layers(model: nn.Module) -> bool:
    """Whether ``model`` has a convolution, a recurrence or attention (``HEAVY_LAYERS``: much compute per weight)."""
    return any(isinstance(layer, HEAVY_LAYERS) for layer in model.modules())


def _drew_global_random(seed: int) -> bool:
    """Whether torch's global CPU generator (the workers' device) moved since it was seeded with ``seed``."""
    return not torch.equal(torch.get_rng_state(), torch.Generator().manual_seed(seed).get_state())


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """The calling thread's torch ops on ``threads`` intra-op threads, its own count restored after."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
