"""Client training as one batched computation: the clients of a round trained together on stacked weights.

Each client's weights are one row of a stacked tensor per optimizer group; the module's ``training_step`` runs for
all of them at once, on batched matmuls where the model allows (``stacked_classifier``), else under ``torch.vmap``
(``torch.func.functional_call`` over the rows); the sum of the clients' losses is back-propagated once, which gives
every client exactly its own gradient (its row), and the model's optimizer, built once over the stacked tensors,
steps every row as one optimizer per client would (it is elementwise). Ragged clients stay exact: at each step the
clients whose batches have the same size are one call (a client's last, partial batch is its own group), and a
client's weights are taken when it has taken its last step. Local rules run on their client's row; a rule's steps on
another model (``LocalRule.prior_steps``: Ditto's) and its second gradient a step (``LocalRule.second_point``: APFL's
mixture, SAM's ascent) are taken for all the clients at once. Under DP-SGD every example of every client gets a row
(``_private_step``, ``vectorized_privacy``).
"""

import itertools
import math
import statistics
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import torch
from lightning import LightningModule
from lightning.fabric.utilities.apply_func import apply_to_collection
from torch import Tensor, nn
from torch.optim.sgd import sgd as functional_sgd

from lightfed.adapters import ParameterSlots, logging_to
from lightfed.core.federated_weights import federated_parameters
from lightfed.core.local_rule import LocalRule
from lightfed.core.logged_values import LoggedValues
from lightfed.core.messages import ClientPlan, ClientRows, ClientUpdate
from lightfed.core.training_loss import training_loss
from lightfed.data.module import Batch
from lightfed.errors import ConfigError, LightfedError
from lightfed.privacy.dp_sgd import DPSGD
from lightfed.run.client import ClientTrainer
from lightfed.run.client_memory import chunk_budget, client_bytes
from lightfed.run.client_training import Deliver, DeliverRows, TrainingJob
from lightfed.run.client_workers import torch_threads
from lightfed.run.folded_step import FoldedStep, NotFolded, folded, may_fold
from lightfed.run.stacked_batches import GatheredBatches, ListedBatches, counts_width, device_index, joined
from lightfed.run.stacked_classifier import stacked_classifier
from lightfed.run.trainer_view import DiffersByClient
from lightfed.run.vectorized_privacy import PrivateClients
from lightfed.strategies.fedprox import ProximalTerm

# elementwise optimizers whose one optimizer over stacked rows is tested to be one optimizer per client
ELEMENTWISE = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.Adagrad, torch.optim.RMSprop)
HOOKS = (
    "on_train_start",
    "on_train_epoch_start",
    "on_train_batch_start",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_train_batch_end",
    "on_train_epoch_end",
    "on_train_end",
)
FOLD_TOLERANCE = 1e-4  # the largest relative difference of a folded step from vmap's that folding accepts
AUTO_BLOCK = 64  # clients_in_parallel auto: consecutive jobs of a round trained together (fewer: client_memory)
STRAGGLER = 4  # a client of this many times the median steps of the clients left or more trains in a later tier


def why_not_vectorized(client: ClientTrainer) -> str | None:
    """Why ``client``'s training cannot run vectorized (None: it can); the plans' own limits are checked per job."""
    module, optimizer = client.module, client.optimizer.optimizer
    overridden = [hook for hook in HOOKS if getattr(type(module), hook) is not getattr(LightningModule, hook)]
    privacy = client.privacy
    reasons = {
        f"trainer.privacy {type(privacy).__name__} trains one client at a time (DPSGD vectorizes)": (
            privacy.private and not isinstance(privacy, DPSGD)
        ),
        "trainer.privacy.secure_mode draws from Opacus' secure generator, one client at a time": (
            isinstance(privacy, DPSGD) and privacy.secure_mode
        ),
        f"the model's optimizer {type(optimizer).__name__} is not one it steps per client (SGD, Adam, AdamW, Adagrad, "
        "RMSprop)": (type(optimizer) not in ELEMENTWISE),
        f"the model overrides the training hooks {overridden}": bool(overridden),
        "trainer.precision must be 32-true": getattr(client.fabric.strategy.precision, "precision", "") != "32-true",
    }
    return next((reason for reason, holds in reasons.items() if holds), None)


class _GroupBatch(NamedTuple):
    """The batches of a group of clients at a step, stacked; the examples in each; the clients' generators (their
    dropout masks, where the model draws them)."""

    batch: Batch
    size: int
    generators: list[torch.Generator]


@dataclass
class _Leaves:
    """Each parameter's stacked rows ``[clients, *shape]`` by name (``params``), as autograd leaves that share memory
    with the stacked weights and that the optimizer steps, the same rows outside autograd (``rows``, in that order),
    and the views of the weights' flat gradients (``grads``), where a local rule, clipping or DP-SGD reads and writes a
    client's gradient as one row. A step of the first clients only back-propagates into leaves of their rows
    (``prefix``), not into slices of the whole, whose backward pass fills every row."""

    params: dict[str, Tensor]
    rows: list[Tensor]
    grads: dict[str, Tensor]
    zero_from: int | None = None  # the flat gradients' rows from here on are zero (None: not known)
    taken: tuple[int, list[Tensor]] | None = None  # the first clients' gradients of the step, where only theirs

    def prefix(self, active: int) -> dict[str, Tensor]:
        """Leaves of the first ``active`` rows of each parameter (views of them)."""
        return {name: leaf[:active].detach().requires_grad_() for name, leaf in self.params.items()}

    def absorb(self, prefix: dict[str, Tensor], active: int) -> None:
        """Takes the gradients of the leaves ``prefix`` (``prefix(active)``) as the step's: each row below them 0."""
        self.taken = (
            active,
            [leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in prefix.values()],
        )

    def collect(self) -> None:
        """Moves the gradients of the backward pass just taken into the flat gradients (zero where a leaf got none):
        autograd writes each afresh in its leaf's layout, and adding into a strided view instead is no faster."""
        if self.taken is not None:
            active, taken = self.taken
            for grad, part in zip(self.grads.values(), taken, strict=True):
                grad[:active].copy_(part)
                if self.zero_from is None or self.zero_from > active:
                    grad[active : self.zero_from].zero_()
            self.zero_from, self.taken = active, None
            return
        for name, leaf in self.params.items():
            if leaf.grad is None:
                self.grads[name].zero_()
            else:
                self.grads[name].copy_(leaf.grad)
                leaf.grad = None
        self.zero_from = None

    def step(self, optimizer: torch.optim.Optimizer, flat: bool, sgd: dict[str, Any] | None) -> None:
        """Steps the leaves with their gradients: the flat gradients where ``flat`` (collected, then read or written
        there), else the backward pass's own (zero where a leaf got none, as in the flat gradient one client at a time
        steps: a copy fewer a step); ``sgd``: the optimizer's settings where it is plain SGD (``_plain_sgd``), which
        steps only the first clients' rows where only theirs have gradients."""
        if self.taken is not None:
            if sgd is not None:
                active, taken = self.taken
                functional_sgd([row[:active] for row in self.rows], taken, [None] * len(taken), **sgd)  # type: ignore[arg-type]
                self.taken = None
                return
            self.collect()
            flat = True
        for name, leaf in self.params.items():
            if flat:
                leaf.grad = self.grads[name]
            elif leaf.grad is None:
                leaf.grad = self.grads[name].zero_()
        if sgd is None:
            optimizer.step()
        else:
            grads = [leaf.grad for leaf in self.params.values()]
            functional_sgd(self.rows, grads, [None] * len(self.rows), **sgd)  # type: ignore[arg-type]
        for leaf in self.params.values():
            leaf.grad = None


