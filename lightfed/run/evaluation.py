"""Evaluating the global model (its weights loaded into the live module, a step over batches) on the validation split,
the test set or each client's data, and the round with the best validation metric."""

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning import LightningModule
from lightning.fabric import Fabric
from torch import Tensor

from lightfed.core.logged_values import LoggedValues
from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.seeding import derived_rng, derived_seed
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.privacy.base import ClientPrivacy
from lightfed.run.client import ClientTrainer
from lightfed.run.client_training import TrainingJob
from lightfed.run.fingerprint import check_fingerprint
from lightfed.run.run_state import RunState
from lightfed.run.stacked_evaluation import MONITORS, stacked_evaluation
from lightfed.run.vectorizable import why_not_vectorized
from lightfed.run.vectorized_clients import VectorizedClients
from lightfed.streams import Stream


def evaluation_pass(
    fabric: Fabric, client: ClientTrainer, params: Tensor, buffers: Tensor, step: str, batches: Iterable
) -> LoggedValues:
    """Runs the module's ``step`` ("validation_step" or "test_step") on ``batches`` at the given global weights, with
    the hooks of that stage around it (``on_validation_start``, ``on_validation_epoch_start``, per batch
    ``on_validation_batch_start``/``_end``, ...); returns what it logged (reduce it with ``compute``)."""
    client.flat.load(params, buffers)
    module = client.module
    module.eval()
    stage = step.removesuffix("_step")
    step_fn = getattr(module, step)
    logged = LoggedValues()
    client.view._enter("validate" if stage == "validation" else "test")
    with torch.no_grad(), logged.attached(module):
        getattr(module, f"on_{stage}_start")()
        getattr(module, f"on_{stage}_epoch_start")()
        for batch_idx, batch in enumerate(batches):
            logged.batch = batch
            getattr(module, f"on_{stage}_batch_start")(batch, batch_idx)
            with fabric.autocast():
                output = step_fn(batch, batch_idx)
            getattr(module, f"on_{stage}_batch_end")(output, batch, batch_idx)
        getattr(module, f"on_{stage}_epoch_end")()
        getattr(module, f"on_{stage}_end")()
    client.view._enter("")
    return logged


PersonalModel = Callable[[int, Tensor, Tensor], tuple[Tensor, Tensor] | None]
VARIANTS = ("global", "personal", "finetuned")
STACKED_CLIENTS = 256  # clients whose weights are held at once for evaluation on batched matmuls


@dataclass(frozen=True)
class ClientEvaluation:
    """What per-client evaluation covers: ``clients`` of them (a fixed subset drawn from ``seed``; None: all), each
    also with its ``personal`` model (client id, global weights -> its weights, or None) and after ``finetune_steps``
    local steps from the global model (0: not)."""

    personal: PersonalModel | None = None
    finetune_steps: int = 0
    clients: int | None = None
    seed: int = 0

    def evaluated(self, num_clients: int) -> list[int]:
        """The evaluated clients, in increasing id order: the same every round and on every process."""
        if self.clients is None or self.clients >= num_clients:
            return list(range(num_clients))
        return sorted(
            int(c) for c in derived_rng(self.seed, Stream.EVALUATED).choice(num_clients, self.clients, replace=False)
        )


