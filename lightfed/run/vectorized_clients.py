"""Client training as one batched computation: the clients of a round trained together on stacked weights.

Each client's weights are one row of a stacked tensor per optimizer group (``stacked_leaves``); the module's
``training_step`` runs for all of them at once (``stacked_loss``: in one padded call on batched matmuls or folded
where the clients still training are the first ones, else a call per batch size under ``torch.vmap``); the sum of the
clients' losses is back-propagated once, which gives every client exactly its own gradient (its row), and the model's
optimizer, built once over the stacked tensors, steps every row as one optimizer per client would (it is
elementwise). Ragged clients stay exact: the clients with the most steps come first (``longest_first``), and a
client's weights are taken when it has taken its last step (``stacked_schedule``). Local rules run on their client's
row; a rule's steps on another model (``LocalRule.prior_steps``: Ditto's) and its second gradient a step
(``LocalRule.second_point``: APFL's mixture, SAM's ascent) are taken for all the clients at once. Under DP-SGD every
example of every client gets a row (``StackedLoss.private_gradients``, ``vectorized_privacy``).
"""

import functools
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import Tensor

from lightfed.core.local_rule import LocalRule
from lightfed.core.logged_values import LoggedValues
from lightfed.core.messages import ClientRows, ClientUpdate
from lightfed.errors import ConfigError
from lightfed.privacy.dp_sgd import DPSGD
from lightfed.run.client import ClientTrainer
from lightfed.run.client_memory import chunk_budget, client_bytes
from lightfed.run.client_training import Deliver, DeliverRows, TrainingJob
from lightfed.run.client_workers import torch_threads
from lightfed.run.folded_step import NotFolded
from lightfed.run.logged_rows import LoggedRows
from lightfed.run.stacked_batches import ListedBatches, chunk_batches
from lightfed.run.stacked_chunk import StackedChunk
from lightfed.run.stacked_leaves import StackedLeaves, clip_rows, stacked_layout, stacked_rows, take_rows
from lightfed.run.stacked_leaves import plain_sgd as plain_sgd_of
from lightfed.run.stacked_loss import StackedLoss
from lightfed.run.stacked_rules import (
    Row,
    at_second_points,
    prior_job,
    started_rules,
    started_step_sizes,
    why_not_stacked,
)
from lightfed.run.stacked_schedule import finishing, groups_at, local_steps, longest_first, schedule, tiers
from lightfed.run.vectorizable import exact_convolutions, training_step_refusal, why_not_vectorized
from lightfed.run.vectorized_privacy import PrivateClients

AUTO_BLOCK = 64  # clients_in_parallel auto: consecutive jobs of a round trained together (fewer: client_memory)