class _LoggedRows:
    """What the module logs at the steps of clients trained together, logged once they are done (a mean and a call a
    step took half as long as a small MLP's optimizer step): each name's values, one a client (or example), each with
    its weight, the batch size it was logged with."""

    def __init__(self) -> None:
        self.values: dict[str, list[Tensor]] = {}
        self.weights: dict[str, list[int]] = {}

    def add(self, name: str, values: Tensor, weight: int | list[int]) -> None:
        """``values``, one a client, each with ``weight`` (or its own of ``weight``)."""
        self.values.setdefault(name, []).append(values.float())
        self.weights.setdefault(name, []).extend(weight if isinstance(weight, list) else [weight] * len(values))

    def log_to(self, logged: LoggedValues) -> None:
        """Logs each name's weighted mean, with the sum of its weights as its batch size; then holds nothing."""
        for name, values in self.values.items():
            rows = torch.cat(values)
            weights = self.weights[name]
            total = sum(weights)
            mean = rows @ torch.tensor(weights, dtype=rows.dtype, device=rows.device) / total
            logged.log(name, mean, batch_size=total)
        self.values.clear()
        self.weights.clear()


@dataclass(frozen=True)
class _Row:
    """One client's row of the stacked parameters and buffers: what a vectorizing rule sees as ``context.flat``."""

    params: Tensor
    buffers: Tensor


class _TrainingStep(nn.Module):
    """``module.training_step`` as a module's forward, for ``torch.func.functional_call``."""

    def __init__(self, module: LightningModule) -> None:
        super().__init__()
        self.module = module

    def forward(self, batch: Batch, batch_idx: int) -> Tensor:
        return training_loss(self.module, batch, batch_idx)