class Evaluation:
    """The global model's evaluations on ``client``'s live module, every process its share of the batches, the results
    reduced over all processes (collective calls)."""

    def __init__(self, fabric: Fabric, client: ClientTrainer, settings: "ClientEvaluation | None" = None) -> None:
        self.fabric, self.client = fabric, client
        self.settings = ClientEvaluation() if settings is None else settings
        self.stacked = stacked_evaluation(client)  # many clients at once, where the module allows
        tunes = self.settings.finetune_steps > 0 and self.stacked is not None and not client.privacy.private
        vectorizes = tunes and why_not_vectorized(client) is None
        self.tuner = VectorizedClients(client, auto=True) if vectorizes else None  # fine-tunes many clients at once

    def global_model(self, step: str, params: Tensor, buffers: Tensor) -> dict[str, float]:
        """``params``/``buffers`` on this process's share of the validation split with ``validation_step``, or of the
        test set with ``test_step``."""
        rank, world, data = self.fabric.global_rank, self.fabric.world_size, self.client.data
        batches = data.val_batches(rank, world) if step == "validation_step" else data.test_batches(rank, world)
        return evaluation_pass(self.fabric, self.client, params, buffers, step, batches).compute(
            self.fabric, self.client.module
        )

    def clients(
        self, round: int, params: Tensor, buffers: Tensor, monitor: str, seen: set[int]
    ) -> dict[str, np.ndarray]:
        """``monitor`` of ``validation_step`` on each evaluated client's data (its held-out share with
        ``data.client_val_fraction`` > 0, else the examples it trains on), clients split across processes as they train
        (client i on process i % world size); ``seen``: the clients sampled for training so far. By name, the values of:

        - ``clients/<monitor>``: the global model, every evaluated client;
        - ``clients/personal/<monitor>``: each client's personal model (``personal``), the clients that have one;
        - ``clients/finetuned/<monitor>``: the global model after ``finetune_steps`` local steps, seen clients;
        - ``clients/unseen/<monitor>`` and ``clients/unseen/finetuned/<monitor>``: the same, clients never sampled.

        A name with no client is left out."""
        fabric, data, settings = self.fabric, self.client.data, self.settings
        values = torch.full((len(VARIANTS), data.num_clients), math.nan, dtype=torch.float64, device=fabric.device)
        mine = [c for c in settings.evaluated(data.num_clients) if c % fabric.world_size == fabric.global_rank]
        together = STACKED_CLIENTS if self.stacked is not None and monitor in MONITORS else 1
        for start in range(0, len(mine), together):
            block = mine[start : start + together]
            weights: dict[int, dict[int, tuple[Tensor, Tensor]]] = {
                0: {c: (params, buffers) for c in block},
                1: {},
                2: {},
            }
            for client_id in block:
                personal = None if settings.personal is None else settings.personal(client_id, params, buffers)
                if personal is not None:
                    weights[1][client_id] = personal
            if settings.finetune_steps:
                plans = [
                    ClientPlan(
                        c, round, derived_seed(settings.seed, Stream.FINETUNE, round, c), steps=settings.finetune_steps
                    )
                    for c in block
                ]
                weights[2] = self._fine_tuned(plans, params, buffers)
            for variant, by_client in weights.items():
                if by_client:
                    values[variant, list(by_client)] = self._values(by_client, monitor, shared=variant == 0).to(values)
        both = torch.cat([(~values.isnan()).double(), values.nan_to_num(0.0)])
        reduced = torch.as_tensor(fabric.all_reduce(both, reduce_op="sum")).cpu().numpy()
        present, reduced = reduced[: len(VARIANTS)] > 0, reduced[len(VARIANTS) :]
        was_seen = np.isin(np.arange(data.num_clients), sorted(seen))
        chosen = {
            "clients": (0, present[0]),
            "clients/personal": (1, present[1]),
            "clients/finetuned": (2, present[2] & was_seen),
            "clients/unseen": (0, present[0] & ~was_seen),
            "clients/unseen/finetuned": (2, present[2] & ~was_seen),
        }
        return {f"{name}/{monitor}": reduced[row, mask] for name, (row, mask) in chosen.items() if mask.any()}

    def final_clients(self, round: int, params: Tensor, buffers: Tensor, monitor: str) -> dict[str, np.ndarray]:
        """``clients`` at the end of a run, every client counted as seen; nothing where ``validation_step`` does not
        log ``monitor``."""
        try:
            return self.clients(round, params, buffers, monitor, set(range(self.client.data.num_clients)))
        except ConfigError as error:
            if "needs validation_step to log" not in str(error):
                raise
            return {}  # the run has warned once already that its monitor is not logged

    def _fine_tuned(self, plans: list[ClientPlan], params: Tensor, buffers: Tensor) -> dict[int, tuple[Tensor, Tensor]]:
        """Each plan's client's weights (by id) after training the plan from ``params``/``buffers``, as
        ``ClientTrainer.fine_tuned``: vectorized where the module allows (``tuner``)."""
        if self.tuner is None:
            return {plan.client_id: self.client.fine_tuned(plan, params, buffers) for plan in plans}
        tuned: dict[int, tuple[Tensor, Tensor]] = {}

        def deliver(lane: int, index: int, update: ClientUpdate) -> None:
            tuned[plans[index].client_id] = params + update.delta, update.buffers.clone()

        with self.client.unrecorded():
            self.tuner.train([TrainingJob(plan, params, buffers) for plan in plans], deliver)
        return tuned

    def _values(self, weights: dict[int, tuple[Tensor, Tensor]], monitor: str, shared: bool) -> Tensor:
        """``monitor`` of each client (by id) at its weights (``shared``: the same for all), on batched matmuls where
        the module allows (``stacked_evaluation``), else one client at a time."""
        if self.stacked is not None and monitor in MONITORS:
            chosen = list(weights.values())
            rows = chosen[0][0].unsqueeze(0) if shared else torch.stack([params for params, _ in chosen])
            computed = self.stacked.values(list(weights), rows, monitor)
            if computed is not None:
                return computed
        return torch.tensor([self._client_value(c, *w, monitor) for c, w in weights.items()], dtype=torch.float64)

    def _client_value(self, client_id: int, params: Tensor, buffers: Tensor, monitor: str) -> float:
        """``monitor`` of one client at the given weights; NaN (left out) for a client with nothing to evaluate."""
        batches = iter(self.client.data.client_eval_batches(client_id))
        first = next(batches, None)
        if first is None:  # e.g. a client of one example: it holds none out
            return math.nan
        batches = itertools.chain([first], batches)
        result = evaluation_pass(self.fabric, self.client, params, buffers, "validation_step", batches).compute()
        if monitor not in result:
            raise ConfigError(f"per-client evaluation needs validation_step to log {monitor!r} (trainer.monitor)")
        return result[monitor]


