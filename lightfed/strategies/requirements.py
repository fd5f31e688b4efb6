"""The one place where a run's settings are checked against what its strategy and privacy mechanism require."""

from collections.abc import Sequence

import torch

from lightfed.core.requirements import Requirements
from lightfed.core.transforms import NO_TRANSFORMS, Pipeline, Transform
from lightfed.errors import ConfigError
from lightfed.privacy.base import NO_PRIVACY, ClientPrivacy
from lightfed.schedules import RoundSchedule
from lightfed.strategies.async_base import AsyncStrategy
from lightfed.strategies.base import Strategy, SumsStrategy
from lightfed.strategies.sharded_base import ShardedStrategy

ASYNCHRONOUS = "lightfed.strategies.FedBuff, CA2FL, FADAS, MasFL or AdaMasFL"


def strategy_name(strategy: Strategy) -> str:
    """The strategy's class name: ``FedAvg``."""
    return type(strategy).__name__


def run_requirements(
    strategy: Strategy, privacy: ClientPrivacy = NO_PRIVACY, transforms: Pipeline = NO_TRANSFORMS
) -> Requirements:
    """What the strategy, the privacy mechanism and the transforms need together."""
    return strategy.requirements | privacy.requirements | transforms.requirements


def check_requirements(
    strategy: Strategy,
    optimizer: torch.optim.Optimizer,
    privacy: ClientPrivacy = NO_PRIVACY,
    lr_schedule: RoundSchedule | None = None,
    asynchronous: bool = False,
    transforms: Pipeline = NO_TRANSFORMS,
) -> None:
    """Refuses, in one line, a run whose strategy (or local rule, or privacy mechanism, or transforms) cannot run with
    the model's ``optimizer``, ``privacy``, ``lr_schedule``, the ``transforms`` or under the (a)synchronous trainer."""
    name, needs = strategy_name(strategy), run_requirements(strategy, privacy, transforms)
    if not isinstance(strategy, (SumsStrategy, ShardedStrategy, AsyncStrategy)):
        raise ConfigError(f"{name} has no server path: subclass SumsStrategy, ShardedStrategy or AsyncStrategy")
    if isinstance(strategy, AsyncStrategy) and not asynchronous:
        raise ConfigError(
            f"{name} is asynchronous: add an `asynchronous:` section (e.g. concurrency: 20) to the config"
        )
    if asynchronous and not isinstance(strategy, AsyncStrategy):
        raise ConfigError(f"{name} is synchronous; with `asynchronous:` use {ASYNCHRONOUS}")
    if asynchronous and privacy.private:
        raise ConfigError("trainer.privacy is not supported with `asynchronous:` yet: its budgets assume rounds")
    check_transforms(strategy, transforms, asynchronous)
    if privacy.accounts:
        check_accounted(name, needs)
    if needs.chooses_client_steps and lr_schedule is not None:
        raise ConfigError(f"{name} chooses its clients' step sizes itself: remove trainer.lr_schedule")
    groups, parts = optimizer.param_groups, [strategy, *transforms.transforms, privacy]
    if needs.plain_sgd and not (isinstance(optimizer, torch.optim.SGD) and not any(g["momentum"] for g in groups)):
        settings = f" with momentum {groups[0]['momentum']}" if isinstance(optimizer, torch.optim.SGD) else ""
        raise ConfigError(
            f"{_declaring(parts, 'plain_sgd')[0]} assumes plain SGD local steps (x <- x - lr g): the model's optimizer "
            f"must be torch.optim.SGD with momentum 0, got {type(optimizer).__name__}{settings}"
        )
    if needs.no_weight_decay and any(g.get("weight_decay") for g in groups):
        raise ConfigError(
            f"{_declaring(parts, 'no_weight_decay')[0]} sets the whole local step direction: the model's optimizer "
            f"needs weight_decay 0, got {groups[0]['weight_decay']}"
        )


def _declaring(parts: Sequence[Strategy | Transform | ClientPrivacy], need: str) -> list[str]:
    """The class names of the run's ``parts`` (strategy, transforms, privacy) whose requirements have ``need``."""
    return [type(part).__name__ for part in parts if getattr(part.requirements, need)]


def check_transforms(strategy: Strategy, transforms: Pipeline, asynchronous: bool) -> None:
    """Refuses, in one line, transforms whose requirements the strategy or the other transforms break."""
    name, own = strategy_name(strategy), strategy.requirements
    for transform in transforms.transforms:
        needs, it = transform.requirements, type(transform).__name__
        if needs.sums_path and (asynchronous or not isinstance(strategy, SumsStrategy)):
            raise ConfigError(
                f"transforms: {it} works on the round's sums: use a synchronous strategy of the sums path (FedAvg, "
                f"FedAdam, Scaffold, ...), not {name}"
            )
        if needs.mean_only and (own.client_state or own.sends or own.reads_each_update):
            raise ConfigError(
                f"transforms: {it} gives the strategy only the mean delta, but {name} keeps per-client state or uses "
                "more of what each client sends: use FedAvg, FedAvgM, FedAdam, FedYogi, FedAdagrad, FedProx, FedSAM "
                "or FedASAM"
            )
    encoders = _declaring(transforms.transforms, "encodes")
    if len(encoders) > 1:
        raise ConfigError(
            f"transforms: {' and '.join(encoders)} each encode what a client sends: keep one (a compressor in front of "
            "secure aggregation would be quantized again to its field, its saving lost)"
        )
    senders, droppers = (_declaring(transforms.transforms, need) for need in ("every_client_sends", "drops_clients"))
    if senders and droppers:
        raise ConfigError(
            f"transforms: {', '.join(droppers)} drops clients of the round, but {', '.join(senders)} needs every "
            "client's contribution (UserLevelDP's distributed noise: each client adds std / sqrt(expected clients)): "
            "set dropout 0 or noise: central"
        )


def check_accounted(name: str, needs: Requirements) -> None:
    """Refuses, in one line, a run whose clients send something their privacy accountant does not cover."""
    unaccounted = needs.unaccounted()
    if not unaccounted:
        return
    names = ", ".join(sent.name for sent in unaccounted)
    options = sorted({sent.removed_by for sent in unaccounted if sent.removed_by})
    remedy = (
        f"set {' and '.join(options)}"
        if all(sent.removed_by for sent in unaccounted)
        else f"no option stops {'them' if len(unaccounted) > 1 else 'it'}: run {name} without trainer.privacy"
    )
    raise ConfigError(
        f"{name}'s clients send {names} computed from their data outside trainer.privacy's accountant (no epsilon "
        f"would cover it): {remedy}"
    )
