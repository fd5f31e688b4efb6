"""When each of a chunk's stacked clients computes: tiers of alike numbers of steps, each step's groups of clients
by batch size, the calls that compute a step on views of the stacked rows, and the step at which each client ends."""

import statistics

from lightfed.core.messages import ClientPlan
from lightfed.data.module import FederatedDataModule

STRAGGLER = 4  # a client of this many times the median steps of the clients left or more trains in a later tier

Groups = list[tuple[int, list[int]]]  # each batch size at a step with its clients (by position)
Calls = list[tuple[slice, int | None, Groups]]  # each call's clients, their batch size (None: padded) and groups


def tiers(steps: dict[int, int]) -> list[list[int]]:
    """The clients (``steps``: each one's local steps) in tiers: those under ``STRAGGLER`` x the median steps, then
    the same among the rest, until none is left; at least half of the clients left are taken each time."""
    found, left = [], list(steps)
    while left:
        cutoff = STRAGGLER * max(1.0, statistics.median(steps[k] for k in left))
        found.append([k for k in left if steps[k] < cutoff])
        left = [k for k in left if steps[k] >= cutoff]
    return found


def groups_at(sizes: list[list[int]], step: int) -> Groups:
    """The clients still training at ``step``, grouped by the size of their batch there (``sizes``: each client's
    batch sizes), with that size."""
    groups: dict[int, list[int]] = {}
    for k, client_sizes in enumerate(sizes):
        if step < len(client_sizes):
            groups.setdefault(client_sizes[step], []).append(k)
    return list(groups.items())


def schedule(sizes: list[list[int]]) -> list[Groups]:
    """Each step's groups of clients (``groups_at``) for clients with the batch sizes ``sizes``: one group a step
    where every client's are the same."""
    if sizes and sizes.count(sizes[0]) == len(sizes):
        everyone = list(range(len(sizes)))
        return [[(size, everyone)] for size in sizes[0]]
    return [groups_at(sizes, step) for step in range(max(map(len, sizes), default=0))]


def row_calls(groups: Groups) -> Calls | None:
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


def finishing(steps: list[int]) -> dict[int, list[int]]:
    """The clients (by position) that take their last step at each step (``steps``: each one's number)."""
    ends: dict[int, list[int]] = {}
    for k, n in enumerate(steps):
        ends.setdefault(n - 1, []).append(k)
    return ends


def summed(lr: float, steps: int) -> float:
    """``lr`` added ``steps`` times, as a client adds its step sizes to its local time."""
    total = 0.0
    for _ in range(steps):
        total += lr
    return total


def local_steps(plan: ClientPlan, size: int, data: FederatedDataModule) -> int:
    """The local steps of ``plan`` of a client of ``size`` examples: its steps, or its epochs' batches of ``data``."""
    if plan.steps is not None or plan.epochs is None:
        return plan.steps or 0
    return plan.epochs * data.batches_of(size)


def longest_first(data: FederatedDataModule, plans: list[ClientPlan]) -> list[int]:
    """The positions of ``plans``, the clients with the most steps first, those with as many by the size of their
    last batch: the clients still training at a step, and those that end there, are then the first ones."""
    sizes, batch = data.client_sizes([plan.client_id for plan in plans]), data.batch_size
    keys = [(-local_steps(plan, size, data), -(size % batch or batch)) for plan, size in zip(plans, sizes, strict=True)]
    return sorted(range(len(plans)), key=keys.__getitem__)
