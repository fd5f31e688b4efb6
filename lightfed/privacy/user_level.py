"""User-level differential privacy: DP-FedAvg (McMahan et al. 2018) with fixed or adaptive clipping (Andrew et al.
2021), as a wrapper around a strategy of the sums path."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

import torch
from torch import Tensor

from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.seeding import derived_rng, derived_seed
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.privacy.accountant import accountant_state, compose, load_accountant, spent_epsilon
from lightfed.privacy.base import BudgetReached
from lightfed.strategies.base import NOTHING, ServerContext, Strategy
from lightfed.strategies.sharded_base import ShardedStrategy
from lightfed.strategies.wrapper import SumsStrategyWrapper
from lightfed.streams import Stream, UserLevelKey

CLIPPED, UNCLIPPED = "user_level/clipped_sum", "user_level/unclipped_count"


class UserLevelDP(SumsStrategyWrapper):
    """DP-FedAvg around ``strategy``: each client's whole delta is clipped to L2 norm ``clip``; Gaussian noise of std
    noise_multiplier x clip is added to their sum, which is divided by the expected number of clients per round
    (unweighted: the fixed denominator of DP-FedAvg), and the inner strategy takes this private mean as the round's
    only update (its server step: FedAvg's, FedAvgM's momentum, FedAdam's moments, ...).

    With ``target_quantile`` the clip norm follows that quantile of the clients' update norms (Andrew et al.): each
    client also sends b - 1/2, b = 1 if its norm was at most the clip (0 if not): sensitivity 1/2; their sum gets
    Gaussian noise of std ``count_stddev``, the noised fraction is sum / expected clients + 1/2 (clamped to [0, 1]),
    and the clip becomes clip x exp(-clip_lr x (noised fraction - target_quantile)). The update's noise is raised
    so that both releases together are one Gaussian mechanism of ``noise_multiplier``:
    (noise_multiplier^-2 - (2 count_stddev)^-2)^-1/2.

    Every process draws the same noise (seeded by ``trainer.seed`` and the round), so 1 and N processes give the same
    model. Epsilon (Opacus' accountant, at ``target_delta``, one subsampled Gaussian step per round) is logged every
    round as ``strategy/user_dp/epsilon``, kept in checkpoints, and with ``target_epsilon`` the run stops (with a
    checkpoint of the last round within it) at the first round that would exceed it.
    """

    def __init__(
        self,
        strategy: Strategy,
        noise_multiplier: float,
        clip: float = 1.0,
        target_quantile: float | None = None,
        clip_lr: float = 0.2,
        count_stddev: float | None = None,
        sampling: Literal["fixed", "poisson"] = "fixed",
        sample_rate: float | None = None,
        noise: Literal["central", "distributed"] = "central",
        target_epsilon: float | None = None,
        target_delta: float = 1e-5,
        accountant: Literal["rdp", "prv"] = "rdp",
    ) -> None:
        """
        Args:
            strategy: The server step taken with the private mean (sums path: FedAvg, FedAvgM, FedAdam, FedYogi,
                FedAdagrad, FedProx, FedSAM, FedASAM); one that keeps per-client state or reads each update is refused.
            noise_multiplier: z: the std of the noise on the sum over the clip norm (0: no noise, epsilon infinite).
            clip: Clip norm C of a client's delta (adaptive: its initial value; Andrew et al. start from 0.1).
            target_quantile: None: fixed clipping; a number in (0, 1): adaptive clipping to that quantile of the
                update norms (the fraction of clients left unclipped).
            clip_lr: Learning rate of the geometric clip update (Andrew et al.: 0.2).
            count_stddev: Std of the noise on the unclipped count; None: expected clients / 20 (Andrew et al.);
                with noise it must exceed noise_multiplier / 2.
            sampling: "fixed": the run's own sampling of trainer.clients_per_round clients out of N (without
                replacement), accounted as Poisson sampling at rate clients_per_round / N, as DP-FedAvg's
                experiments do (an approximation for sampling without replacement); "poisson": every client is
                drawn independently with probability ``sample_rate`` each round (exact; needs
                trainer.clients_per_round = N: the clients not drawn take no step).
            sample_rate: q of "poisson" sampling.
            noise: "central": the server adds the noise to the sum; "distributed": each client adds its share
                N(0, std^2 / clients per round) to its own contribution (with secure aggregation, the server sees
                only the noised sum); needs "fixed" sampling.
            target_epsilon: Budget: the run stops before a round that would take epsilon past it (refused when
                round 1 alone would, or without noise).
            target_delta: Delta at which epsilon is computed and logged.
            accountant: Opacus accountant: "rdp" (Renyi DP) or "prv" (privacy random variables).
        """
        if isinstance(strategy, ShardedStrategy):
            raise ConfigError(
                f"UserLevelDP noises the sum of clipped deltas; {type(strategy).__name__} (sharded path) aggregates "
                "each client's own update: wrap a sums-path strategy (FedAvg, FedAvgM, FedAdam, ...)"
            )
        super().__init__(strategy)
        needs, name = strategy.requirements, type(strategy).__name__
        if needs.client_state or needs.sends or needs.reads_each_update:
            raise ConfigError(
                f"UserLevelDP gives the inner strategy only the noised mean of the clipped deltas, but {name} keeps "
                "per-client state or uses what each client sends: wrap FedAvg, FedAvgM, FedAdam, FedYogi, FedAdagrad, "
                "FedProx, FedSAM or FedASAM"
            )
        checks = {
            "noise_multiplier must be >= 0": noise_multiplier >= 0,
            "clip must be > 0": clip > 0,
            "target_quantile must be in (0, 1)": target_quantile is None or 0 < target_quantile < 1,
            "clip_lr must be > 0": clip_lr > 0,
            "count_stddev must be >= 0": count_stddev is None or count_stddev >= 0,
            "target_epsilon must be > 0": target_epsilon is None or target_epsilon > 0,
            "target_epsilon needs noise: with noise_multiplier 0 epsilon is infinite from round 1 (set noise_multiplier "
            "> 0 or target_epsilon null)": target_epsilon is None or noise_multiplier > 0,
            "target_delta must be in (0, 1)": 0 < target_delta < 1,
            "sample_rate must be in (0, 1] with sampling: poisson": sampling == "fixed"
            or (sample_rate is not None and 0 < sample_rate <= 1),
            "sample_rate is for sampling: poisson (fixed: clients_per_round / N)": sampling == "poisson"
            or sample_rate is None,
            "noise: distributed needs sampling: fixed": noise == "central" or sampling == "fixed",
        }
        for message, holds in checks.items():
            if not holds:
                raise ConfigError(f"strategy.{message}")
        self.noise_multiplier, self.clip, self.target_quantile, self.clip_lr = (
            noise_multiplier,
            clip,
            target_quantile,
            clip_lr,
        )
        self.count_stddev, self.sampling, self.sample_rate, self.noise = count_stddev, sampling, sample_rate, noise
        self.target_epsilon, self.target_delta, self.mechanism = target_epsilon, target_delta, accountant

    def setup(self, context: ServerContext) -> None:
        super().setup(context)
        clients, sampled = context.sampled_clients or context.num_clients, context.clients_per_round
        if self.sampling == "poisson" and sampled != clients:
            raise ConfigError(
                f"sampling: poisson draws each of the {clients} clients itself: set trainer.clients_per_round to "
                f"{clients}, got {sampled}"
            )
        self.rate = sampled / clients if self.sampling == "fixed" else float(self.sample_rate or 0)
        self.expected = self.rate * clients  # the fixed denominator: expected clients per round
        z = self.noise_multiplier
        count_std = self.expected / 20 if self.count_stddev is None else self.count_stddev
        self.count_std = 0.0 if self.target_quantile is None or z == 0 else count_std
        if self.target_quantile is not None and z > 0 and not 2 * count_std > z:
            raise ConfigError(
                f"strategy.count_stddev {count_std:g} leaves the unclipped count or the update without privacy at "
                f"noise_multiplier {z}: it must exceed noise_multiplier / 2"
            )
        self.update_multiplier = z if not self.count_std else (z**-2 - (2 * self.count_std) ** -2) ** -0.5
        self.seed = context.seed
        self.accountant = load_accountant(self.mechanism, None)
        self.epsilon = 0.0 if z > 0 else math.inf
        if self.target_epsilon is not None:  # a budget that round 1 alone exceeds is refused
            one = load_accountant(self.mechanism, None)
            compose(one, z, self.rate, 1)
            first = spent_epsilon(one, self.target_delta)
            if first > self.target_epsilon:
                rate = "trainer.clients_per_round" if self.sampling == "fixed" else "strategy.sample_rate"
                raise ConfigError(
                    f"strategy.target_epsilon {self.target_epsilon:g} is spent by round 1 alone: one round of "
                    f"noise_multiplier {z:g} at sampling rate {self.rate:.4g} has epsilon {first:.4g} (delta "
                    f"{self.target_delta:g}); raise strategy.noise_multiplier or target_epsilon, or lower {rate}"
                )
        self.round = 0
        self._coins: tuple[int, Any] = (-1, None)  # the Poisson coins of the last round drawn
        self.clip_used, self.unclipped_fraction = self.clip, math.nan

    def update_std(self) -> float:
        """Std of the noise on the sum of clipped deltas: update noise multiplier x the current clip."""
        return self.update_multiplier * self.clip

    def drawn(self, round: int, client_id: int) -> bool:
        """Whether the client takes part in ``round`` (always, unless sampling is "poisson")."""
        if self.sampling == "fixed":
            return True
        if self._coins[0] != round:
            self._coins = (
                round,
                derived_rng(self.seed, Stream.USER_LEVEL_DP, UserLevelKey.POISSON, round).random(self.num_clients),
            )
        return bool(self._coins[1][client_id] < self.rate)

    def configure_client(self, plan: ClientPlan, received: Mapping[str, Tensor] = NOTHING) -> ClientPlan:
        plan = super().configure_client(plan, received)
        self.round = plan.round
        return plan if self.drawn(plan.round, plan.client_id) else replace(plan, epochs=None, steps=0)

    def sum_sizes(self) -> dict[str, int]:
        return {CLIPPED: self.num_params, UNCLIPPED: 1}

    def contribution(self, update: ClientUpdate) -> dict[str, Tensor]:
        """What the client adds to the round's sums (float64): its delta clipped to the clip norm, and 1/2 if it was
        not clipped (-1/2 if it was); with "distributed" noise, each with the client's share of the noise."""
        delta = update.delta.double()
        norm = float(torch.linalg.vector_norm(delta))
        scale = min(1.0, self.clip / norm) if norm > 0 else 1.0
        contribution = {CLIPPED: delta * scale, UNCLIPPED: delta.new_tensor([float(norm <= self.clip) - 0.5])}
        if self.noise == "distributed":
            generator = torch.Generator().manual_seed(
                derived_seed(self.seed, Stream.USER_LEVEL_DP, UserLevelKey.CLIENT_NOISE, self.round, update.client_id)
            )
            share = 1 / math.sqrt(self.expected)
            for name, std in ((CLIPPED, self.update_std()), (UNCLIPPED, self.count_std)):
                value = contribution[name]
                noise = torch.randn(value.shape, generator=generator, dtype=torch.float64).to(value.device)
                value.add_(noise, alpha=std * share)
        return contribution

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        if self.drawn(self.round, update.client_id):
            for name, value in self.contribution(update).items():
                sums.add(name, value)

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        """The inner strategy's step with the private mean; refuses (``BudgetReached``) a round past the budget."""
        history = list(self.accountant.history)
        if self.noise_multiplier > 0:
            compose(self.accountant, self.noise_multiplier, self.rate, 1)
            epsilon = spent_epsilon(self.accountant, self.target_delta)
            if self.target_epsilon is not None and epsilon > self.target_epsilon:
                self.accountant.history = history
                raise BudgetReached(
                    f"user-level DP: round {round + 1} would take epsilon to {epsilon:.4g}, past target_epsilon "
                    f"{self.target_epsilon:g}"
                )
            self.epsilon = epsilon
        total, count = sums[CLIPPED].clone(), sums[UNCLIPPED].clone()
        if self.noise == "central":
            generator = torch.Generator().manual_seed(
                derived_seed(self.seed, Stream.USER_LEVEL_DP, UserLevelKey.CENTRAL_NOISE, round)
            )
            for value, std in ((total, self.update_std()), (count, self.count_std)):
                noise = torch.randn(value.shape, generator=generator, dtype=torch.float64).to(value.device)
                value.add_(noise, alpha=std)
        mean = (total / self.expected).to(params.dtype)
        self.clip_used, self.unclipped_fraction = self.clip, min(1.0, max(0.0, float(count) / self.expected + 0.5))
        if self.target_quantile is not None:
            self.clip *= math.exp(-self.clip_lr * (self.unclipped_fraction - self.target_quantile))
        inner = self.inner
        one = Sums(inner.sum_sizes(), params.device)
        zero = torch.zeros((), device=params.device)
        inner.accumulate(one, ClientUpdate(-1, mean, params.new_zeros(0), 1, 1, 1.0, zero))
        return inner.aggregate(params, one, round)

    def metrics(self) -> dict[str, float]:
        """Epsilon (with noise), the round's clip norm, and with adaptive clipping the noised unclipped fraction (with
        fixed clipping the fraction is not private, and not logged)."""
        metrics = {**super().metrics(), "user_dp/clip": self.clip_used}
        if self.noise_multiplier > 0:
            metrics["user_dp/epsilon"] = self.epsilon
        if self.target_quantile is not None:
            metrics["user_dp/unclipped_fraction"] = self.unclipped_fraction
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "accountant": accountant_state(self.accountant),
            "clip": self.clip,
            "epsilon": self.epsilon,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.accountant = load_accountant(self.mechanism, state["accountant"])
        self.clip, self.epsilon = state["clip"], state["epsilon"]