class VectorizedClients:
    """``ClientTraining`` that trains each chunk of a process's jobs as one batched computation on the reference
    client's module (one lane): as many as their memory allows (``client_memory``), or with ``auto`` blocks of
    ``AUTO_BLOCK`` consecutive jobs of the round (fewer if memory says so), which the engine deals to processes whole,
    so that a client's rounding does not depend on the number of processes. Refused, in one line, for a module,
    optimizer or plan it cannot run exactly: ``why_not_vectorized``, and a local rule that does not declare
    ``LocalRule.vectorizes``, and in any chunk a ``training_step`` that draws a random number under vmap or reads what
    differs between the clients computed together (``DiffersByClient``). With ``auto`` (``clients_in_parallel:
    auto``) such a job trains alone instead, a model whose first chunk fails to vectorize, or whose ``training_step``
    does either in any chunk, trains one client at a time from then on, which one line says, and torch runs on one
    intra-op thread, the same on any number of processes. ``composed``: a run whose client i trains on process i %
    world (per-client state); each process then stacks its own clients, and a client's update must not depend on the
    clients stacked with it: only a module computed in one padded call a step (folded or on batched matmuls), whose
    rows are computed alike at any position of any stack, trains so, a client alone as a stack of one."""

    lanes = 1

    def __init__(self, client: ClientTrainer, auto: bool = False, composed: bool = False) -> None:
        reason = why_not_vectorized(client)
        if reason is not None:
            raise ConfigError(f"trainer.clients_in_parallel vectorized: {reason}")
        self.client, self.strict, self.composed = client, not auto, composed
        memory = max(1, chunk_budget(client.fabric.device, fixed=auto) // client_bytes(client))
        self.chunk = memory if self.strict else min(AUTO_BLOCK, memory)
        self.block = 1 if self.strict else self.chunk  # 1: the engine balances the processes' shares
        self._alone = False  # every client trains alone: the model failed to vectorize (not strict)
        self._tried = False
        self._per_epoch: list[int] = []  # the batches of an epoch of each client trained together
        self._step = _TrainingStep(client.module)
        named = federated_parameters(client.module)  # the order of the flat parameters
        groups = client.optimizer.optimizer.param_groups
        group_of = {id(p): g for g, group in enumerate(groups) for p in group["params"]}
        offsets = [0, *itertools.accumulate(p.numel() for _, p in named)]
        self.columns = [  # the flat columns of each optimizer group's parameters, in flat order
            torch.cat(
                [torch.arange(offsets[i], offsets[i + 1]) for i, (_, p) in enumerate(named) if group_of[id(p)] == g]
            )
            for g in range(len(groups))
        ]
        starts = {g: 0 for g in range(len(groups))}
        self.layout = []  # each parameter's name, optimizer group, first column in its group's tensor, and shape
        for name, p in named:
            g = group_of[id(p)]
            self.layout.append((f"module.{name}", g, starts[g], p.shape))
            starts[g] += p.numel()
        floating = [(name, b) for name, b in client.module.named_buffers() if b.is_floating_point()]  # flat order
        offsets = [0, *itertools.accumulate(b.numel() for _, b in floating)]
        self.buffer_layout = [(f"module.{name}", offsets[i], b.shape) for i, (name, b) in enumerate(floating)]
        self._slots = ParameterSlots(self._step, [name for name, *_ in self.layout])  # a folded step's parameters
        self._logged_sizes: dict[str, int | None] = {}  # the batch_size each name was logged with
        self._logged_rows = _LoggedRows()  # what a chunk's steps logged, until its clients are done
        self._vmapped = torch.vmap(self._loss, in_dims=(0, 0, None), randomness="error")
        self._stacked = stacked_classifier(client.module)  # batched matmuls instead of vmap, where the model allows
        # the clients still training at a step computed in one call, their batches padded (``_rows_loss``): on
        # batched matmuls, or folded (``folded_step``, checked against vmap once: ``_fold_checked``); none with
        # running statistics
        self._prefix = self._stacked is not None or may_fold(client.module)
        self._fold_checked = self._stacked is not None
        self._draws = self._prefix if self._stacked is None else self._stacked.draws
        self._per_example = torch.vmap(self._example_loss, in_dims=(0, 0, None), randomness="error")
        self.private = client.privacy if isinstance(client.privacy, DPSGD) else None
        if self.private is not None and len(self.columns) > 1:
            raise ConfigError("trainer.clients_in_parallel vectorized: DP-SGD with one optimizer group only")

    @property
    def reference(self) -> ClientTrainer:
        return self.client

    def logged(self) -> LoggedValues:
        return self.client.logged

    def call(self, hook: str) -> None:
        getattr(self.client.module, hook)()

    def between_runs(self) -> AbstractContextManager[None]:
        return nullcontext()

    def close(self) -> None:
        """Holds nothing between runs."""

    def train(self, jobs: Sequence[TrainingJob], deliver: Deliver, deliver_rows: DeliverRows | None = None) -> None:
        """Trains each chunk of ``chunk`` consecutive jobs in tiers of clients with alike numbers of steps
        (``_tiers``: a batched step costs as much for one client left as for all), each tier's clients with the same
        optimizer settings together, a tier of one client alone; delivers the clients trained together as rows where
        ``deliver_rows`` is given, then the others in job order (else every job in job order)."""
        with nullcontext() if self.strict else torch_threads(1), exact_convolutions(self.client.fabric.device):
            trained: dict[int, ClientUpdate] = {}  # by position, delivered in job order
            as_rows: set[int] = set()  # the positions delivered as rows
            for start in range(0, len(jobs), self.chunk):
                chunk = list(range(start, min(start + self.chunk, len(jobs))))
                for part, rows in [] if self._alone else self._train_chunk(jobs, chunk):
                    if deliver_rows is None:
                        trained.update(zip(part, rows.updates(), strict=True))
                    else:
                        deliver_rows(0, rows)
                        as_rows.update(part)
            for index, job in enumerate(jobs):
                if index not in as_rows:
                    alone = index not in trained
                    update = self.client.train(job.plan, job.params, job.buffers) if alone else trained.pop(index)
                    deliver(0, index, update)

    def _train_chunk(self, jobs: Sequence[TrainingJob], chunk: list[int]) -> list[tuple[list[int], ClientRows]]:
        """The jobs at the positions ``chunk`` that train together: each part's positions and updates."""
        together: dict[tuple[int, float | None, int], list[int]] = {}  # a tier's clients with alike settings
        sizes = self.client.data.client_sizes([jobs[index].plan.client_id for index in chunk])
        steps = {index: self._steps(jobs[index].plan, size) for index, size in zip(chunk, sizes, strict=True)}
        # tiers where a step costs as much for one client left as for all; one tier where it costs what they do
        for tier, members in enumerate([list(steps)] if self._prefix else _tiers(steps)):
            if len(members) == 1 and not self.composed:  # trains alone
                continue
            for index in members:
                plan = jobs[index].plan
                if self.strict or self._vectorizes(plan.rule):  # lr and round make the settings (group_settings)
                    together.setdefault((tier, plan.lr, plan.round), []).append(index)
        trained: list[tuple[list[int], ClientRows]] = []
        for members in together.values():
            part = [members[i] for i in self._longest_first([jobs[index].plan for index in members])]
            try:
                trained.append((part, self._train_together([jobs[i] for i in part])))
            except Exception as error:
                name = type(self.client.module).__name__
                if self.strict and isinstance(error, DiffersByClient):
                    raise ConfigError(
                        f"trainer.clients_in_parallel vectorized: {name} {error}: set it to 'auto' or 1"
                    ) from error
                if self.strict and _draws_under_vmap(error):
                    where = (
                        "every example's gradient under DP-SGD is taken under vmap"
                        if self.private is not None
                        else "dropout is supported on batched matmuls, e.g. lightfed's MLP"
                    )
                    raise ConfigError(
                        f"trainer.clients_in_parallel vectorized: {name} draws random numbers in training_step under "
                        f"vmap, which cannot give each client its own ({where}): set it to 'auto' or 1"
                    ) from error
                in_training_step = isinstance(error, (DiffersByClient, NotFolded)) or _draws_under_vmap(error)
                if self.strict or (self._tried and not in_training_step):
                    raise
                self._alone = True
                self.client.fabric.print(
                    f"trainer.clients_in_parallel auto trains one client at a time: {name} does not train vectorized "
                    f"({type(error).__name__}: {str(error).splitlines()[0]})"
                )
                return trained
            finally:
                self._tried = True
        return trained

    def _vectorizes(self, rule: LocalRule | None) -> bool:
        """Whether a client with the local rule ``rule`` trains on a row of stacked clients."""
        private_twice = self.private is not None and rule is not None and rule.gradients_per_step > 1
        return rule is None or (
            rule.vectorizes and not rule.takes_step and len(self.columns) == 1 and not private_twice
        )

    def _steps(self, plan: ClientPlan, size: int) -> int:
        """The local steps of ``plan`` of a client of ``size`` examples: its steps, or its epochs' batches."""
        if plan.steps is not None or plan.epochs is None:
            return plan.steps or 0
        return plan.epochs * self.client.data.batches_of(size)

    def _train_together(self, jobs: list[TrainingJob], plain_sgd: float | None = None) -> ClientRows:
        """Every job's update, trained as one batched computation (``plain_sgd``: with plain SGD at that step size,
        unclipped, instead of the model's optimizer: prior steps)."""
        if plain_sgd is None:
            self._take_prior_steps(jobs)
        self._logged_rows = _LoggedRows()  # nothing left by a chunk that failed
        client, module, view = self.client, self.client.module, self.client.view
        clients, device = len(jobs), client.fabric.device
        starts = _rows([job.params for job in jobs], device)  # a job's may be kept on the CPU (Ditto's)
        buffers = _rows([job.buffers for job in jobs], device).clone()  # each client's running statistics
        single = len(self.columns) == 1  # one optimizer group: its tensor is the flat parameters
        weights = [starts.clone() if single else starts[:, columns.to(device)] for columns in self.columns]
        settings = client.group_settings(jobs[0].plan) if plain_sgd is None else [{"lr": plain_sgd}]
        build: Callable[[list[dict[str, Any]]], torch.optim.Optimizer] = (
            type(client.optimizer.optimizer) if plain_sgd is None else torch.optim.SGD
        )
        leaves = self._leaves(weights)
        grouped = [[leaves.params[name] for name, g, *_ in self.layout if g == i] for i in range(len(weights))]
        optimizer = build([{**group, "params": params} for group, params in zip(settings, grouped, strict=True)])
        sgd = _plain_sgd(optimizer)
        rules = self._rules(jobs, weights, buffers)
        if self.private is None:
            private, batches = None, self._batches(jobs)
        else:
            shapes = [shape for _, _, _, shape in self.layout]
            plans = [job.plan for job in jobs]
            private = PrivateClients(self.private, plans, client.data, shapes, client.attack, device)
            batches = ListedBatches(private.batches)
        sizes = batches.sizes
        steps = [len(client_sizes) for client_sizes in sizes]
        schedule = _schedule(sizes)
        draws = self._draws  # seeded as one-at-a-time seeds torch's generator:
        generators = [torch.Generator(device).manual_seed(job.plan.seed) for job in jobs] if draws else []
        reports = {k: rule.report() for k, rule in rules.items() if not steps[k]}  # the others' after their last step
        finishing: dict[int, list[int]] = {}
        for k, n in enumerate(steps):
            finishing.setdefault(n - 1, []).append(k)
        at_once = single and len(finishing) == 1  # every client ends at the last step: the weights are the final rows
        final, final_buffers = (weights[0], buffers) if at_once else (starts.clone(), buffers.clone())  # taken rows
        loss_sums = torch.zeros(clients, device=device)
        if not module.training:
            module.train()
        view._enter("train", jobs[0].plan.round)
        num_examples = client.data.client_sizes([job.plan.client_id for job in jobs])
        self._per_epoch = [client.data.batches_of(n) for n in num_examples]
        clip = plain_sgd is None and client.gradient_clip_val is not None
        flat = private is not None or bool(rules) or clip  # the step's gradients are read as rows of the flat ones
        try:
            for step in range(max(steps, default=0)):

                def backward(clients: set[int], losses: Tensor, step: int = step) -> None:
                    """The summed losses of ``clients`` at ``step`` back-propagated: each one's gradient in its row."""
                    taking = [client_sizes if k in clients else [] for k, client_sizes in enumerate(sizes)]
                    self._backward(self._groups(taking, step), step, leaves, buffers, batches, generators, losses)
                    leaves.collect()

                if private is None:
                    self._backward(schedule[step], step, leaves, buffers, batches, generators, loss_sums)
                    if flat:
                        leaves.collect()
                else:
                    active = [k for k, n in enumerate(steps) if step < n]
                    batch = [(private.batches[k][step], sizes[k][step]) for k in active]
                    self._private_step(private, weights[0], buffers, active, batch, step, loss_sums)
                grads: list[Tensor] = [weight.grad for weight in weights]  # type: ignore[misc]
                points = {
                    k: point
                    for k, rule in rules.items()
                    if step < steps[k] and (point := rule.second_point(weights[0][k].detach(), grads[0][k])) is not None
                }
                if points:
                    self._at_second_points(points, rules, weights[0], buffers, backward, settings[0]["lr"])
                for k, rule in rules.items():
                    if step < steps[k] and k not in points:
                        rule.adjust(grads[0][k], weights[0][k].detach())
                if clip:
                    self._clip(grads)
                for k, rule in rules.items():
                    if step < steps[k]:
                        rule.observe(grads[0][k])
                leaves.step(optimizer, flat, sgd)
                if step in finishing and not at_once:
                    self._take(final, final_buffers, weights, buffers, finishing[step])
                for k in finishing.get(step, []):
                    if k in rules:
                        reports[k] = rules[k].report()
        finally:
            view._enter("")
        self._logged_rows.log_to(client.logged)
        if private is not None:
            private.finish()
        for weight in weights:
            weight.grad = None  # not kept with the rows returned (the first weights, where every client ends at once)
        train_losses = loss_sums / torch.tensor(steps, device=device).clamp(min=1)
        lr = settings[0]["lr"]
        local_times = {n: _summed(lr, n) for n in set(steps)}
        return ClientRows(
            client_ids=[job.plan.client_id for job in jobs],
            deltas=final.sub_(starts),
            buffers=final_buffers,
            num_examples=num_examples,
            num_steps=steps,
            local_times=[local_times[n] for n in steps],
            train_losses=train_losses,
            reports=[reports.get(k, {}) for k in range(clients)],
        )

    def _backward(
        self,
        groups: list[tuple[int, list[int]]],
        step: int,
        leaves: _Leaves,
        buffers: Tensor,
        batches: ListedBatches | GatheredBatches,
        generators: list[torch.Generator],
        losses: Tensor,
    ) -> None:
        """Back-propagates the summed losses at ``step`` of the ``groups`` of clients (``_groups``: each batch size
        with its clients) into the leaves' gradients; ``generators``: each client's (dropout), or none. Where the
        clients are the first ones, in one call on their batches padded (``_rows_loss``); else, where each group's
        clients are one after another, a call per group on views."""
        if self._prefix and groups:
            calls = _row_calls(groups)
            if self.composed and (calls is None or len(calls) > 1):
                raise NotFolded("its clients still training are not the first ones")  # not under vmap: see composed
            stack = len(buffers)
            active = calls[0][0].stop if calls is not None and len(calls) == 1 else stack
            params = leaves.params if active == stack else leaves.prefix(active)
            with self._slots.holding(list(params.values())) if self._stacked is None else nullcontext():
                loss = None if calls is None else self._calls_loss(calls, step, params, batches, generators, losses)
            if loss is not None:
                loss.backward()
                if active < stack:
                    leaves.absorb(params, active)
                return
        total: Tensor | None = None
        for size, group in groups:
            stacked = _GroupBatch(
                batches.stacked(step, group), size, [generators[k] for k in group] if generators else []
            )
            loss = self._loss_of(group, leaves.params, buffers, stacked, step, losses)
            total = loss if total is None else total + loss
        if total is not None:
            total.backward()  # each client's loss reaches only its own row

    @staticmethod
    def _at_second_points(
        points: dict[int, Tensor],
        rules: dict[int, LocalRule],
        weights: Tensor,
        buffers: Tensor,
        backward: Callable[[set[int], Tensor], None],
        lr: float,
    ) -> None:
        """Hands each client's rule in ``points`` (by position) its batch's gradient at the point it asked for
        (``LocalRule.second_point``), taken for all of them at once; the weights are then as they were, and the
        gradients and the buffers too, except a gradient the rule replaces and the running statistics it keeps
        (``LocalRule.keeps_second_statistics``)."""
        assert weights.grad is not None
        saved, saved_grads, saved_buffers = weights.clone(), weights.grad.clone(), buffers.clone()
        index = device_index(list(points), weights.device)
        weights.index_copy_(0, index, torch.stack(list(points.values())))
        backward(set(points), torch.zeros(len(saved), device=weights.device))  # their losses count once, at w
        for k in points:
            replaced = rules[k].at_second_point(weights.grad[k].clone(), saved[k], lr)
            if replaced is not None:
                saved_grads[k] = replaced
            if rules[k].keeps_second_statistics:
                saved_buffers[k] = buffers[k]
        weights.copy_(saved)
        weights.grad.copy_(saved_grads)
        buffers.copy_(saved_buffers)

    def _take_prior_steps(self, jobs: list[TrainingJob]) -> None:
        """Takes the prior steps of the jobs' rules that have them (Ditto's personal model) as one batched computation
        per step size, and hands each rule its end (``LocalRule.prior_stepped``)."""
        rules = {k: job.plan.rule for k, job in enumerate(jobs) if job.plan.rule is not None}
        priors = {k: prior for k, rule in rules.items() if (prior := rule.prior_steps(jobs[k].params)) is not None}
        by_lr: dict[float, list[int]] = {}
        for k, prior in priors.items():
            lr = self.client.group_settings(jobs[k].plan)[0]["lr"] if prior.lr is None else prior.lr
            by_lr.setdefault(lr, []).append(k)
        for lr, part in by_lr.items():
            prior_jobs = []
            for k in part:
                plan, prior = jobs[k].plan, priors[k]
                given = prior.buffers is not None and prior.buffers.numel() == jobs[k].buffers.numel()
                rule = ProximalTerm(prior.pull, anchor=prior.anchor)
                prior_plan = ClientPlan(plan.client_id, plan.round, prior.seed, prior.epochs, prior.steps, rule=rule)
                prior_jobs.append(TrainingJob(prior_plan, prior.params, prior.buffers if given else jobs[k].buffers))  # type: ignore[arg-type]
            order = self._longest_first([job.plan for job in prior_jobs])
            part, prior_jobs = [part[i] for i in order], [prior_jobs[i] for i in order]
            with self.client.unrecorded():
                updates = self._train_together(prior_jobs, plain_sgd=lr).updates()
            for k, job, update in zip(part, prior_jobs, updates, strict=True):
                rules[k].prior_stepped(job.params + update.delta.to(job.params.device), update.buffers.clone())

    def _longest_first(self, plans: list[ClientPlan]) -> list[int]:
        """The positions of ``plans``, the clients with the most steps first, those with as many by the size of their
        last batch: the clients still training at a step, and those that end there, are then the first ones."""
        data = self.client.data
        sizes, batch = data.client_sizes([plan.client_id for plan in plans]), data.batch_size
        keys = [(-self._steps(plan, size), -(size % batch or batch)) for plan, size in zip(plans, sizes, strict=True)]
        return sorted(range(len(plans)), key=keys.__getitem__)

    def _rules(self, jobs: list[TrainingJob], weights: list[Tensor], buffers: Tensor) -> dict[int, LocalRule]:
        """The jobs' local rules, by position, each started on its client's row (its ``context.flat``: the row of
        ``weights`` and of ``buffers``) with the live module at the client's received weights, as one client at a time
        starts it; refuses a rule that does not run on a row of stacked clients."""
        rules = {k: job.plan.rule for k, job in enumerate(jobs) if job.plan.rule is not None}
        for k, rule in rules.items():
            if not self._vectorizes(rule):
                reason = (
                    "yet"
                    if not rule.vectorizes or rule.takes_step
                    else "with one optimizer group"
                    if len(self.columns) > 1
                    else "under DP-SGD (two gradients a step)"
                )
                raise ConfigError(
                    f"trainer.clients_in_parallel vectorized does not run the local rule {type(rule).__name__} {reason}"
                )
            self.client.prepare(jobs[k].plan, jobs[k].params, jobs[k].buffers)  # the live module, as one at a time
            rule.start(jobs[k].params, replace(self.client.context, flat=_Row(weights[0][k], buffers[k])))  # type: ignore[arg-type]
        return rules

    def _leaves(self, weights: list[Tensor]) -> _Leaves:
        """Each parameter's stacked rows as leaves that share memory with ``weights`` (which the optimizer steps), and
        the views of the ``weights``' gradients (set here) they go to: a gradient per parameter, instead of one of the
        whole flat row per parameter (a quarter of a step of a small MLP)."""
        for weight in weights:
            weight.grad = torch.empty_like(weight)  # written before it is read: ``_Leaves.collect`` and ``step``
        params, rows, grads = {}, [], {}
        for name, g, start, shape in self.layout:
            columns = slice(start, start + math.prod(shape))
            rows.append(weights[g][:, columns].view(-1, *shape))
            params[name] = rows[-1].detach().requires_grad_()
            grads[name] = weights[g].grad[:, columns].view(-1, *shape)  # type: ignore[index]
        return _Leaves(params, rows, grads)

    def _take(
        self, final: Tensor, final_buffers: Tensor, weights: list[Tensor], buffers: Tensor, rows: list[int]
    ) -> None:
        """Copies the flat parameters and buffers of the clients ``rows`` (that have taken their last step) into their
        rows of ``final`` and ``final_buffers``."""
        if len(rows) == len(final) and len(weights) == 1:  # every client at once
            final.copy_(weights[0])
            final_buffers.copy_(buffers)
            return
        if len(weights) == 1 and rows == list(range(rows[0], rows[0] + len(rows))):  # one after another: views
            at = slice(rows[0], rows[0] + len(rows))
            final[at].copy_(weights[0][at])
            final_buffers[at].copy_(buffers[at])
            return
        index = device_index(rows, final.device)
        final_buffers.index_copy_(0, index, buffers.index_select(0, index))
        with torch.no_grad():
            for columns, weight in zip(self.columns, weights, strict=True):
                if len(weights) == 1:
                    final.index_copy_(0, index, weight.index_select(0, index))
                else:
                    final[index.unsqueeze(1), columns.to(final.device)] = weight.index_select(0, index)

    def _batches(self, jobs: list[TrainingJob]) -> ListedBatches | GatheredBatches:
        """The jobs' batches, drawn as their one-at-a-time training draws them (and poisoned as an attack would):
        gathered at once from an in-memory dataset where none is augmented or poisoned."""
        data, attack = self.client.data, self.client.attack
        tensors = data.plain_tensors
        if tensors is None or any(attack.is_malicious(job.plan.client_id) for job in jobs):
            return ListedBatches(
                width=data.batch_size,
                batches=[
                    list(
                        attack.batches(
                            data.client_batches(
                                job.plan.client_id,
                                torch.Generator().manual_seed(job.plan.seed),
                                job.plan.epochs,
                                job.plan.steps,
                            ),
                            job.plan,
                        )
                    )
                    for job in jobs
                ],
            )
        return GatheredBatches(
            tensors, [(job.plan.client_id, job.plan.seed, job.plan.epochs, job.plan.steps) for job in jobs]
        )

    @staticmethod
    def _groups(sizes: list[list[int]], step: int) -> list[tuple[int, list[int]]]:
        """The clients still training at ``step``, grouped by the size of their batch there (``sizes``: each
        client's batch sizes), with that size."""
        groups: dict[int, list[int]] = {}
        for k, client_sizes in enumerate(sizes):
            if step < len(client_sizes):
                groups.setdefault(client_sizes[step], []).append(k)
        return list(groups.items())

    def _loss_of(
        self,
        group: list[int],
        leaves: dict[str, Tensor],
        buffers: Tensor,
        stacked: "_GroupBatch",
        step: int,
        losses: Tensor,
    ) -> Tensor:
        """The sum of the losses of ``group``'s clients on their ``stacked`` batches at ``step``: a function of their
        rows of the stacked parameters ``leaves`` and of ``buffers`` (running statistics, updated in place); adds each
        to its client's entry of ``losses`` and logs what the module logs, as its clients one at a time would
        (batch-size weighted)."""
        batch, size, generators = stacked
        self._show(group, step)
        whole = len(group) == buffers.shape[0]
        index = None if whole else device_index(group, buffers.device)
        statistics_rows = buffers if index is None else buffers.index_select(0, index)
        params = dict(leaves) if index is None else {name: leaf.index_select(0, index) for name, leaf in leaves.items()}
        params.update(  # copies: under vmap an in-place update of a strided view is lost
            (name, statistics_rows[:, start : start + math.prod(shape)].reshape(-1, *shape).clone())
            for name, start, shape in self.buffer_layout
        )
        batched = None if self._stacked is None else self._stacked.loss(params, batch, generators)
        loss, logged, updated = (*batched, []) if batched else self._vmapped(params, batch, step)
        if updated:
            updated_rows = torch.cat(updated, dim=1)
            if index is None:
                buffers.copy_(updated_rows)
            else:
                buffers.index_copy_(0, index, updated_rows)
        if index is None:
            losses.add_(loss.detach())
        else:
            losses.index_add_(0, index, loss.detach())
        for name, values in logged.items():
            self._logged_rows.add(name, values, self._logged_sizes.get(name) or size)
        return loss.sum()

    def _calls_loss(
        self,
        calls: list[tuple[slice, int | None, list[tuple[int, list[int]]]]],
        step: int,
        leaves: dict[str, Tensor],
        batches: ListedBatches | GatheredBatches,
        generators: list[torch.Generator],
        losses: Tensor,
    ) -> Tensor | None:
        """The summed losses at ``step`` of the ``calls``' clients (``_row_calls``), a call each (``_rows_loss``), added
        to their entries of ``losses`` with what the module logs (weighted by each client's examples) once every call
        is done; None where the module does not compute folded, which one line says (its first folded step is
        compared with vmap's: ``_check_fold``)."""
        try:
            computed = [
                self._rows_loss(at, size, step, leaves, batches, generators, groups) for at, size, groups in calls
            ]
        except NotFolded as error:
            if self.composed:  # under vmap, a client's rows would be computed with its group's
                raise
            self._prefix = False
            self.client.fabric.print(
                f"trainer.clients_in_parallel trains {type(self.client.module).__name__}'s clients under vmap: {error}"
            )
            return None
        total: Tensor | None = None
        for (at, _, _), (loss, logged, sizes) in zip(calls, computed, strict=True):
            losses[at].add_(loss.detach())
            for name, values in logged.items():
                self._logged_rows.add(name, values, self._logged_sizes.get(name) or sizes)
            total = loss.sum() if total is None else total + loss.sum()
        return total

    def _rows_loss(
        self,
        at: slice,
        size: int | None,
        step: int,
        leaves: dict[str, Tensor],
        batches: ListedBatches | GatheredBatches,
        generators: list[torch.Generator],
        groups: list[tuple[int, list[int]]],
    ) -> tuple[Tensor, dict[str, Tensor], list[int]]:
        """The losses at ``step`` of the clients ``at`` (one after another) in one call: on their batches of ``size``,
        or padded to the widest (``size`` None; each client's loss over its own examples); what the module logged and
        the clients' batch sizes; ``groups``: theirs, by batch size, for ``_check_fold``."""
        self._show(list(range(at.start, at.stop)), step)
        batch, counts = batches.rows(step, at, size)
        sizes = [batches.sizes[k][step] for k in range(at.start, at.stop)]
        mine = generators[at]
        if self._stacked is not None:
            stacked = next(iter(leaves.values())).shape[0]
            whole = at.start == 0 and at.stop == stacked
            params = leaves if whole else {name: leaf[at] for name, leaf in leaves.items()}
            loss, logged = self._stacked.padded_loss(params, batch, mine, counts, sizes)
        else:
            if not self._fold_checked:
                self._check_fold(leaves, at, batch, counts, sizes, step, groups)
            loss, logged = self._folded_loss(leaves, at, batch, counts, mine, step, sizes)
        return loss, logged, sizes

    def _folded_loss(
        self,
        leaves: dict[str, Tensor],
        at: slice,
        batch: Batch,
        counts: Tensor,
        generators: list[torch.Generator],
        step: int,
        sizes: list[int],
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Each client's loss of its padded batch (``[clients, width, ...]``, its ``sizes`` its own) at its rows ``at`` of the stacked
        ``leaves`` (the module's parameters while the clients train: ``ParameterSlots``),
        ``training_step`` run once on the batches folded (``folded_step``), and what it logged, a value per client."""
        clients, width = len(counts), counts_width(batch)
        logged: dict[str, Tensor] = {}

        def log(name: str, value: Any, *args: Any, batch_size: int | None = None, **kwargs: Any) -> None:
            if not isinstance(value, Tensor) or value.numel() not in (1, clients):
                raise NotFolded(f"training_step logs {name}, not a value per client")
            logged[name] = value.detach().reshape(-1).expand(clients)
            self._logged_sizes[name] = None if batch_size == clients * width else batch_size

        def log_dict(values: dict[str, Any], *args: Any, **kwargs: Any) -> None:
            for name, value in values.items():
                log(name, value, *args, **kwargs)

        rows = {id(value) for value in leaves.values()}
        with (
            logging_to(self.client.module, log, log_dict),
            FoldedStep(rows, at, counts, sizes, width, generators),
        ):
            loss = self._step(folded(batch), step)
        if loss.shape != (clients,):
            raise NotFolded(f"training_step returns a loss of shape {list(loss.shape)}, not one per client")
        return loss, logged

    def _check_fold(
        self,
        leaves: dict[str, Tensor],
        at: slice,
        batch: Batch,
        counts: Tensor,
        sizes: list[int],
        step: int,
        groups: list[tuple[int, list[int]]],
    ) -> None:
        """Compares the folded losses and gradients of a step with vmap's (``FOLD_TOLERANCE``, relative), once, in eval
        mode (``_probing``); raises ``NotFolded`` where they differ (a step that acts across examples: a batch norm, a
        mean over the batch) or where ``training_step`` fails on folded batches (it reads their size, say)."""
        self._fold_checked = True
        try:
            with self._probing():
                loss, logged = self._folded_loss(leaves, at, batch, counts, [], step, sizes)
        except (LightfedError, DiffersByClient, NotFolded):
            raise
        except Exception as error:
            reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            raise NotFolded(f"its training_step fails on folded batches ({reason})") from error
        folded = torch.autograd.grad(loss.sum(), list(leaves.values()), allow_unused=True)
        expected = {name: loss.new_zeros(len(counts)) for name in ("loss", *logged)}
        total = loss.new_zeros(())
        for size, group in groups:
            index = device_index(group, loss.device)  # the clients' stacked rows
            within = device_index([k - at.start for k in group], loss.device)  # theirs of ``batch``
            rows = {name: value.index_select(0, index) for name, value in leaves.items()}
            group_batch = apply_to_collection(
                batch, Tensor, lambda t, within=within, size=size: t.index_select(0, within)[:, :size]
            )
            with self._probing():
                group_loss, group_logged, _ = self._vmapped(rows, group_batch, step)
            if set(group_logged) != set(logged):
                raise NotFolded(f"its training_step logged {sorted(logged)} folded, {sorted(group_logged)} under vmap")
            for name, values in {"loss": group_loss.detach(), **group_logged}.items():
                expected[name].index_add_(0, within, values.float())
            total = total + group_loss.sum()
        vmapped = torch.autograd.grad(total, list(leaves.values()), allow_unused=True)
        found = {"loss": loss.detach(), **logged}
        differences = [_relative(found[name], values) for name, values in expected.items()] + [
            _relative(a, b) for a, b in zip(folded, vmapped, strict=True) if a is not None and b is not None
        ]
        if max(differences) > FOLD_TOLERANCE or sum(g is None for g in folded) != sum(g is None for g in vmapped):
            raise NotFolded(f"its training_step computed otherwise on folded batches ({max(differences):.2g})")

    @contextmanager
    def _probing(self) -> Iterator[None]:
        """The module in eval mode (no dropout, which vmap refuses: no draw from the clients' generators), and the
        batch sizes it logs with kept as they were."""
        saved = dict(self._logged_sizes)
        self.client.module.eval()
        try:
            yield
        finally:
            self.client.module.train()
            self._logged_sizes = saved

    def _show(self, clients: list[int], step: int) -> None:
        """``self.trainer`` of the ``clients`` (by position) computed together at ``step``: their step and epochs."""
        per_epoch = self._per_epoch
        self.client.view._together(step, lambda: {step // per_epoch[k] for k in clients})

    def _private_step(
        self,
        private: PrivateClients,
        weights: Tensor,
        buffers: Tensor,
        active: list[int],
        batch: list[tuple[Batch, int]],
        step: int,
        losses: Tensor,
    ) -> None:
        """Sets ``weights.grad`` to the ``active`` clients' private gradients of their Poisson batches ``batch``
        (each with its size) at ``step``: every example's gradient at once (a row of the weights per example,
        back-propagated once), then ``PrivateClients.gradients``; adds each client's mean loss over its batch to its
        entry of ``losses`` (0 for an empty batch) and logs what the module logs per example, weighted by the
        examples."""
        sizes = [size for _, size in batch]
        owner = device_index([k for k, size in zip(active, sizes, strict=True) for _ in range(size)], weights.device)
        per_example = weights.new_zeros(0, weights.shape[1])
        if owner.numel():
            self._show(active, step)
            rows = weights.index_select(0, owner).requires_grad_()
            params = {name: rows[:, s : s + math.prod(shape)].reshape(-1, *shape) for name, _, s, shape in self.layout}
            statistics_rows = buffers.index_select(0, owner)
            params.update(
                (name, statistics_rows[:, s : s + math.prod(shape)].reshape(-1, *shape).clone())
                for name, s, shape in self.buffer_layout
            )
            examples = joined([b for b, size in batch if size], torch.cat)
            loss, logged, _ = self._per_example(params, examples, step)
            (per_example,) = torch.autograd.grad(loss.sum(), rows)
            for k, size, client_losses in zip(active, sizes, loss.detach().split(sizes), strict=True):
                if size:  # in a fixed order, as in ``PrivateClients.gradients``
                    losses[k] += client_losses.sum() / size
            for name, values in logged.items():
                self._logged_rows.add(name, values, 1)
        weights.grad.copy_(private.gradients(per_example, sizes, active))  # type: ignore[union-attr]

    def _example_loss(
        self, params: dict[str, Tensor], example: Any, step: int
    ) -> tuple[Tensor, dict[str, Tensor], list[Tensor]]:
        """``_loss`` of one example, as a batch of one (vmapped over the examples of every client)."""
        return self._loss(params, apply_to_collection(example, Tensor, lambda t: t.unsqueeze(0)), step)

    def _loss(
        self, params: dict[str, Tensor], batch: Batch, step: int
    ) -> tuple[Tensor, dict[str, Tensor], list[Tensor]]:
        """One client's loss of ``batch`` at ``params`` (vmapped over clients), with what the module logged and its
        floating buffers after the step (the running statistics it updated)."""
        logged: dict[str, Tensor] = {}

        def log(name: str, value: Any, *args: Any, batch_size: int | None = None, **kwargs: Any) -> None:
            if not isinstance(value, Tensor) or value.numel() != 1:
                what = f"a tensor of shape {list(value.shape)}" if isinstance(value, Tensor) else type(value).__name__
                raise ConfigError(
                    f"trainer.clients_in_parallel vectorized logs one-number tensors from training_step, not {name}: "
                    f"{what}"
                )
            logged[name], self._logged_sizes[name] = value.detach(), batch_size

        def log_dict(values: dict[str, Any], *args: Any, **kwargs: Any) -> None:
            for name, value in values.items():
                log(name, value, *args, **kwargs)

        with logging_to(self.client.module, log, log_dict):
            loss = torch.func.functional_call(self._step, params, (batch, step))
        return loss, logged, [params[name].detach().reshape(-1) for name, _, _ in self.buffer_layout]

    def _clip(self, grads: list[Tensor]) -> None:
        """Each client's gradient clipped as ``gradient_clip_val`` clips one client's."""
        value, algorithm = self.client.gradient_clip_val, self.client.gradient_clip_algorithm
        assert value is not None
        if algorithm != "norm":
            for grad in grads:
                grad.clamp_(-value, value)
            return
        norms = torch.stack([grad.norm(dim=1) for grad in grads], dim=1).norm(dim=1)
        scale = (value / (norms + 1e-6)).clamp(max=1.0)
        for grad in grads:
            grad.mul_(scale.unsqueeze(1))


@contextmanager
def exact_convolutions(device: torch.device) -> Iterator[None]:
    """On a GPU, cuDNN's deterministic algorithms in full float32 (no TF32) while stacked clients train, the previous
    settings restored after. With PyTorch's defaults (TF32 allowed, any algorithm) the clients' convolutions, batched
    under ``vmap``, computed otherwise than each client's alone: the quickstart trained vectorized for 2 rounds on an
    H200 ended 9.4e-3 from one client at a time, and 8.2e-8 with torch's deterministic algorithms and no TF32 at all,
    which these settings narrow to cuDNN's convolutions (docs/guides/performance.md)."""
    cudnn = torch.backends.cudnn
    saved = cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32
    if device.type == "cuda":
        cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32 = True, False, False
    try:
        yield
    finally:
        cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32 = saved


def _plain_sgd(optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
    """The arguments of torch's functional ``sgd`` (but the tensors) with which ``optimizer``'s step calls it, where
    it is an SGD of one group without momentum and with a float step size (None otherwise): ``SGD.step`` spends as long
    again on its bookkeeping (a tenth of a step of 50 clients of a small MLP), and calling ``sgd`` directly steps the
    same."""
    if type(optimizer) is not torch.optim.SGD or len(optimizer.param_groups) != 1:
        return None
    group = optimizer.param_groups[0]
    if group["momentum"] != 0 or group["differentiable"] or not isinstance(group["lr"], float):
        return None
    names = ("weight_decay", "momentum", "lr", "dampening", "nesterov", "maximize", "foreach", "fused")
    return {name: group[name] for name in names}


def _tiers(steps: dict[int, int]) -> list[list[int]]:
    """The clients (``steps``: each one's local steps) in tiers: those under ``STRAGGLER`` x the median steps, then
    the same among the rest, until none is left; at least half of the clients left are taken each time."""
    tiers, left = [], list(steps)
    while left:
        cutoff = STRAGGLER * max(1.0, statistics.median(steps[k] for k in left))
        tiers.append([k for k in left if steps[k] < cutoff])
        left = [k for k in left if steps[k] >= cutoff]
    return tiers


def _rows(tensors: list[Tensor], device: torch.device) -> Tensor:
    """``tensors`` as the rows of one tensor on ``device``: a broadcast view where they are one tensor (the global
    weights every client of a round starts from)."""
    if all(tensor is tensors[0] for tensor in tensors):
        return tensors[0].to(device).expand(len(tensors), -1)
    return torch.stack([tensor.to(device) for tensor in tensors])


def _row_calls(
    groups: list[tuple[int, list[int]]],
) -> list[tuple[slice, int | None, list[tuple[int, list[int]]]]] | None:
    """The calls that compute a step's ``groups`` of clients on views of the stacked rows, each its clients (one
    after another), their batch size (None: padded to the widest) and their groups: one call, padded, where the
    clients are the first ones; else a call per group whose clients are one after another; None where a group's are
    not."""
    active = sum(len(group) for _, group in groups)
    if all(group[-1] < active for _, group in groups):
        return [(slice(0, active), None, groups)]
    if any(group[-1] - group[0] != len(group) - 1 for _, group in groups):
        return None
    return [(slice(group[0], group[-1] + 1), size, [(size, group)]) for size, group in groups]


def _schedule(sizes: list[list[int]]) -> list[list[tuple[int, list[int]]]]:
    """Each step's groups of clients (``VectorizedClients._groups``) for clients with the batch sizes ``sizes``: one
    group a step where every client's are the same."""
    if sizes and sizes.count(sizes[0]) == len(sizes):
        everyone = list(range(len(sizes)))
        return [[(size, everyone)] for size in sizes[0]]
    return [VectorizedClients._groups(sizes, step) for step in range(max(map(len, sizes), default=0))]


def _summed(lr: float, steps: int) -> float:
    """``lr`` added ``steps`` times, as a client adds its step sizes to its local time."""
    total = 0.0
    for _ in range(steps):
        total += lr
    return total


def _relative(a: Tensor, b: Tensor) -> float:
    """The largest difference of ``a`` from ``b`` per row (client), relative to the row's norm."""
    a, b = a.reshape(len(a), -1).float(), b.reshape(len(b), -1).float()
    return float(((a - b).norm(dim=1) / b.norm(dim=1).clamp(min=1e-12)).max())


def _draws_under_vmap(error: Exception) -> bool:
    """Whether ``error`` is vmap's refusal of a random draw (``randomness="error"``)."""
    return isinstance(error, RuntimeError) and "called random operation" in str(error)
