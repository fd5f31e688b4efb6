"""Local rules on the rows of stacked clients: the row a rule sees as its client's flat weights, and the gradients
that rules ask for at a second point (APFL's mixture, SAM's ascent), taken for all of their clients at once."""

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from lightfed.core.local_rule import LocalRule, PriorSteps
from lightfed.core.messages import ClientPlan
from lightfed.errors import ConfigError
from lightfed.run.client import ClientTrainer
from lightfed.run.client_training import TrainingJob
from lightfed.run.stacked_batches import device_index
from lightfed.run.stacked_leaves import plain_sgd


@dataclass(frozen=True)
class Row:
    """One client's row of the stacked parameters and buffers: what a vectorizing rule sees as ``context.flat``."""

    params: Tensor
    buffers: Tensor


def at_second_points(
    points: dict[int, Tensor],
    rules: dict[int, LocalRule],
    weights: Tensor,
    buffers: Tensor,
    backward: Callable[[set[int], Tensor], None],
    lrs: list[float],
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
        replaced = rules[k].at_second_point(weights.grad[k].clone(), saved[k], lrs[k])
        if replaced is not None:
            saved_grads[k] = replaced
        if rules[k].keeps_second_statistics:
            saved_buffers[k] = buffers[k]
    weights.copy_(saved)
    weights.grad.copy_(saved_grads)
    buffers.copy_(saved_buffers)


def why_not_stacked(rule: LocalRule, groups: int, private: bool) -> str | None:
    """Why ``rule`` does not run on a row of stacked clients of ``groups`` optimizer groups (``private``: under
    DP-SGD), or None."""
    if not rule.vectorizes or rule.takes_step:
        return "yet"
    if groups > 1:
        return "with one optimizer group"
    if private and rule.gradients_per_step > 1:
        return "under DP-SGD (two gradients a step)"
    return None


def prior_job(job: TrainingJob, prior: PriorSteps) -> TrainingJob:
    """The job of the steps ``prior`` that ``job``'s rule takes before its own (Ditto's personal model): plain SGD
    steps under the prior steps' own rule."""
    plan = job.plan
    given = prior.buffers is not None and prior.buffers.numel() == job.buffers.numel()
    prior_plan = ClientPlan(plan.client_id, plan.round, prior.seed, prior.epochs, prior.steps, rule=prior.rule)
    return TrainingJob(prior_plan, prior.params, prior.buffers if given else job.buffers)  # type: ignore[arg-type]


def started_step_sizes(
    rules: dict[int, LocalRule], started: dict[int, float], lrs: list[float], optimizer: torch.optim.Optimizer
) -> list[float]:
    """The clients' step sizes ``lrs`` with those their rules set as they started (``started``, by position;
    ADAPT-FED's, as one client at a time's optimizer has it then), ``optimizer`` at theirs where they are one; refuses
    step sizes of their own where the optimizer is not plain SGD, which steps each row at its own."""
    if not started:
        return lrs
    sizes = [started.get(k, lr) for k, lr in enumerate(lrs)]
    if len(set(sizes)) == 1:
        optimizer.param_groups[0]["lr"] = sizes[0]
    elif plain_sgd(optimizer) is None:
        name = type(rules[next(iter(started))]).__name__
        raise ConfigError(
            f"trainer.clients_in_parallel vectorized: the local rule {name} sets each client's step size, which "
            "only plain SGD (no momentum, one parameter group) steps per client: use clients_in_parallel 1"
        )
    return sizes


def started_rules(
    client: ClientTrainer, jobs: list[TrainingJob], rows: Row, groups: int, private: bool
) -> tuple[dict[int, LocalRule], dict[int, float]]:
    """The jobs' rules by position, each started on its client's row of ``rows`` (``context.flat``) with ``client``'s
    live module at its received weights, as one client at a time starts it, and the step size of each that sets its
    own; a rule that does not stack (``why_not_stacked`` for ``groups`` optimizer groups, ``private``) is refused."""
    rules = {k: job.plan.rule for k, job in enumerate(jobs) if job.plan.rule is not None}
    started: dict[int, float] = {}
    for k, rule in rules.items():
        reason = why_not_stacked(rule, groups, private)
        if reason is not None:
            name = type(rule).__name__
            raise ConfigError(f"trainer.clients_in_parallel vectorized does not run the local rule {name} {reason}")
        client.prepare(jobs[k].plan, jobs[k].params, jobs[k].buffers)  # the live module, as one at a time
        given = client.context.lr
        rule.start(jobs[k].params, replace(client.context, flat=Row(rows.params[k], rows.buffers[k])))  # type: ignore[arg-type]
        if client.context.lr != given:  # the rule set its client's step size (ADAPT-FED)
            started[k] = client.context.lr
    return rules, started
