"""FederatedTrainer: federated rounds on one Fabric — sample, shard, train, reduce, aggregate, evaluate, log, save."""

import time
from collections.abc import Iterator
from pathlib import Path
import numpy as np
import torch
from lightning import LightningModule
from lightning.fabric import Fabric
from lightning.fabric.loggers import TensorBoardLogger
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor
from tqdm import tqdm

from lightfed.core.logged_values import LoggedValues
from lightfed.core.checkpoint import LAST, load_checkpoint, resolve_checkpoint, restore_rng_states, rng_states, save_checkpoint
from lightfed.core.client import ClientTrainer
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError, DivergenceError
from lightfed.heterogeneity import LocalWork
from lightfed.preemption import PreemptionSignal, requeue_slurm_job, slurm_job_id
from lightfed.privacy.base import BudgetReached, ClientPrivacy
from lightfed.core.seeding import CLIENT, derived_seed, sample_clients
from lightfed.strategies.base import Strategy
from lightfed.core.sums import Sums
from lightfed.core.messages import ClientPlan

PRECISIONS = ("32-true", "16-mixed", "bf16-mixed")


class FederatedTrainer:
    """Runs federated rounds of a LightningModule under a server ``Strategy`` on one ``lightning.fabric.Fabric``.

    Each process holds one module instance; the clients of a round are split across processes and their
    contributions combined by one all-reduce per round.
    """

    def __init__(
        self,
        accelerator: str = "auto",
        devices: int | str = 1,
        num_nodes: int = 1,
        precision: str = "32-true",
        rounds: int = 10,
        clients_per_round: int = 10,
        local_epochs: int | str | None = 1,
        local_steps: int | str | None = None,
        local_lr: float | str | None = None,
        redraw_local_work: bool = False,
        eval_interval: int = 1,
        client_eval_interval: int = 0,
        checkpoint_interval: int = 1,
        monitor: str = "val_acc",
        seed: int = 0,
        root_dir: str = "runs",
        name: str = "lightfed",
        progress_bar: bool = True,
        check_replicas: bool = False,
        privacy: ClientPrivacy | None = None,
    ) -> None:
        """
        Args:
            accelerator: Fabric accelerator: "cpu", "gpu", "auto", ...
            devices: Processes (devices) per node; the clients of a round are split across all of them.
            num_nodes: Number of nodes.
            precision: "32-true", "16-mixed" or "bf16-mixed" (parameters stay fp32).
            rounds: Total number of federated rounds (a resumed run continues up to this number).
            clients_per_round: Clients sampled (without replacement) in each round.
            local_epochs: Passes over its data each client makes per round: a number or a distribution drawn per
                client, e.g. "randint:1:50"; set to null when using local_steps.
            local_steps: Optimizer steps each client takes per round, instead of local_epochs (number or distribution).
            local_lr: Client learning rate overriding the optimizer's: a number or a distribution drawn per client,
                e.g. "uniform:1e-4:1e-3" or "loguniform:1e-4:1e-1"; null keeps the optimizer's own.
            redraw_local_work: Draw local epochs/steps/lr afresh every round instead of once per client.
            eval_interval: Evaluate the global model on the central test set every this many rounds (and at the end).
            client_eval_interval: Evaluate the global model on every client's own data every this many rounds
                (0: never); logs the distribution over clients of ``monitor``.
            checkpoint_interval: Write ``last.ckpt`` every this many rounds (and at the end).
            monitor: Logged metric shown in the progress bar and used for per-client evaluation.
            seed: Seed of the server's client sampling and of every client's local randomness.
            root_dir: Folder under which each run gets ``<name>/version_<n>`` with TensorBoard logs, config and
                checkpoints.
            name: Experiment name (sub-folder of root_dir).
            progress_bar: Show a progress bar over rounds.
            check_replicas: Debug mode: after every round, check that every process holds exactly the global weights
                of process 0 (one extra broadcast per round).
            privacy: Differential privacy of the clients' local training, e.g. ``lightfed.privacy.DPSGD`` (Opacus
                DP-SGD with one accountant per client); logs ``privacy/epsilon_max`` and ``privacy/epsilon_mean``.
        """
        if precision not in PRECISIONS:
            raise ConfigError(f"trainer.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        self.local_work = LocalWork(local_epochs, local_steps, local_lr, redraw_local_work)
        for key, value, low in [
            ("rounds", rounds, 1),
            ("clients_per_round", clients_per_round, 1),
            ("eval_interval", eval_interval, 1),
            ("client_eval_interval", client_eval_interval, 0),
            ("checkpoint_interval", checkpoint_interval, 1),
        ]:
            if value < low:
                raise ConfigError(f"trainer.{key} must be >= {low}, got {value}")
        self.fabric = Fabric(accelerator=accelerator, devices=devices, num_nodes=num_nodes, precision=precision)
        self.rounds = rounds
        self.clients_per_round = clients_per_round
        self.eval_interval = eval_interval
        self.client_eval_interval = client_eval_interval
        self.checkpoint_interval = checkpoint_interval
        self.monitor = monitor
        self.seed = seed
        self.run_root = Path(root_dir) / name
        self.progress_bar = progress_bar
        self.check_replicas = check_replicas
        self.precision = precision
        self.privacy = privacy
        self.log_dir: Path | None = None  # set when a run starts
        self._launched = False

    # ----------------------------------------------------------------- entry points

    def fit(
        self,
        model: LightningModule,
        data: FederatedDataModule,
        strategy: Strategy,
        ckpt_path: str | None = None,
        run_config: str | None = None,
    ) -> dict[str, float]:
        """Trains for ``rounds`` rounds; returns the last logged metrics.

        ``ckpt_path``: a checkpoint file, or "last" for the newest ``last.ckpt`` of this experiment, to resume from
        ("auto": the same, or a fresh start when there is none). ``run_config``: saved as ``config.yaml``.
        On SIGUSR1 (a cluster's warning before the time limit) the run writes a checkpoint at the end of the round
        and stops; under SLURM it also requeues the job.
        """
        checkpoint = self._start(model, data, ckpt_path, run_config)
        if self.clients_per_round > data.num_clients:
            raise ConfigError(
                f"trainer.clients_per_round ({self.clients_per_round}) is larger than the number of clients "
                f"({data.num_clients}); lower it or add clients"
            )
        if self.privacy is not None:
            model = self.privacy.prepare(model, self.precision)
        client = ClientTrainer(self.fabric, model, data, self.privacy)
        params = self.fabric.broadcast(client.flat.params.clone())
        buffers = self.fabric.broadcast(client.flat.buffers.clone())
        strategy.setup(params, data.num_clients)
        if self.privacy is not None:  # its accountants live in the strategy's per-client store
            self.privacy.setup(data, strategy.client_states, self.clients_per_round, lambda: self._run_plans(data.num_clients))
        start, metrics = 0, {}
        if checkpoint is not None:
            params, buffers = self._restore_weights(checkpoint, params, buffers)
            strategy.load_state_dict(checkpoint["strategy"])
            rank, world = self.fabric.global_rank, self.fabric.world_size
            strategy.client_states.load_state_dict(
                {i: state for i, state in checkpoint["client_states"].items() if i % world == rank}
            )
            restore_rng_states(checkpoint["rng"])
            start, metrics = checkpoint["round"], checkpoint["metrics"]
        sums = Sums(
            {**strategy.sum_sizes(), "_buffers": buffers.numel(), "_examples": 1, "_train_loss": 1, "_clients": 1, "_stop": 1},
            self.fabric.device,
        )
        bar = tqdm(
            range(start, self.rounds),
            initial=start,
            total=self.rounds,
            desc="rounds",
            disable=not (self.progress_bar and self.fabric.is_global_zero),
        )
        with PreemptionSignal() as preemption:
            for round in bar:
                began = time.perf_counter()
                sums.zero_()
                sums.add("_stop", float(preemption.requested))  # reduced with the round: every process stops
                try:
                    params, buffers, metrics = self._train_round(round, client, strategy, sums, params, buffers)
                except BudgetReached as reached:
                    self._save(round, params, buffers, strategy, metrics)
                    self.fabric.print(f"{reached}: stopped after round {round}; {self.log_dir / 'checkpoints' / LAST} holds it")
                    break
                if self.privacy is not None:
                    metrics.update(self.privacy.metrics(self.fabric))
                done, stop = round + 1, float(sums["_stop"]) > 0
                if done % self.eval_interval == 0 or done == self.rounds:
                    metrics.update(self._evaluate(client, params, buffers, "validation_step"))
                if self.client_eval_interval and (done % self.client_eval_interval == 0 or done == self.rounds):
                    metrics.update(self._evaluate_clients(client, params, buffers, done))
                metrics["round/time_s"] = time.perf_counter() - began
                self._logger.log_metrics(metrics, step=done)
                if self.monitor in metrics:
                    bar.set_postfix({self.monitor: f"{metrics[self.monitor]:.4f}"})
                if stop or done % self.checkpoint_interval == 0 or done == self.rounds:
                    self._save(done, params, buffers, strategy, metrics)
                if stop and done < self.rounds:
                    self._stop_for_preemption(done)
                    break
        self._logger.finalize("success")
        client.flat.load(params, buffers)
        return metrics

    def _train_round(
        self, round: int, client: ClientTrainer, strategy: Strategy, sums: Sums, params: Tensor, buffers: Tensor
    ) -> tuple[Tensor, Tensor, dict[str, float]]:
        """Samples, trains this process's share of the clients, reduces and aggregates: the next global model."""
        clients = sample_clients(self.seed, round, client.data.num_clients, self.clients_per_round)
        plans = [strategy.configure_client(self._client_plan(round, c)) for c in self._my_share(clients, strategy)]
        self._check_privacy_budget(round, plans)
        for plan in plans:
            update = client.train(plan, params, buffers)
            strategy.accumulate(sums, update)
            sums.add("_buffers", update.buffers, weight=update.num_examples)
            sums.add("_examples", update.num_examples)
            sums.add("_train_loss", update.train_loss)
            sums.add("_clients", 1)
        sums.buffer.copy_(self.fabric.all_reduce(sums.buffer, reduce_op="sum"))
        params = strategy.aggregate(params, sums, round)
        buffers = (sums["_buffers"] / sums["_examples"]).to(buffers.dtype)
        if self.check_replicas:
            self._check_replicas(round, params, buffers)
        if not (torch.isfinite(params).all() and torch.isfinite(buffers).all()):
            raise DivergenceError(
                f"the global weights became NaN/Inf in round {round + 1}; lower the learning rate (model lr or "
                f"strategy.server_lr); the last good checkpoint is kept in {self.log_dir / 'checkpoints'}"
            )
        metrics = {
            "round/clients": float(sums["_clients"]),
            "round/client_train_loss": float(sums["_train_loss"] / sums["_clients"]),
            **client.logged.compute(self.fabric),
            **{f"strategy/{k}": v for k, v in strategy.metrics().items()},
        }
        return params, buffers, metrics

    def _client_plan(self, round: int, client_id: int) -> ClientPlan:
        epochs, steps, lr = self.local_work.draw(self.seed, round, client_id)
        seed = derived_seed(self.seed, CLIENT, round, client_id)
        return ClientPlan(client_id=client_id, round=round, seed=seed, epochs=epochs, steps=steps, lr=lr)

    def _run_plans(self, num_clients: int) -> Iterator[ClientPlan]:
        """Every client plan of the run, before the strategy configures it (for privacy budgets)."""
        for round in range(self.rounds):
            for client_id in sample_clients(self.seed, round, num_clients, self.clients_per_round):
                yield self._client_plan(round, client_id)

    def _check_privacy_budget(self, round: int, plans: list[ClientPlan]) -> None:
        """Raises ``BudgetReached`` on every process when a client of this round would exceed its privacy budget."""
        if self.privacy is None or not self.privacy.limits_budget:
            return
        over = max((plan.client_id for plan in plans if self.privacy.would_exceed(plan)), default=-1)
        client_id = int(self.fabric.all_reduce(torch.tensor(over + 1.0, device=self.fabric.device), reduce_op="max")) - 1
        if client_id >= 0:
            raise BudgetReached(f"client {client_id} would exceed its privacy budget in round {round + 1}")

    def _check_replicas(self, round: int, params: Tensor, buffers: Tensor) -> None:
        """Raises when this process's global weights differ from process 0's."""
        weights = torch.cat([params, buffers.to(params.dtype)])
        if not torch.equal(self.fabric.broadcast(weights.clone()), weights):
            raise RuntimeError(
                f"process {self.fabric.global_rank} holds other global weights than process 0 after round "
                f"{round + 1}: a strategy's aggregate depends on something that differs between processes"
            )

    def _stop_for_preemption(self, done: int) -> None:
        job_id = slurm_job_id()
        if self.fabric.is_global_zero and job_id is not None:
            requeue_slurm_job(job_id)
        self.fabric.print(
            f"stopped on request after round {done}; {self.log_dir / 'checkpoints' / LAST} holds it"
            + (f"; SLURM job {job_id} requeued" if job_id else "; resume with --ckpt_path last")
        )

    def _my_share(self, clients: list[int], strategy: Strategy) -> list[int]:
        """This process's clients: a balanced slice, or client i on process i % world when clients keep state here."""
        rank, world = self.fabric.global_rank, self.fabric.world_size
        if strategy.keeps_client_state or (self.privacy is not None and self.privacy.keeps_client_state):
            return [c for c in clients if c % world == rank]
        return clients[rank::world]

    def validate(
        self, model: LightningModule, data: FederatedDataModule, ckpt_path: str | None = None, run_config: str | None = None
    ) -> dict[str, float]:
        """Evaluates the (checkpointed) global model with ``validation_step`` on the central test set."""
        return self._evaluate_once(model, data, ckpt_path, run_config, "validation_step")

    def test(
        self, model: LightningModule, data: FederatedDataModule, ckpt_path: str | None = None, run_config: str | None = None
    ) -> dict[str, float]:
        """Evaluates the (checkpointed) global model with ``test_step`` on the central test set."""
        return self._evaluate_once(model, data, ckpt_path, run_config, "test_step")

    # ----------------------------------------------------------------- set-up and checkpoints

    def _start(
        self, model: LightningModule, data: FederatedDataModule, ckpt_path: str | None, run_config: str | None, step: str = "validation_step"
    ) -> dict | None:
        """Launches the processes, fixes the run folder, loads the data and the checkpoint to resume from."""
        if not is_overridden(step, model, LightningModule):
            raise ConfigError(f"{type(model).__name__} must define {step} to evaluate the global model")
        if not self._launched:
            self.fabric.launch()
            self._launched = True
        path = None
        if self.fabric.is_global_zero:
            path = resolve_checkpoint(ckpt_path, self.run_root)
            resumed_run = path is not None and path.parent.name == "checkpoints"
            self.log_dir = path.parent.parent if resumed_run else Path(TensorBoardLogger(self.run_root.parent, self.run_root.name).log_dir)
            if run_config is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                (self.log_dir / "config.yaml").write_text(run_config)
        path, self.log_dir = self.fabric.broadcast((path, self.log_dir))
        self._logger = TensorBoardLogger(self.log_dir.parent.parent, self.log_dir.parent.name, self.log_dir.name)
        data.setup(self.seed, self.fabric.device)
        return None if path is None else load_checkpoint(path)

    @staticmethod
    def _restore_weights(checkpoint: dict, params: Tensor, buffers: Tensor) -> tuple[Tensor, Tensor]:
        saved_params, saved_buffers = checkpoint["params"], checkpoint["buffers"]
        if saved_params.shape != params.shape or saved_buffers.shape != buffers.shape:
            raise ConfigError(
                f"the checkpoint holds {saved_params.numel()} parameters, the model has {params.numel()}; "
                "resume with the model configuration the checkpoint was written with"
            )
        return saved_params.to(params), saved_buffers.to(buffers)

    def _save(self, done: int, params: Tensor, buffers: Tensor, strategy: Strategy, metrics: dict) -> None:
        client_states = strategy.client_states.state_dict()
        if self.fabric.world_size > 1:  # each process holds its own clients' states
            shards = [None] * self.fabric.world_size if self.fabric.is_global_zero else None
            torch.distributed.gather_object(client_states, shards, dst=0)
            client_states = {i: s for shard in shards or [] for i, s in shard.items()}
        if self.fabric.is_global_zero:
            state = {
                "round": done,
                "params": params.cpu(),
                "buffers": buffers.cpu(),
                "strategy": strategy.state_dict(),
                "client_states": client_states,
                "rng": rng_states(),
                "metrics": metrics,
                **self._extra_checkpoint_state(),
            }
            save_checkpoint(self.log_dir / "checkpoints" / LAST, state)
        self.fabric.barrier()

    def _extra_checkpoint_state(self) -> dict:
        """More entries for ``last.ckpt`` (e.g. the asynchronous simulation's); read back by a subclass's ``_start``."""
        return {}

    # ----------------------------------------------------------------- evaluation

    def _evaluate_once(
        self, model: LightningModule, data: FederatedDataModule, ckpt_path: str | None, run_config: str | None, step: str
    ) -> dict[str, float]:
        checkpoint = self._start(model, data, ckpt_path, run_config, step)
        client = ClientTrainer(self.fabric, model, data)
        params, buffers = client.flat.params.clone(), client.flat.buffers.clone()
        done = 0
        if checkpoint is not None:
            params, buffers = self._restore_weights(checkpoint, params, buffers)
            done = checkpoint["round"]
        metrics = self._evaluate(client, params, buffers, step)
        self._logger.log_metrics(metrics, step=done)
        self._logger.finalize("success")
        return metrics

    def _evaluate(self, client: ClientTrainer, params: Tensor, buffers: Tensor, step: str) -> dict[str, float]:
        """Global model on this process's share of the central test set, reduced over all processes."""
        rank, world = self.fabric.global_rank, self.fabric.world_size
        logged = self._run_eval_pass(client, params, buffers, step, client.data.test_batches(rank, world))
        return logged.compute(self.fabric)

    def _evaluate_clients(self, client: ClientTrainer, params: Tensor, buffers: Tensor, done: int) -> dict[str, float]:
        """Global model on every client's own data; logs the distribution of ``monitor`` over clients."""
        data = client.data
        values = torch.zeros(data.num_clients, dtype=torch.float64, device=self.fabric.device)
        for client_id in range(self.fabric.global_rank, data.num_clients, self.fabric.world_size):
            logged = self._run_eval_pass(client, params, buffers, "validation_step", data.client_eval_batches(client_id))
            result = logged.compute()
            if self.monitor not in result:
                raise ConfigError(f"per-client evaluation needs validation_step to log {self.monitor!r} (trainer.monitor)")
            values[client_id] = result[self.monitor]
        values = self.fabric.all_reduce(values, reduce_op="sum").cpu().numpy()
        if self.fabric.is_global_zero:
            self._logger.experiment.add_histogram(f"clients/{self.monitor}", values, global_step=done)
        return {
            f"clients/{self.monitor}_mean": float(values.mean()),
            f"clients/{self.monitor}_std": float(values.std()),
            f"clients/{self.monitor}_min": float(values.min()),
            f"clients/{self.monitor}_p10": float(np.percentile(values, 10)),
        }

    def _run_eval_pass(self, client: ClientTrainer, params: Tensor, buffers: Tensor, step: str, batches) -> LoggedValues:
        client.flat.load(params, buffers)
        module = client.module
        module.eval()
        step_fn = getattr(module, step)
        logged = LoggedValues()
        with torch.no_grad(), logged.attached(module):
            for batch_idx, batch in enumerate(batches):
                logged.batch_size = len(batch[1])
                with self.fabric.autocast():
                    step_fn(batch, batch_idx)
        return logged

