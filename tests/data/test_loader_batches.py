"""LoaderBatches' DataLoader workers: started by a fork server, never forked from a process whose threads may hold
locks; a pass whose worker dies fails at once; a dataset that cannot travel to them is refused."""

import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from lightfed.data.datasets import DatasetSplits
from lightfed.data.loader_batches import LoaderBatches
from lightfed.errors import ConfigError
from tests.data.worker_datasets import READING, ExitingReads, LockedReads

CPU = torch.device("cpu")


def batches_of(dataset: Any, num_workers: int) -> LoaderBatches:
    """Two clients of 12 examples each, batches of 4."""
    splits = DatasetSplits(dataset, dataset, num_classes=3, train_labels=np.asarray(dataset.targets))
    clients = [np.arange(12), np.arange(12, 24)]
    return LoaderBatches(splits, clients, np.arange(0), clients, 4, 8, CPU, num_workers, pin_memory=False)


def within(seconds: float, work: Callable[[], Any]) -> Any:
    """``work()``'s result, computed in a thread; fails the test if it takes longer than ``seconds``."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = work()
        except BaseException as error:  # noqa: BLE001  (re-raised in the test's thread)
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting after {seconds} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def churn(stop: threading.Event) -> None:
    """Threads starting and ending while workers start, as the launcher's, gloo's and queue feeders' do."""
    while not stop.is_set():
        threading.Thread(target=READING.locked).start()


@pytest.mark.slow
def test_workers_start_and_read_while_other_threads_run_and_hold_a_lock_the_dataset_takes():
    """A forked worker would inherit ``READING`` held by this process's thread, and wait for it for ever."""
    in_process = batches_of(LockedReads(24), num_workers=0)
    expected = [list(in_process.client_batches(c, torch.Generator().manual_seed(c), epochs=1)) for c in (0, 1)] * 10
    with_workers, stop = batches_of(LockedReads(24), num_workers=1), threading.Event()
    churners = [threading.Thread(target=churn, args=(stop,)) for _ in range(2)]
    READING.acquire()  # held by this thread for the whole test; a worker of its own does not share it
    try:
        for thread in churners:
            thread.start()
        passes = within(
            600,
            lambda: [
                list(with_workers.client_batches(c, torch.Generator().manual_seed(c), epochs=1)) for c in (0, 1) * 10
            ],
        )
    finally:
        READING.release()
        stop.set()
        for thread in churners:
            thread.join(60)
    assert len(passes) == 20 and all(len(batches) == 3 for batches in passes)  # 12 examples, batches of 4
    for got, want in zip(passes, expected, strict=True):
        assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(got, want, strict=True))


@pytest.mark.slow
def test_a_worker_that_dies_fails_the_pass_within_seconds():
    """torch sees a worker of the fork server die only by checking on it (every 5 s), not by SIGCHLD."""
    data = batches_of(ExitingReads(24), num_workers=1)
    with pytest.raises(RuntimeError, match="DataLoader worker .* exited unexpectedly"):
        within(120, lambda: list(data.test_batches()))


class Local(LockedReads):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.transform = lambda x: x


def test_a_dataset_that_does_not_pickle_is_refused_with_what_to_change():
    with pytest.raises(
        ConfigError,
        match=r"^data.num_workers > 0 reads Local in worker processes started afresh, so "
        r"it must pickle, but: .*lambda.*; define its functions .* or set data.num_workers 0$",
    ):
        batches_of(Local(24), num_workers=2)
    batches_of(Local(24), num_workers=0)  # read in this process: no pickling


ROWS_MODULE = """
import torch
from torch.utils.data import Dataset


class Rows(Dataset):
    def __init__(self, size: int) -> None:
        self.size, self.targets = size, [i % 3 for i in range(size)]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        return torch.full((4,), float(self.targets[index])) + 0.1 * index / self.size, self.targets[index]
"""


@pytest.mark.slow
def test_workers_read_a_dataset_of_the_users_module_beside_the_config(tmp_path, monkeypatch):
    """A worker starts afresh, without the folder on its import path: it resolves the config's module as ``fit``."""
    from lightfed.subcommands import run

    project = tmp_path / "project"
    project.mkdir()
    (project / "rows_beside_config.py").write_text(ROWS_MODULE)
    rows = "{class_path: rows_beside_config.Rows, init_args: {size: 24}}"
    (project / "rows.yaml").write_text(
        "trainer: {accelerator: cpu, rounds: 2, clients_per_round: 2, local_steps: 3, local_epochs: null,\n"
        "          client_eval_interval: 0, progress_bar: false}\n"
        "model: {class_path: lightfed.models.MLP, init_args: {in_features: 4, num_classes: 3}}\n"
        f"data:\n  dataset: {{class_path: lightfed.data.MapDataset, init_args: {{train: {rows}, test: {rows}}}}}\n"
        "  partitioner: {class_path: lightfed.data.IIDPartitioner, init_args: {num_clients: 2}}\n"
        "  batch_size: 4\n  num_workers: 1\n"
    )
    monkeypatch.chdir(tmp_path)
    command = ["fit", "--config", str(project / "rows.yaml"), "--trainer.root_dir", str(tmp_path / "runs")]
    try:
        metrics = [run([*command, "--data.num_workers", str(workers)]) for workers in (1, 0)]
    finally:
        sys.modules.pop("rows_beside_config", None)
    assert metrics[0]["round/clients"] == 2 and metrics[0]["train_loss"] == metrics[1]["train_loss"]
    assert metrics[0]["val_loss"] == metrics[1]["val_loss"]
