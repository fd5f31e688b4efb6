"""A synchronous round of a strategy behind a pipeline of transforms on one process, without a trainer or an engine:
set up as the trainer sets them up, each client's update through ``Pipeline.add``, the server halves, then the
strategy's step."""

from collections.abc import Sequence
from functools import partial

import torch
from torch import Tensor

from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.seeding import sample_clients
from lightfed.core.server_context import ServerContext
from lightfed.core.sums import Sums
from lightfed.core.transforms import Pipeline, Transform, TransformContext
from lightfed.strategies.base import SumsStrategy


def set_up(
    strategy: SumsStrategy,
    transforms: Sequence[Transform],
    params: Tensor,
    num_clients: int,
    clients_per_round: int,
    seed: int = 0,
    rounds: int = 0,
    sampled_clients: int = 0,
) -> Pipeline:
    """Sets ``strategy`` and the ``Pipeline`` of ``transforms`` up for a run of ``rounds`` rounds of
    ``clients_per_round`` of ``num_clients`` clients (drawn from the first ``sampled_clients``; 0: all), each round's
    cohort sampled as ``lightfed.run.rounds.SampledRounds.cohort`` samples it; returns the pipeline."""
    context = ServerContext(
        params,
        num_clients,
        clients_per_round=clients_per_round,
        seed=seed,
        sampled_clients=sampled_clients,
        rounds=rounds,
    )
    strategy.setup(context)
    pipeline = Pipeline(transforms)
    cohort = partial(_cohort, seed, sampled_clients or num_clients, clients_per_round)
    pipeline.setup(TransformContext(context, strategy.sum_sizes(), cohort=cohort))
    return pipeline


def _cohort(seed: int, num_clients: int, clients_per_round: int, round: int) -> list[int]:
    return sample_clients(seed, round, num_clients, clients_per_round)


def round_sums(strategy: SumsStrategy, pipeline: Pipeline, updates: Sequence[ClientUpdate], round: int = 0) -> Sums:
    """The round's sums (the strategy's and the transforms') once every update went through the client halves, as
    the all-reduce leaves them; each client planned as the engine plans it."""
    sums = Sums({**strategy.sum_sizes(), **pipeline.sizes}, torch.device("cpu"))
    for update in updates:
        pipeline.plan(strategy.configure_client(ClientPlan(update.client_id, round, seed=0, steps=1)))
        pipeline.add(sums, update, round, strategy.accumulate)
    return sums


def pipeline_round(
    strategy: SumsStrategy, pipeline: Pipeline, updates: Sequence[ClientUpdate], params: Tensor, round: int = 0
) -> tuple[Tensor, dict[str, float]]:
    """Round ``round`` from ``params``: the next params and the transforms' metrics (each under its name)."""
    sums = round_sums(strategy, pipeline, updates, round)
    metrics = pipeline.recovered(sums, round)
    return strategy.aggregate(params, sums, round), metrics