def evaluate_checkpoint(
    fabric: Fabric,
    model: LightningModule,
    data: FederatedDataModule,
    path: Path | None,
    current: dict[str, str],
    step: str,
) -> tuple[int, Tensor, Tensor, dict[str, float]]:
    """The global model of the checkpoint at ``path`` (the initial ``model`` when None) evaluated with ``step``, refused
    when the model, the data or the seed differ from its run's (``current``: the fingerprint of this run's settings);
    returns its rounds done, weights and metrics. Writes nothing: the run's folder, config and events stay as they
    were."""
    client = ClientTrainer(fabric, model, data)
    round, params, buffers = 0, client.flat.params.clone(), client.flat.buffers.clone()
    if path is not None:
        saved = RunState.load(path, fabric.print, process_files=False)  # the weights are enough
        check_fingerprint(saved.fingerprint, current, str(path), evaluation=True)
        round, (params, buffers) = saved.round, saved.weights_for(params, buffers)
        client.module.on_load_checkpoint(saved.checkpoint())
    return round, params, buffers, Evaluation(fabric, client).global_model(step, params, buffers)


def client_distribution(values: np.ndarray, name: str) -> dict[str, float]:
    """The final report's distribution over clients of a metric: ``<name>_{mean,std,worst10,best10}``, the std over
    clients (not over seeds), worst10 and best10 the means of the worst and of the best ceil(10 %) of the clients (one
    at least), as the q-FFL paper's tables give them; worst is lowest, or highest for a loss."""
    ordered = np.sort(values)[::-1] if "loss" in name.rsplit("/", 1)[-1] else np.sort(values)
    tenth = max(1, math.ceil(len(ordered) / 10))
    return {
        f"{name}_mean": float(ordered.mean()),
        f"{name}_std": float(ordered.std()),
        f"{name}_worst10": float(ordered[:tenth].mean()),
        f"{name}_best10": float(ordered[-tenth:].mean()),
    }


def per_client_monitor(monitor: str) -> str:
    """The metric per-client evaluation reads for a best-round ``monitor``: ``val_acc`` for ``val_acc`` and for the
    personal models' ``clients/personal/val_acc_mean`` (``BestRound``'s monitor with personalization)."""
    return (
        monitor.removeprefix("clients/personal/").removesuffix("_mean") if monitor.startswith("clients/") else monitor
    )


def spread(values: np.ndarray, name: str) -> dict[str, float]:
    """The distribution of a metric over clients: ``<name>_{mean,std,min,p10}``."""
    return {
        f"{name}_mean": float(values.mean()),
        f"{name}_std": float(values.std()),
        f"{name}_min": float(values.min()),
        f"{name}_p10": float(np.percentile(values, 10)),
    }


class BestRound:
    """The evaluated round with the best validation ``monitor`` so far (lower is better for a loss, the first of equal
    values counts), with a copy of that round's global weights; its state goes into checkpoints."""

    def __init__(self, monitor: str) -> None:
        self.monitor = monitor
        self.lower_is_better = "loss" in monitor
        self.round: int | None = None
        self.value: float | None = None
        self.params, self.buffers = torch.empty(0), torch.empty(0)  # the best round's weights (none: empty)

    def update(self, round: int, metrics: dict[str, float], params: Tensor, buffers: Tensor) -> None:
        """Keeps round ``round``'s weights when its ``metrics`` hold a finite ``monitor`` better than the best so far."""
        value = metrics.get(self.monitor)
        if value is None or not math.isfinite(value):
            return
        if self.value is None or (value < self.value if self.lower_is_better else value > self.value):
            self.round, self.value = round, float(value)
            self.params, self.buffers = params.clone(), buffers.clone()

    def state_dict(self) -> dict[str, Any] | None:
        if self.round is None:
            return None
        return {
            "monitor": self.monitor,
            "round": self.round,
            "value": self.value,
            "params": self.params.cpu(),
            "buffers": self.buffers.cpu(),
        }

    def load_state_dict(self, state: dict[str, Any] | None, device: torch.device) -> None:
        """Restores a checkpoint's best round; one chosen on another monitor (or none) leaves it empty."""
        if state is None or state["monitor"] != self.monitor:
            return
        self.round, self.value = state["round"], state["value"]
        self.params, self.buffers = state["params"].to(device), state["buffers"].to(device)


def check_client_evaluation(
    settings: ClientEvaluation,
    privacy: ClientPrivacy,
    unseen_clients: int,
    clients_per_round: int,
    num_clients: int,
    asynchronous: bool,
) -> None:
    """Refuses per-client evaluation settings the run cannot honour, in one line."""
    if unseen_clients and asynchronous:
        raise ConfigError("trainer.unseen_clients is not supported with `asynchronous:` yet: set it to 0")
    if settings.finetune_steps and privacy.private:
        raise ConfigError(
            "trainer.client_eval_finetune_steps would train on clients' data outside trainer.privacy's accounting: "
            "set it to 0 with privacy"
        )
    if unseen_clients and clients_per_round > num_clients - unseen_clients:
        raise ConfigError(
            f"trainer.unseen_clients {unseen_clients} leaves {num_clients - unseen_clients} of {num_clients} clients "
            f"to train, fewer than trainer.clients_per_round {clients_per_round}"
        )
