"""Secure aggregation, simulated (SecAgg, Bonawitz et al. 2017; SecAgg+, Bell et al. 2020): the server only sees
masked, fixed-point quantized client contributions, whose sum is the quantized plain sum exactly."""

import math
import time
from collections.abc import Mapping
from typing import Literal

import torch
from torch import Tensor

from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.seeding import derived_seed, sample_clients
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.privacy.pairwise_masks import (
    dropped_clients,
    masked_input,
    neighbour_graph,
    unmasking,
    unrecoverable,
)
from lightfed.privacy.quantization import dequantize_sum, quantize
from lightfed.privacy.user_level import UserLevelDP
from lightfed.strategies.base import NOTHING, ServerContext, Strategy
from lightfed.strategies.wrapper import SumsStrategyWrapper
from lightfed.streams import SecureAggregationKey, Stream

MASKED = "secure_aggregation/masked"  # the sum of the masked inputs, mod 2^k (integers, exact in float64)
SUBMITTED, IDS = "secure_aggregation/submitted", "secure_aggregation/ids"  # who sent a masked input
SQUARED_ERROR, CLIPPED = "secure_aggregation/squared_error", "secure_aggregation/clipped"
CLIENT_SECONDS = "secure_aggregation/client_seconds"
MAX_MODULUS_BITS = 40  # sums of masked inputs over up to 2^13 processes x workers stay exact in float64


