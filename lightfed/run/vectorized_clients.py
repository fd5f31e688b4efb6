"""Client training as one batched computation: the clients of a round trained together on stacked weights.

Each client's weights are one row of a stacked tensor per optimizer group (``stacked_leaves``); the module's
``training_step`` runs for all of them at once (``stacked_loss``: in one padded call on batched matmuls or folded
where the clients still training are the first ones, else a call per batch size under ``torch.vmap``); the sum of the
clients' losses is back-propagated once, which gives every client exactly its own gradient (its row), and the model's
optimizer, built once over the stacked tensors, steps every row as one optimizer per client would (it is
elementwise). Ragged clients stay exact: the clients with the most steps come first (``_longest_first``), and a
client's weights are taken when it has taken its last step (``stacked_schedule``). Local rules run on their client's
row; a rule's steps on another model (``LocalRule.prior_steps``: Ditto's) and its second gradient a step
(``LocalRule.second_point``: APFL's mixture, SAM's ascent) are taken for all the clients at once. Under DP-SGD every
example of every client gets a row (``StackedLoss.private_gradients``, ``vectorized_privacy``).
"""

import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

import torch
from lightning import LightningModule
from torch import Tensor

from lightfed.core.federated_weights import federated_parameters
from lightfed.core.local_rule import LocalRule
from lightfed.core.logged_values import LoggedValues
from lightfed.core.messages import ClientPlan, ClientRows, ClientUpdate
from lightfed.errors import ConfigError
from lightfed.privacy.dp_sgd import DPSGD
from lightfed.run.client import ClientTrainer
from lightfed.run.client_memory import chunk_budget, client_bytes
from lightfed.run.client_training import Deliver, DeliverRows, TrainingJob
from lightfed.run.client_workers import torch_threads
from lightfed.run.folded_step import NotFolded
from lightfed.run.logged_rows import LoggedRows
from lightfed.run.stacked_batches import GatheredBatches, ListedBatches, device_index
from lightfed.run.stacked_leaves import Layout, StackedLeaves, clip_rows
from lightfed.run.stacked_leaves import plain_sgd as plain_sgd_of
from lightfed.run.stacked_loss import StackedLoss
from lightfed.run.stacked_schedule import Groups, finishing, groups_at, schedule, summed, tiers
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
AUTO_BLOCK = 64  # clients_in_parallel auto: consecutive jobs of a round trained together (fewer: client_memory)


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


@dataclass(frozen=True)
class _Row:
    """One client's row of the stacked parameters and buffers: what a vectorizing rule sees as ``context.flat``."""

    params: Tensor
    buffers: Tensor


