"""User-level differential privacy: DP-FedAvg (McMahan et al. 2018) with fixed or adaptive clipping (Andrew et al.
2021), as a transform in front of a strategy that reads only the mean delta."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Literal

import torch

from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.requirements import Requirements
from lightfed.core.seeding import derived_rng, derived_seed
from lightfed.core.sums import DELTA, WEIGHT, Sums
from lightfed.core.transforms import Transform, TransformContext
from lightfed.errors import ConfigError
from lightfed.privacy.accountant import accountant_state, compose, load_accountant, spent_epsilon
from lightfed.privacy.base import BudgetReached
from lightfed.streams import Stream, UserLevelKey

UNCLIPPED = "user_level_dp/unclipped_count"


class UserLevelDP(Transform):
    """DP-FedAvg: each client's whole delta is clipped to L2 norm ``clip`` and weighs 1; Gaussian noise of std
    noise_multiplier x clip is added to their sum, which is divided by the expected number of clients per round
    (unweighted: the fixed denominator of DP-FedAvg), and the strategy takes this private mean as the round's mean
    delta (its server step: FedAvg's, FedAvgM's momentum, FedAdam's moments, ...; one that reads more than the mean
    is refused).

    With ``target_quantile`` the clip norm follows that quantile of the clients' update norms (Andrew et al.): each
    client also sends b - 1/2, b = 1 if its norm was at most the clip (0 if not): sensitivity 1/2; their sum gets
    Gaussian noise of std ``count_stddev``, the noised fraction is sum / expected clients + 1/2 (clamped to [0, 1]),
    and the clip becomes clip x exp(-clip_lr x (noised fraction - target_quantile)). The update's noise is raised
    so that both releases together are one Gaussian mechanism of ``noise_multiplier``:
    (noise_multiplier^-2 - (2 count_stddev)^-2)^-1/2.

    Every process draws the same noise (seeded by ``noise_seed``, by default ``trainer.seed``, and the round), so 1
    and N processes give the same model. Epsilon (Opacus' accountant, at ``target_delta``, one subsampled Gaussian
    step per round) is logged every round as ``user_level_dp/epsilon``, kept in checkpoints, and with
    ``target_epsilon`` the run stops (with a checkpoint of the last round within it) at the first round that would
    exceed it.

    The noise assumes the clip: a transform that may change deltas (a compressor) stands before it.

    In a config:

    ```yaml
    strategy: {class_path: lightfed.strategies.FedAvg}
    transforms:
      - class_path: lightfed.transforms.UserLevelDP
        init_args: {noise_multiplier: 1.0, clip: 1.0, target_delta: 1.0e-05}
    ```

    Examples:
        A client's delta of norm 5 is clipped to norm 1 and weighs 1; the unclipped count gets -1/2:

        >>> import torch
        >>> from lightfed import ClientUpdate, Sums
        >>> from lightfed.transforms import UserLevelDP
        >>> dp = UserLevelDP(noise_multiplier=1.0, clip=1.0)
        >>> update = ClientUpdate(0, torch.tensor([3.0, 4.0]), torch.zeros(0), 50, 5, 5.0, torch.tensor(0.0))
        >>> sums = Sums(dp.sum_sizes(), torch.device("cpu"))
        >>> sent = dp.contribution(update, 0, sums)
        >>> sent.delta, sent.num_examples
        (tensor([0.6000, 0.8000], dtype=torch.float64), 1)
        >>> sums["user_level_dp/unclipped_count"]
        tensor([-0.5000], dtype=torch.float64)
        >>> UserLevelDP(noise_multiplier=1.0, target_quantile=1.5)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: UserLevelDP's target_quantile must be in (0, 1)
    """

    bounds_norm = True

    def __init__(
        self,
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
        noise_seed: int | None = None,
    ) -> None:
        """
        Args:
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
            noise_seed: Seed of the noise (None: trainer.seed). A privacy audit's shadow runs share the target's
                data and sampling (trainer.seed) but not its noise, which a LiRA attack would otherwise subtract.
        """
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
                raise ConfigError(f"UserLevelDP's {message}")
        self.noise_multiplier, self.clip, self.target_quantile, self.clip_lr = (
            noise_multiplier,
            clip,
            target_quantile,
            clip_lr,
        )
        self.count_stddev, self.sampling, self.sample_rate, self.noise = count_stddev, sampling, sample_rate, noise
        self.target_epsilon, self.target_delta, self.mechanism = target_epsilon, target_delta, accountant
        self.noises_deltas = noise == "distributed"  # each client adds its share of the noise to what it sends
        self.noise_seed = noise_seed

    @property
    def requirements(self) -> Requirements:
        """The round's sums (it noises them), a strategy of the mean, and with distributed noise every client's
        share of it."""
        return Requirements(sums_path=True, mean_only=True, every_client_sends=self.noise == "distributed")

    def setup(self, context: TransformContext) -> None:
        server = context.server
        if set(context.strategy_sums) != {DELTA, WEIGHT}:
            raise ConfigError(
                f"UserLevelDP noises the mean delta (sums {DELTA!r} and {WEIGHT!r}), but the strategy adds into "
                f"{sorted(context.strategy_sums)}: use FedAvg, FedAvgM, FedAdam, FedYogi, FedAdagrad, FedProx or FedSAM"
            )
        clients, sampled = server.sampled_clients or server.num_clients, server.clients_per_round
        if self.sampling == "poisson" and sampled != clients:
            raise ConfigError(
                f"sampling: poisson draws each of the {clients} clients itself: set trainer.clients_per_round to "
                f"{clients}, got {sampled}"
            )
        self.num_clients = server.num_clients
        self.rate = sampled / clients if self.sampling == "fixed" else float(self.sample_rate or 0)
        self.expected = self.rate * clients  # the fixed denominator: expected clients per round
        z = self.noise_multiplier
        count_std = self.expected / 20 if self.count_stddev is None else self.count_stddev
        self.count_std = 0.0 if self.target_quantile is None or z == 0 else count_std
        if self.target_quantile is not None and z > 0 and not 2 * count_std > z:
            raise ConfigError(
                f"UserLevelDP's count_stddev {count_std:g} leaves the unclipped count or the update without privacy at "
                f"noise_multiplier {z}: it must exceed noise_multiplier / 2"
            )
        self.update_multiplier = z if not self.count_std else (z**-2 - (2 * self.count_std) ** -2) ** -0.5
        self.seed = server.seed
        self.noise_key = server.seed if self.noise_seed is None else self.noise_seed
        self.accountant = load_accountant(self.mechanism, None)
        self.epsilon = 0.0 if z > 0 else math.inf
        if self.target_epsilon is not None:  # a budget that round 1 alone exceeds is refused
            one = load_accountant(self.mechanism, None)
            compose(one, z, self.rate, 1)
            first = spent_epsilon(one, self.target_delta)
            if first > self.target_epsilon:
                rate = "trainer.clients_per_round" if self.sampling == "fixed" else "UserLevelDP's sample_rate"
                raise ConfigError(
                    f"UserLevelDP's target_epsilon {self.target_epsilon:g} is spent by round 1 alone: one round of "
                    f"noise_multiplier {z:g} at sampling rate {self.rate:.4g} has epsilon {first:.4g} (delta "
                    f"{self.target_delta:g}); raise its noise_multiplier or target_epsilon, or lower {rate}"
                )
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

    def plan(self, plan: ClientPlan) -> ClientPlan:
        """A client Poisson sampling leaves out of its round takes no step."""
        return plan if self.drawn(plan.round, plan.client_id) else replace(plan, epochs=None, steps=0)

    def sum_sizes(self) -> dict[str, int]:
        return {UNCLIPPED: 1}

    def contribution(self, update: ClientUpdate, round: int, sums: Sums) -> ClientUpdate | None:
        """The client's delta clipped to the clip norm (float64, weight 1), and 1/2 added to the unclipped count if it
        was not clipped (-1/2 if it was); with "distributed" noise, each with the client's share of the noise. A
        client Poisson sampling left out sends nothing."""
        if not self.drawn(round, update.client_id):
            return None
        delta = update.delta.double()
        norm = float(torch.linalg.vector_norm(delta))
        scale = min(1.0, self.clip / norm) if norm > 0 else 1.0
        clipped, unclipped = delta * scale, delta.new_tensor([float(norm <= self.clip) - 0.5])
        if self.noise == "distributed":
            generator = torch.Generator().manual_seed(
                derived_seed(self.noise_key, Stream.USER_LEVEL_DP, UserLevelKey.CLIENT_NOISE, round, update.client_id)
            )
            share = 1 / math.sqrt(self.expected)
            for value, std in ((clipped, self.update_std()), (unclipped, self.count_std)):
                noise = torch.randn(value.shape, generator=generator, dtype=torch.float64).to(value.device)
                value.add_(noise, alpha=std * share)
        sums.add(UNCLIPPED, unclipped)
        return replace(update, delta=clipped, num_examples=1)

    def recovered(self, sums: Sums, round: int) -> None:
        """Noises the sum of clipped deltas (central noise) and sets its weight to the expected number of clients;
        refuses (``BudgetReached``) a round past the budget."""
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
        total, count = sums[DELTA], sums[UNCLIPPED]
        if self.noise == "central":
            generator = torch.Generator().manual_seed(
                derived_seed(self.noise_key, Stream.USER_LEVEL_DP, UserLevelKey.CENTRAL_NOISE, round)
            )
            for value, std in ((total, self.update_std()), (count, self.count_std)):
                noise = torch.randn(value.shape, generator=generator, dtype=torch.float64).to(value.device)
                value.add_(noise, alpha=std)
        sums[WEIGHT].fill_(self.expected)
        self.clip_used, self.unclipped_fraction = self.clip, min(1.0, max(0.0, float(count) / self.expected + 0.5))
        if self.target_quantile is not None:
            self.clip *= math.exp(-self.clip_lr * (self.unclipped_fraction - self.target_quantile))

    def metrics(self) -> dict[str, float]:
        """Epsilon (with noise), the round's clip norm, and with adaptive clipping the noised unclipped fraction (with
        fixed clipping the fraction is not private, and not logged)."""
        metrics = {"clip": self.clip_used}
        if self.noise_multiplier > 0:
            metrics["epsilon"] = self.epsilon
        if self.target_quantile is not None:
            metrics["unclipped_fraction"] = self.unclipped_fraction
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"accountant": accountant_state(self.accountant), "clip": self.clip, "epsilon": self.epsilon}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.accountant = load_accountant(self.mechanism, state["accountant"])
        self.clip, self.epsilon = state["clip"], state["epsilon"]