class SecureAggregation(SumsStrategyWrapper):
    """The inner strategy of the sums path, each client's contribution to every one of its sums quantized to
    ``bits``-bit fixed point (range [-clip_range, clip_range]) and masked with pairwise masks mod 2^modulus_bits, so
    that the reduced sum is the quantized plain sum bit for bit; the inner strategy aggregates its dequantization.

    Clients whose ids ``dropout`` picks drop after the masks are agreed: they send nothing, and the server removes
    the survivors' masks with them (the seeds recovered from secret shares, which needs ``threshold`` of every
    affected client's neighbours to survive). Composes with noise that an inner wrapper adds in ``accumulate``
    (on the client, before quantization: distributed DP).
    """

    def __init__(
        self,
        strategy: Strategy,
        bits: int = 16,
        clip_range: float = 1.0,
        clip_ranges: dict[str, float] | None = None,
        rounding: Literal["stochastic", "nearest"] = "stochastic",
        modulus_bits: int = 32,
        neighbours: int | None = None,
        dropout: float = 0.0,
        threshold: float = 0.5,
    ) -> None:
        """
        Args:
            strategy: The strategy of the sums path that aggregates the (dequantized) sums.
            bits: Fixed-point bits per coordinate of a client's contribution.
            clip_range: Each coordinate is clipped to [-clip_range, clip_range] before it is quantized.
            clip_ranges: Ranges of some of the inner strategy's sums, by name (e.g. FedAvg's ``weight``).
            rounding: "stochastic" (unbiased, from a seeded generator per client and round) or "nearest".
            modulus_bits: k: masks and sums are integers mod 2^k; clients per round x (2^bits - 1) must be < 2^k.
            neighbours: SecAgg+: each client masks with this many (even) neighbours of a random ring graph; null:
                with every other client of the round (SecAgg).
            dropout: Fraction of each round's clients that drop out before sending (chosen from the seed).
            threshold: Fraction of a client's neighbours whose shares reconstruct its secrets (Shamir's t).
        """
        if not 1 <= bits < modulus_bits <= MAX_MODULUS_BITS:
            raise ConfigError(
                f"strategy.bits and modulus_bits need 1 <= bits < modulus_bits <= {MAX_MODULUS_BITS}, got {bits} "
                f"and {modulus_bits}"
            )
        ranges = {"clip_range": clip_range, **(clip_ranges or {})}
        if any(not value > 0 for value in ranges.values()):
            raise ConfigError(f"strategy.clip_range and clip_ranges must be > 0, got {ranges}")
        if neighbours is not None and (neighbours < 2 or neighbours % 2):
            raise ConfigError(f"strategy.neighbours must be an even number >= 2 (or null), got {neighbours}")
        if not 0 <= dropout < 1 or not 0 < threshold <= 1:
            raise ConfigError(f"strategy.dropout must be in [0, 1) and threshold in (0, 1], got {dropout}, {threshold}")
        if dropout > 0 and _distributed_noise(strategy):
            raise ConfigError(
                f"strategy.dropout {dropout:g} leaves the distributed noise short of what UserLevelDP accounts (each "
                "client adds std / sqrt(expected clients)): set dropout 0 or UserLevelDP's noise: central"
            )
        super().__init__(strategy)
        self.bits, self.clip_range, self.clip_ranges, self.rounding = bits, clip_range, clip_ranges or {}, rounding
        self.modulus_bits, self.neighbours, self.dropout, self.threshold = modulus_bits, neighbours, dropout, threshold
        self.round = 0
        self.last: dict[str, float] = {}

    def setup(self, context: ServerContext) -> None:
        super().setup(context)
        self.seed, self.clients_per_round = context.seed, context.clients_per_round
        self.population = context.sampled_clients or context.num_clients  # without trainer.unseen_clients
        if self.clients_per_round * (2**self.bits - 1) >= 2**self.modulus_bits:
            raise ConfigError(
                f"{self.clients_per_round} clients x {self.bits}-bit values overflow the modulus 2^{self.modulus_bits}: "
                "raise strategy.modulus_bits or lower strategy.bits"
            )
        sizes = self.inner.sum_sizes()
        unknown = set(self.clip_ranges) - set(sizes)
        if unknown:
            raise ConfigError(f"strategy.clip_ranges names {sorted(unknown)}, not sums of {type(self.inner).__name__}")
        self.clip = torch.cat(
            [torch.full((size,), float(self.clip_ranges.get(name, self.clip_range))) for name, size in sizes.items()]
        ).to(torch.float64)
        self._scratch: Sums | None = None
        self._graphs: dict[int, tuple[list[int], dict[int, list[int]], set[int]]] = {}
        self.check_rounds(context.rounds)

    def cohort(self, round: int) -> list[int]:
        """The round's clients (as the synchronous trainer samples them): the parties of the protocol."""
        return sample_clients(self.seed, round, self.population, self.clients_per_round)

    def protocol(self, round: int) -> tuple[list[int], dict[int, list[int]], set[int]]:
        """The round's cohort, its masking graph and its dropped clients (refused when they cannot be unmasked)."""
        if round not in self._graphs:
            cohort = self.cohort(round)
            graph = neighbour_graph(cohort, self.neighbours, self.seed, round)
            dropped = dropped_clients(cohort, self.dropout, self.seed, round)
            lost = unrecoverable(dropped, graph, self.threshold)
            if lost:
                raise ConfigError(
                    f"secure aggregation cannot unmask round {round + 1}: too few surviving neighbours hold the shares "
                    f"of clients {lost}; lower strategy.dropout or strategy.threshold, or raise strategy.neighbours"
                )
            self._graphs = {round: (cohort, graph, dropped)}
        return self._graphs[round]

    def check_rounds(self, rounds: int) -> None:
        """Refuses settings that cannot unmask one of the first ``rounds`` rounds: the seed decides them all up front."""
        for round in range(rounds):
            self.protocol(round)

    def sum_sizes(self) -> dict[str, int]:
        scalars = (SUBMITTED, IDS, SQUARED_ERROR, CLIPPED, CLIENT_SECONDS)
        return {MASKED: self.clip.numel(), **dict.fromkeys(scalars, 1)}

    def configure_client(self, plan: ClientPlan, received: Mapping[str, Tensor] = NOTHING) -> ClientPlan:
        self.round = plan.round
        return super().configure_client(plan, received)

    def contribution(self, update: ClientUpdate) -> Tensor:
        """The client's contribution to every sum of the inner strategy, concatenated (float64)."""
        if self._scratch is None:
            self._scratch = Sums(self.inner.sum_sizes(), update.delta.device)
        self._scratch.zero_()
        self.inner.accumulate(self._scratch, update)
        return self._scratch.buffer

    def quantized(self, client_id: int, contribution: Tensor) -> Tensor:
        """The client's contribution in fixed point (its rounding drawn from (seed, round, client))."""
        generator = None
        if self.rounding == "stochastic":
            generator = torch.Generator(contribution.device)
            generator.manual_seed(
                derived_seed(self.seed, Stream.SECURE_AGGREGATION, SecureAggregationKey.ROUNDING, self.round, client_id)
            )
        return quantize(contribution, self.clip.to(contribution.device), self.bits, generator)

    def client_message(self, client_id: int, quantized: Tensor) -> Tensor:
        """The masked input y_u the client sends: all the server ever sees of it."""
        _, graph, _ = self.protocol(self.round)
        return masked_input(quantized, client_id, graph[client_id], self.seed, self.round, self.modulus_bits)

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        if update.client_id in self.protocol(self.round)[2]:
            return  # dropped out: sends nothing
        began = time.perf_counter()
        contribution = self.contribution(update)
        clip = self.clip.to(contribution.device)
        quantized = self.quantized(update.client_id, contribution)
        message = self.client_message(update.client_id, quantized)
        sums[MASKED].add_(message.to(torch.float64)).remainder_(2**self.modulus_bits)
        error = dequantize_sum(quantized, clip, self.bits, 1) - contribution
        sums.add(SQUARED_ERROR, float(error.square().sum()))
        sums.add(CLIPPED, float((contribution.abs() > clip).sum()))
        sums.add(SUBMITTED, 1)
        sums.add(IDS, update.client_id)
        sums.add(CLIENT_SECONDS, time.perf_counter() - began)

    def unmasked_sum(self, sums: Mapping[str, Tensor], round: int) -> tuple[Tensor, int]:
        """The sum of the survivors' quantized contributions (int64) and their number, from the reduced sums."""
        cohort, graph, dropped = self.protocol(round)
        survivors = [u for u in cohort if u not in dropped]
        if int(sums[SUBMITTED]) != len(survivors) or int(sums[IDS]) != sum(survivors):
            raise ConfigError(
                f"secure aggregation expected masked inputs from clients {survivors} in round {round + 1}: it runs "
                "with the synchronous trainer sampling from every client (trainer.unseen_clients 0)"
            )
        masked = sums[MASKED].to(torch.int64).cpu()
        removed = unmasking(survivors, dropped, graph, self.seed, round, masked.numel(), self.modulus_bits)
        return (masked - removed).remainder_(2**self.modulus_bits), len(survivors)

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        began = time.perf_counter()
        total, survivors = self.unmasked_sum(sums, round)
        plain = Sums(self.inner.sum_sizes(), params.device)
        plain.buffer.copy_(dequantize_sum(total, self.clip, self.bits, survivors))
        size = self.clip.numel()
        self.last = {
            "secure_aggregation/dropped": float(self.clients_per_round - survivors),
            "secure_aggregation/quantization_rmse": math.sqrt(float(sums[SQUARED_ERROR]) / (survivors * size)),
            "secure_aggregation/clipped_fraction": float(sums[CLIPPED]) / (survivors * size),
            "secure_aggregation/client_seconds": float(sums[CLIENT_SECONDS]) / survivors,
            "secure_aggregation/server_seconds": time.perf_counter() - began,
        }
        return super().aggregate(params, plain, round)

    def metrics(self) -> dict[str, float]:
        return {**super().metrics(), **self.last}


def _distributed_noise(strategy: Strategy) -> bool:
    """Whether ``strategy`` or a strategy it wraps is UserLevelDP with noise added by the clients."""
    while not isinstance(strategy, UserLevelDP):
        if not isinstance(strategy, SumsStrategyWrapper):
            return False
        strategy = strategy.inner
    return strategy.noise == "distributed"