@dataclass
class _Chunk:
    """A chunk's clients while they train together: their jobs, start rows, running statistics (``buffers``) and
    weights (one tensor per optimizer group) with its leaves and optimizer (``sgd``: plain SGD's settings, or None),
    local rules and batches (``private``: DP-SGD's Poisson batches), each one's steps, each step's groups of clients
    and the clients that end there (``ends``), the final rows (the weights where every client ends at once), summed
    losses and rules' reports."""

    jobs: list[TrainingJob]
    starts: Tensor
    buffers: Tensor
    weights: list[Tensor]
    lr: float
    leaves: StackedLeaves
    optimizer: torch.optim.Optimizer
    sgd: dict[str, Any] | None
    rules: dict[int, LocalRule]
    private: PrivateClients | None
    batches: ListedBatches | GatheredBatches
    steps: list[int]
    schedule: list[Groups]
    generators: list[torch.Generator]
    ends: dict[int, list[int]]
    at_once: bool
    final: Tensor
    final_buffers: Tensor
    losses: Tensor
    num_examples: list[int]
    flat: bool  # the step's gradients are read and written as rows of the flat ones
    clip: bool
    reports: dict[int, dict[str, Any]]


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
        self.layout: Layout = []  # each parameter's name, optimizer group, first column in its group's tensor, and shape
        for name, p in named:
            g = group_of[id(p)]
            self.layout.append((f"module.{name}", g, starts[g], p.shape))
            starts[g] += p.numel()
        floating = [(name, b) for name, b in client.module.named_buffers() if b.is_floating_point()]  # flat order
        offsets = [0, *itertools.accumulate(b.numel() for _, b in floating)]
        self.buffer_layout = [(f"module.{name}", offsets[i], b.shape) for i, (name, b) in enumerate(floating)]
        self.loss = StackedLoss(client, self.layout, self.buffer_layout, composed)
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
        (``stacked_schedule.tiers``: a batched step costs as much for one client left as for all), each tier's clients with the same
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
        for tier, members in enumerate([list(steps)] if self.loss.prefix else tiers(steps)):
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
                self._fall_back(error)
                return trained
            finally:
                self._tried = True
        return trained

    def _fall_back(self, error: Exception) -> None:
        """After a chunk failed with ``error``: from then on every client trains alone, which one line says, where
        ``auto`` allows (a model that failed in its first chunk, or in ``training_step``); else a refusal in one line,
        or ``error`` itself."""
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
            raise error
        self._alone = True
        self.client.fabric.print(
            f"trainer.clients_in_parallel auto trains one client at a time: {name} does not train vectorized "
            f"({type(error).__name__}: {str(error).splitlines()[0]})"
        )

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
        chunk = self._start(jobs, plain_sgd)
        module, view = self.client.module, self.client.view
        if not module.training:
            module.train()
        view._enter("train", jobs[0].plan.round)
        try:
            for step in range(max(chunk.steps, default=0)):
                self._train_step(chunk, step)
        finally:
            view._enter("")
        return self._finish(chunk)

    def _start(self, jobs: list[TrainingJob], plain_sgd: float | None) -> _Chunk:
        """The jobs' clients on stacked weights, with their optimizer, local rules and batches, before their first
        step."""
        self.loss.logged_rows = LoggedRows()  # nothing left by a chunk that failed
        client, device = self.client, self.client.fabric.device
        starts = _stacked_rows([job.params for job in jobs], device)  # a job's may be kept on the CPU (Ditto's)
        buffers = _stacked_rows([job.buffers for job in jobs], device).clone()  # each client's running statistics
        single = len(self.columns) == 1  # one optimizer group: its tensor is the flat parameters
        weights = [starts.clone() if single else starts[:, columns.to(device)] for columns in self.columns]
        settings = client.group_settings(jobs[0].plan) if plain_sgd is None else [{"lr": plain_sgd}]
        build: Callable[[list[dict[str, Any]]], torch.optim.Optimizer] = (
            type(client.optimizer.optimizer) if plain_sgd is None else torch.optim.SGD
        )
        leaves = StackedLeaves.of(weights, self.layout)
        grouped = [[leaves.params[name] for name, g, *_ in self.layout if g == i] for i in range(len(weights))]
        optimizer = build([{**group, "params": params} for group, params in zip(settings, grouped, strict=True)])
        rules = self._rules(jobs, weights, buffers)
        private = None
        if self.private is not None:
            shapes = [shape for _, _, _, shape in self.layout]
            plans = [job.plan for job in jobs]
            private = PrivateClients(self.private, plans, client.data, shapes, client.attack, device)
        batches = self._batches(jobs) if private is None else ListedBatches(private.batches)
        steps = [len(client_sizes) for client_sizes in batches.sizes]
        ends = finishing(steps)
        at_once = single and len(ends) == 1  # every client ends at the last step: the weights are the final rows
        num_examples = client.data.client_sizes([job.plan.client_id for job in jobs])
        self.loss.per_epoch = [client.data.batches_of(n) for n in num_examples]
        clip = plain_sgd is None and client.gradient_clip_val is not None
        return _Chunk(
            jobs=jobs,
            starts=starts,
            buffers=buffers,
            weights=weights,
            lr=settings[0]["lr"],
            leaves=leaves,
            optimizer=optimizer,
            sgd=plain_sgd_of(optimizer),
            rules=rules,
            private=private,
            batches=batches,
            steps=steps,
            schedule=schedule(batches.sizes),
            # seeded as one-at-a-time seeds torch's generator
            generators=[torch.Generator(device).manual_seed(job.plan.seed) for job in jobs] if self.loss.draws else [],
            ends=ends,
            at_once=at_once,
            final=weights[0] if at_once else starts.clone(),  # the rows taken as each client ends
            final_buffers=buffers if at_once else buffers.clone(),
            losses=torch.zeros(len(jobs), device=device),
            num_examples=num_examples,
            flat=private is not None or bool(rules) or clip,  # the step's gradients are read as rows of the flat ones
            clip=clip,
            reports={k: rule.report() for k, rule in rules.items() if not steps[k]},  # the others' after their last
        )

    def _train_step(self, chunk: _Chunk, step: int) -> None:
        """Step ``step`` of the chunk's clients still training: their gradients, their rules' work on them, the
        optimizer's step, and the rows of the clients that end there taken."""
        if chunk.private is None:
            self.loss.backward(
                chunk.schedule[step], step, chunk.leaves, chunk.buffers, chunk.batches, chunk.generators, chunk.losses
            )
            if chunk.flat:
                chunk.leaves.collect()
        else:
            active = [k for k, n in enumerate(chunk.steps) if step < n]
            batch = [(chunk.private.batches[k][step], chunk.batches.sizes[k][step]) for k in active]
            self.loss.private_gradients(
                chunk.private, chunk.weights[0], chunk.buffers, active, batch, step, chunk.losses
            )
        self._apply_rules(chunk, step)
        chunk.leaves.step(chunk.optimizer, chunk.flat, chunk.sgd)
        ends = chunk.ends.get(step, [])
        if ends and not chunk.at_once:
            self._take(chunk.final, chunk.final_buffers, chunk.weights, chunk.buffers, ends)
        chunk.reports.update((k, chunk.rules[k].report()) for k in ends if k in chunk.rules)

    def _apply_rules(self, chunk: _Chunk, step: int) -> None:
        """The local rules of the clients still training at ``step`` on their rows of the gradients: the gradient at
        a second point where a rule asks for one, the rule's adjustment, the clipping, then what the rules observe."""
        grads: list[Tensor] = [weight.grad for weight in chunk.weights]  # type: ignore[misc]
        weights = chunk.weights[0]
        live = {k: rule for k, rule in chunk.rules.items() if step < chunk.steps[k]}
        points = {
            k: point
            for k, rule in live.items()
            if (point := rule.second_point(weights[k].detach(), grads[0][k])) is not None
        }
        if points:
            backward = functools.partial(self._backward_of, chunk, step)
            self._at_second_points(points, chunk.rules, weights, chunk.buffers, backward, chunk.lr)
        for k, rule in live.items():
            if k not in points:
                rule.adjust(grads[0][k], weights[k].detach())
        if chunk.clip:
            clip_rows(grads, self.client.gradient_clip_val, self.client.gradient_clip_algorithm)  # type: ignore[arg-type]
        for k, rule in live.items():
            rule.observe(grads[0][k])

    def _backward_of(self, chunk: _Chunk, step: int, clients: set[int], losses: Tensor) -> None:
        """The summed losses of ``clients`` at ``step`` back-propagated: each one's gradient in its row."""
        taking = [client_sizes if k in clients else [] for k, client_sizes in enumerate(chunk.batches.sizes)]
        self.loss.backward(
            groups_at(taking, step), step, chunk.leaves, chunk.buffers, chunk.batches, chunk.generators, losses
        )
        chunk.leaves.collect()

    def _finish(self, chunk: _Chunk) -> ClientRows:
        """The chunk's clients' updates, once each has taken its last step, and what they logged, logged."""
        self.loss.logged_rows.log_to(self.client.logged)
        if chunk.private is not None:
            chunk.private.finish()
        for weight in chunk.weights:
            weight.grad = None  # not kept with the rows returned (the first weights, where every client ends at once)
        steps = chunk.steps
        local_times = {n: summed(chunk.lr, n) for n in set(steps)}
        return ClientRows(
            client_ids=[job.plan.client_id for job in chunk.jobs],
            deltas=chunk.final.sub_(chunk.starts),
            buffers=chunk.final_buffers,
            num_examples=chunk.num_examples,
            num_steps=steps,
            local_times=[local_times[n] for n in steps],
            train_losses=chunk.losses / torch.tensor(steps, device=chunk.losses.device).clamp(min=1),
            reports=[chunk.reports.get(k, {}) for k in range(len(steps))],
        )

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


def _stacked_rows(tensors: list[Tensor], device: torch.device) -> Tensor:
    """``tensors`` as the rows of one tensor on ``device``: a broadcast view where they are one tensor (the global
    weights every client of a round starts from)."""
    if all(tensor is tensors[0] for tensor in tensors):
        return tensors[0].to(device).expand(len(tensors), -1)
    return torch.stack([tensor.to(device) for tensor in tensors])


def _draws_under_vmap(error: Exception) -> bool:
    """Whether ``error`` is vmap's refusal of a random draw (``randomness="error"``)."""
    return isinstance(error, RuntimeError) and "called random operation" in str(error)