class VectorizedClients:
    """``ClientTraining`` that trains each chunk of a process's jobs as one batched computation on the reference
    client's module (one lane). A chunk holds as many jobs as memory allows (``client_memory``); under ``auto``, a
    block of ``AUTO_BLOCK`` consecutive jobs of the round, which the engine deals to processes whole, so that a
    client's rounding does not depend on the number of processes, on one torch thread.

    What it cannot run exactly is refused in one line: ``why_not_vectorized``, a rule without
    ``LocalRule.vectorizes``, a ``training_step`` that draws under vmap or reads what differs by client
    (``DiffersByClient``). Under ``auto`` such a job trains alone, and a model that fails so trains one client at a
    time from then on, which one line says. ``composed``: client i trains on process i % world (per-client state),
    and only a module computed in one padded call a step (folded or batched matmuls) stacks."""

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
        self.columns, self.layout, self.buffer_layout = stacked_layout(client.module, client.optimizer.optimizer)
        self.own_step_sizes = plain_sgd_of(client.optimizer.optimizer) is not None  # each row steps at its own
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
            start = 0
            while start < len(jobs):  # (a chunk that did not fit in memory makes the chunks after it smaller)
                chunk = list(range(start, min(start + self.chunk, len(jobs))))
                start = chunk[-1] + 1
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
        steps = {
            index: local_steps(jobs[index].plan, size, self.client.data)
            for index, size in zip(chunk, sizes, strict=True)
        }
        # tiers where a step costs as much for one client left as for all; one tier where it costs what they do
        for tier, members in enumerate([list(steps)] if self.loss.prefix else tiers(steps)):
            if len(members) == 1 and not self.composed:  # trains alone
                continue
            for index in members:
                plan = jobs[index].plan
                if self.strict or self._vectorizes(plan.rule):  # lr and round make the settings (group_settings)
                    lr = None if self.own_step_sizes else plan.lr  # clients of any step sizes stack
                    together.setdefault((tier, lr, plan.round), []).append(index)
        trained: list[tuple[list[int], ClientRows]] = []
        for members in together.values():
            part = [members[i] for i in longest_first(self.client.data, [jobs[index].plan for index in members])]
            try:
                trained.extend(self._train_fitting(jobs, part))
            except Exception as error:
                self._fall_back(error)
                return trained
            finally:
                self._tried = True
        return trained

    def _train_fitting(self, jobs: Sequence[TrainingJob], part: list[int]) -> list[tuple[list[int], ClientRows]]:
        """The jobs at the positions ``part`` trained together; where they do not fit in the device's memory, in
        halves, and the chunks after them no larger (one line says so). A client that does not fit alone raises."""
        try:
            return [(part, self._train_together([jobs[i] for i in part]))]
        except torch.OutOfMemoryError:
            if len(part) == 1:
                raise
        # out of the handler: the failed attempt's tensors are freed before the halves train
        if self.client.fabric.device.type == "cuda":
            torch.cuda.empty_cache()
        half = (len(part) + 1) // 2  # each half of the longest-first part is longest first
        self.chunk = min(self.chunk, half)
        self.client.fabric.print(
            f"trainer.clients_in_parallel vectorized: {len(part)} clients do not fit in memory together; "
            f"trains them {half} at a time"
        )
        return self._train_fitting(jobs, part[:half]) + self._train_fitting(jobs, part[half:])

    def _fall_back(self, error: Exception) -> None:
        """After a chunk failed with ``error``: from then on every client trains alone, which one line says, where
        ``auto`` allows (a model that failed in its first chunk, or in ``training_step``); else a refusal in one line,
        or ``error`` itself."""
        name = type(self.client.module).__name__
        refusal = training_step_refusal(error, name, self.private is not None)
        if self.strict and refusal is not None:
            raise refusal from error
        if self.strict or (self._tried and refusal is None and not isinstance(error, NotFolded)):
            raise error
        self._alone = True
        self.client.fabric.print(
            f"trainer.clients_in_parallel auto trains one client at a time: {name} does not train vectorized "
            f"({type(error).__name__}: {str(error).splitlines()[0]})"
        )

    def _vectorizes(self, rule: LocalRule | None) -> bool:
        """Whether a client with the local rule ``rule`` trains on a row of stacked clients."""
        return rule is None or why_not_stacked(rule, len(self.columns), self.private is not None) is None

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

    def _start(self, jobs: list[TrainingJob], plain_sgd: float | None) -> StackedChunk:
        """The jobs' clients on stacked weights, with their optimizer, rules and batches, before their first step."""
        self.loss.logged_rows = LoggedRows()  # nothing left by a chunk that failed
        client, device = self.client, self.client.fabric.device
        starts = stacked_rows([job.params for job in jobs], device)  # a job's may be kept on the CPU (Ditto's)
        buffers = stacked_rows([job.buffers for job in jobs], device).clone()  # each client's running statistics
        single = len(self.columns) == 1  # one optimizer group: its tensor is the flat parameters
        weights = [starts.clone() if single else starts[:, columns.to(device)] for columns in self.columns]
        settings = client.group_settings(jobs[0].plan) if plain_sgd is None else [{"lr": plain_sgd}]
        lrs = [client.group_settings(job.plan)[0]["lr"] if plain_sgd is None else plain_sgd for job in jobs]
        build: Callable[[list[dict[str, Any]]], torch.optim.Optimizer] = (
            type(client.optimizer.optimizer) if plain_sgd is None else torch.optim.SGD
        )
        leaves = StackedLeaves.of(weights, self.layout)
        grouped = [[leaves.params[name] for name, g, *_ in self.layout if g == i] for i in range(len(weights))]
        optimizer = build([{**group, "params": params} for group, params in zip(settings, grouped, strict=True)])
        rules, started = started_rules(
            client, jobs, Row(weights[0], buffers), len(self.columns), self.private is not None
        )
        lrs = started_step_sizes(rules, started, lrs, optimizer)
        private = None
        if self.private is not None:
            shapes = [shape for _, _, _, shape in self.layout]
            plans = [job.plan for job in jobs]
            private = PrivateClients(self.private, plans, client.data, shapes, client.attack, device)
        batches = chunk_batches(self.client, jobs) if private is None else ListedBatches(private.batches)
        steps = [len(client_sizes) for client_sizes in batches.sizes]
        ends = finishing(steps)
        at_once = single and len(ends) == 1  # every client ends at the last step: the weights are the final rows
        num_examples = client.data.client_sizes([job.plan.client_id for job in jobs])
        self.loss.per_epoch = [client.data.batches_of(n) for n in num_examples]
        clip = plain_sgd is None and client.gradient_clip_val is not None
        return StackedChunk(
            jobs=jobs,
            starts=starts,
            buffers=buffers,
            weights=weights,
            lrs=lrs,
            lr_rows=None if len(set(lrs)) == 1 else torch.tensor(lrs, dtype=starts.dtype, device=device),
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

    def _train_step(self, chunk: StackedChunk, step: int) -> None:
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
        chunk.leaves.step(chunk.optimizer, chunk.flat, chunk.sgd, chunk.lr_rows)
        ends = chunk.ends.get(step, [])
        if ends and not chunk.at_once:
            take_rows(chunk.final, chunk.final_buffers, chunk.weights, chunk.buffers, ends, self.columns)
        chunk.reports.update((k, chunk.rules[k].report()) for k in ends if k in chunk.rules)

    def _apply_rules(self, chunk: StackedChunk, step: int) -> None:
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
            at_second_points(points, chunk.rules, weights, chunk.buffers, backward, chunk.lrs)
        for k, rule in live.items():
            if k not in points:
                rule.adjust(grads[0][k], weights[k].detach())
        if chunk.clip:
            clip_rows(grads, self.client.gradient_clip_val, self.client.gradient_clip_algorithm)  # type: ignore[arg-type]
        for k, rule in live.items():
            rule.observe(grads[0][k])

    def _backward_of(self, chunk: StackedChunk, step: int, clients: set[int], losses: Tensor) -> None:
        """The summed losses of ``clients`` at ``step`` back-propagated: each one's gradient in its row."""
        taking = [client_sizes if k in clients else [] for k, client_sizes in enumerate(chunk.batches.sizes)]
        self.loss.backward(
            groups_at(taking, step), step, chunk.leaves, chunk.buffers, chunk.batches, chunk.generators, losses
        )
        chunk.leaves.collect()

    def _finish(self, chunk: StackedChunk) -> ClientRows:
        """The chunk's clients' updates, once each has taken its last step, and what they logged, logged."""
        self.loss.logged_rows.log_to(self.client.logged)
        if chunk.private is not None:
            chunk.private.finish()
        for weight in chunk.weights:
            weight.grad = None  # not kept with the rows returned (the first weights, where every client ends at once)
        return chunk.rows()

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
                prior_jobs.append(prior_job(jobs[k], priors[k]))
            order = longest_first(self.client.data, [job.plan for job in prior_jobs])
            part, prior_jobs = [part[i] for i in order], [prior_jobs[i] for i in order]
            with self.client.unrecorded():
                updates = self._train_together(prior_jobs, plain_sgd=lr).updates()
            for k, job, update in zip(part, prior_jobs, updates, strict=True):
                rules[k].prior_stepped(job.params + update.delta.to(job.params.device), update.buffers.clone())
