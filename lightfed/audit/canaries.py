"""Canary clients for the one-shot privacy estimate (Andrew et al., ICLR 2024), as a transform in front of
``UserLevelDP``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from lightfed.audit.canary_estimate import CanaryEstimate, Null, estimate_epsilon
from lightfed.core.requirements import Requirements
from lightfed.core.seeding import derived_rng
from lightfed.core.sums import DELTA, WEIGHT, Sums
from lightfed.core.transforms import Transform, TransformContext
from lightfed.errors import ConfigError
from lightfed.streams import Stream


class Canaries(Transform):
    """``count`` canary clients, each of which sends the same fixed random direction (uniform on the sphere, of L2
    norm ``norm``: set it to the clip norm) in every round it is drawn in, each drawn independently with probability
    ``sample_rate`` each round (default: the run's clients_per_round / clients sampled from, as a client is). Listed
    before ``UserLevelDP`` in ``transforms:``, its server half runs after UserLevelDP's, on the noised sum of clipped
    deltas, and adds the drawn canaries to it: the sum of the canaries and the noise is the same in either order, and
    UserLevelDP's fixed denominator stays that of the real clients.

    After the last round it reports ``canaries/epsilon_estimate``: the cosines of the sum of the released mean deltas
    (the model's total change under FedAvg at a constant server_lr) with each canary drawn at least once, against
    those with ``unobserved`` fresh directions, and the epsilon between the two fitted Gaussians at ``target_delta``;
    ``canaries/epsilon_upper`` is its bootstrap bound at ``confidence``. Canaries are no clients of the run: no
    evaluation, training loss or client metric counts them; the model takes their directions as part of its update.

    ``lightfed audit`` sets it for its private target runs; in a config of your own, it stands before UserLevelDP:

    ```yaml
    transforms:
      - class_path: lightfed.audit.Canaries
        init_args: {count: 100, unobserved: 100, norm: 1.0}
      - class_path: lightfed.transforms.UserLevelDP
        init_args: {noise_multiplier: 1.0, clip: 1.0}
    ```

    Examples:
        Of 4 canaries, the first takes part in round 1; it adds its direction of norm 1 to the delta sum:

        >>> import torch
        >>> from lightfed import Sums
        >>> from lightfed.audit import Canaries
        >>> from lightfed.core.transforms import TransformContext
        >>> from lightfed.strategies import ServerContext
        >>> canaries = Canaries(count=4, unobserved=4, norm=1.0, sample_rate=0.5)
        >>> server = ServerContext(torch.zeros(10), num_clients=20, rounds=3)
        >>> canaries.setup(TransformContext(server, {"delta": 10, "weight": 1}))
        >>> canaries.inserted(0)
        array([ True, False, False, False])
        >>> sums = Sums({"delta": 10, "weight": 1}, torch.device("cpu"))
        >>> sums.add("weight", 1.0)  # the clients' weight: the mean delta divides by it
        >>> canaries.recovered(sums, 0)
        >>> torch.allclose(sums["delta"], canaries.directions[0])
        True
        >>> Canaries(count=1)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: Canaries' count must be >= 2
    """

    def __init__(
        self,
        count: int = 100,
        unobserved: int = 100,
        norm: float = 1.0,
        sample_rate: float | None = None,
        weight: float | None = None,
        target_delta: float = 1e-5,
        null: Null = "fitted",
        confidence: float = 0.95,
        resamples: int = 200,
    ) -> None:
        """
        Args:
            count: Canary clients inserted.
            unobserved: Fresh random directions, never inserted, whose cosines give the null Gaussian.
            norm: L2 norm of a canary's update (the clip norm of ``UserLevelDP``).
            sample_rate: Probability that a canary takes part in a round; None: the run's clients_per_round / the
                clients it samples from.
            weight: None: a canary adds its update alone to the sum (behind UserLevelDP's fixed denominator); a
                number: it adds weight x its update to the strategy's delta sum and ``weight`` to its weight sum (a
                run without UserLevelDP: weigh a canary as a client of that many examples).
            target_delta: Delta of the estimate (the run's).
            null: "fitted": the null Gaussian fitted to the unobserved directions' cosines; "theory": N(0, 1/d).
            confidence: Level of the bootstrap's upper bound on the estimate.
            resamples: Bootstrap resamples.
        """
        checks = {
            "count must be >= 2": count >= 2,
            "unobserved must be >= 2": unobserved >= 2,
            "norm must be > 0": norm > 0,
            "sample_rate must be in (0, 1]": sample_rate is None or 0 < sample_rate <= 1,
            "weight must be > 0": weight is None or weight > 0,
            "target_delta must be in (0, 1)": 0 < target_delta < 1,
            "null must be 'fitted' or 'theory'": null in ("fitted", "theory"),
            "confidence must be in (0, 1)": 0 < confidence < 1,
            "resamples must be >= 1": resamples >= 1,
        }
        for message, holds in checks.items():
            if not holds:
                raise ConfigError(f"Canaries' {message}")
        self.count, self.unobserved, self.norm, self.sample_rate, self.weight = (
            count,
            unobserved,
            norm,
            sample_rate,
            weight,
        )
        self.target_delta, self.null, self.confidence, self.resamples = target_delta, null, confidence, resamples
        self.result: CanaryEstimate | None = None

    @property
    def requirements(self) -> Requirements:
        """The round's sums (it adds into them) and a strategy of the mean."""
        return Requirements(sums_path=True, mean_only=True)

    def setup(self, context: TransformContext) -> None:
        server = context.server
        if server.rounds < 1:
            raise ConfigError("Canaries needs trainer.rounds to report its estimate after the last round")
        sampled = server.sampled_clients or server.num_clients
        self.rate = self.sample_rate if self.sample_rate is not None else server.clients_per_round / sampled
        self.seed, self.rounds, self.dim = server.seed, server.rounds, server.num_params
        self.device = server.params.device
        self.directions = self._directions()
        self.total = torch.zeros(self.dim, dtype=torch.float64)
        self.times = np.zeros(self.count, dtype=np.int64)  # rounds each canary was inserted in

    def _directions(self) -> Tensor:
        """(count + unobserved, d) unit rows, uniform on the sphere: the canaries' then the unobserved ones."""
        generator = torch.Generator().manual_seed(int(derived_rng(self.seed, Stream.CANARIES, 1).integers(2**62)))
        rows = torch.randn(self.count + self.unobserved, self.dim, generator=generator, dtype=torch.float64)
        return rows / torch.linalg.vector_norm(rows, dim=1, keepdim=True)

    def inserted(self, round: int) -> np.ndarray:
        """Which canaries take part in ``round`` (a boolean per canary)."""
        return derived_rng(self.seed, Stream.CANARIES, 0, round).random(self.count) < self.rate

    def recovered(self, sums: Sums, round: int) -> None:
        """Adds the round's canaries to the delta sum (and their weight), then keeps the round's mean delta."""
        drawn = self.inserted(round)
        self.times += drawn
        added = self.norm * (torch.from_numpy(drawn.astype(np.float64)) @ self.directions[: self.count])
        weight = 1.0 if self.weight is None else self.weight
        sums[DELTA].add_(added.to(sums[DELTA].device, sums[DELTA].dtype), alpha=weight)
        if self.weight is not None:
            sums[WEIGHT].add_(self.weight * float(drawn.sum()))
        mean = sums[DELTA].double().cpu() / float(sums[WEIGHT].sum())
        self.total += mean
        if round == self.rounds - 1:
            self.result = self.estimate()

    def cosines(self) -> tuple[np.ndarray, np.ndarray]:
        """The cosines of the summed mean deltas with the canaries inserted at least once, and with the unobserved
        directions."""
        length = float(torch.linalg.vector_norm(self.total))
        cosines = (self.directions @ self.total / length if length > 0 else torch.zeros(len(self.directions))).numpy()
        return cosines[: self.count][self.times > 0], cosines[self.count :]

    def estimate(self) -> CanaryEstimate:
        observed, unobserved = self.cosines()
        if len(observed) < 2:
            raise ConfigError(f"Canaries: only {len(observed)} canaries were ever inserted: raise count or sample_rate")
        return estimate_epsilon(
            observed, unobserved, self.target_delta, self.dim, self.null, self.confidence, self.resamples, self.seed
        )

    def metrics(self) -> dict[str, float]:
        """After the last round: the estimate, its upper bound and the fitted Gaussians."""
        if self.result is None:
            return {}
        result = self.result
        return {
            "epsilon_estimate": result.epsilon,
            "epsilon_upper": result.upper,
            "cosine_mean": result.observed[0],
            "cosine_std": result.observed[1],
            "null_mean": result.null[0],
            "null_std": result.null[1],
            "observed": float((self.times > 0).sum()),
        }

    def state_dict(self) -> dict[str, Any]:
        return {"total": self.total.clone(), "times": torch.from_numpy(self.times.copy())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total, self.times = state["total"].double(), state["times"].numpy().astype(np.int64)
