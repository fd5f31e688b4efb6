"""Secure aggregation, simulated (SecAgg, Bonawitz et al. 2017; SecAgg+, Bell et al. 2020): the server only sees
masked, fixed-point quantized client contributions, whose sum is the quantized plain sum exactly: a sealing transform
(``lightfed.core.transforms``)."""

import math
import time
from typing import Literal

import torch
from torch import Tensor

from lightfed.core.requirements import Requirements
from lightfed.core.seeding import derived_seed
from lightfed.core.sums import Sums
from lightfed.core.transforms import Transform, TransformContext
from lightfed.errors import ConfigError
from lightfed.privacy.pairwise_masks import (
    dropped_clients,
    masked_input,
    neighbour_graph,
    unmasking,
    unrecoverable,
)
from lightfed.privacy.quantization import dequantize_sum, quantize
from lightfed.streams import SecureAggregationKey, Stream

MASKED = "secure_aggregation/masked"  # the sum of the masked inputs, mod 2^k (integers, exact in float64)
SUBMITTED, IDS = "secure_aggregation/submitted", "secure_aggregation/ids"  # who sent a masked input
SQUARED_ERROR, CLIPPED = "secure_aggregation/squared_error", "secure_aggregation/clipped"
CLIENT_SECONDS = "secure_aggregation/client_seconds"
MAX_MODULUS_BITS = 40  # sums of masked inputs over up to 2^13 processes x workers stay exact in float64


class SecureAggregation(Transform):
    """Each client's whole contribution to the round's sums (the strategy's of the sums path, and the transforms'
    before this one) quantized to ``bits``-bit fixed point (range [-clip_range, clip_range]) and masked with pairwise
    masks mod 2^modulus_bits, so that the reduced sum is the quantized plain sum bit for bit; the server unmasks it
    and the strategy reads its dequantization. It stands last among the transforms.

    Clients whose ids ``dropout`` picks drop after the masks are agreed: they send nothing, and the server removes
    the survivors' masks with them (the seeds recovered from secret shares, which needs ``threshold`` of every
    affected client's neighbours to survive). Noise a transform before it adds on the client (UserLevelDP's
    distributed noise) is quantized with the rest.

    In a config, it stands last under ``transforms:``:

    ```yaml
    transforms:
      - class_path: lightfed.transforms.SecureAggregation
        init_args: {bits: 16, clip_range: 1.0, modulus_bits: 32}
    ```

    Examples:
        Three clients seal their deltas; the server sees masked integers and recovers the quantized sum:

        >>> import torch
        >>> from lightfed import Sums
        >>> from lightfed.core.transforms import TransformContext
        >>> from lightfed.strategies import ServerContext
        >>> from lightfed.transforms import SecureAggregation
        >>> secagg = SecureAggregation(bits=8, clip_range=1.0, rounding="nearest")
        >>> server = ServerContext(torch.zeros(2), num_clients=3, clients_per_round=3, rounds=1)
        >>> secagg.setup(TransformContext(server, {"delta": 2}, cohort=lambda round: [0, 1, 2], sealed={"delta": 2}))
        >>> sums = Sums({"delta": 2, **secagg.sum_sizes()}, torch.device("cpu"))
        >>> deltas = [torch.tensor([0.5, -0.5]), torch.tensor([0.25, 0.0]), torch.tensor([-1.0, 1.0])]
        >>> for client_id, delta in enumerate(deltas):
        ...     secagg.seal(delta, client_id, 0, sums)
        >>> sums["secure_aggregation/masked"]
        tensor([3.1151e+09, 2.4837e+09], dtype=torch.float64)
        >>> secagg.recovered(sums, 0)
        >>> sums["delta"].round(decimals=2)
        tensor([-0.2500,  0.5100], dtype=torch.float64)
    """

    seals = True

    def __init__(
        self,
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
            bits: Fixed-point bits per coordinate of a client's contribution.
            clip_range: Each coordinate is clipped to [-clip_range, clip_range] before it is quantized.
            clip_ranges: Ranges of some of the sums, by name (e.g. FedAvg's ``weight``).
            rounding: "stochastic" (unbiased, from a seeded generator per client and round) or "nearest".
            modulus_bits: k: masks and sums are integers mod 2^k; clients per round x (2^bits - 1) must be < 2^k.
            neighbours: SecAgg+: each client masks with this many (even) neighbours of a random ring graph; null:
                with every other client of the round (SecAgg).
            dropout: Fraction of each round's clients that drop out before sending (chosen from the seed).
            threshold: Fraction of a client's neighbours whose shares reconstruct its secrets (Shamir's t).
        """
        if not 1 <= bits < modulus_bits <= MAX_MODULUS_BITS:
            raise ConfigError(
                f"SecureAggregation's bits and modulus_bits need 1 <= bits < modulus_bits <= {MAX_MODULUS_BITS}, got "
                f"{bits} and {modulus_bits}"
            )
        ranges = {"clip_range": clip_range, **(clip_ranges or {})}
        if any(not value > 0 for value in ranges.values()):
            raise ConfigError(f"SecureAggregation's clip_range and clip_ranges must be > 0, got {ranges}")
        if neighbours is not None and (neighbours < 2 or neighbours % 2):
            raise ConfigError(f"SecureAggregation's neighbours must be an even number >= 2 (or null), got {neighbours}")
        if not 0 <= dropout < 1 or not 0 < threshold <= 1:
            raise ConfigError(
                f"SecureAggregation's dropout must be in [0, 1) and threshold in (0, 1], got {dropout}, {threshold}"
            )
        self.bits, self.clip_range, self.clip_ranges, self.rounding = bits, clip_range, clip_ranges or {}, rounding
        self.modulus_bits, self.neighbours, self.dropout, self.threshold = modulus_bits, neighbours, dropout, threshold
        self.last: dict[str, float] = {}

    @property
    def requirements(self) -> Requirements:
        """The round's sums (it seals them); with dropout, clients of the round that send nothing."""
        return Requirements(sums_path=True, drops_clients=self.dropout > 0, encodes=True)

    def setup(self, context: TransformContext) -> None:
        server = context.server
        self.seed, self.clients_per_round = server.seed, server.clients_per_round
        if context.cohort is None:
            raise ConfigError("SecureAggregation needs synchronous rounds: its parties are each round's clients")
        self.cohort = context.cohort
        if self.clients_per_round * (2**self.bits - 1) >= 2**self.modulus_bits:
            raise ConfigError(
                f"{self.clients_per_round} clients x {self.bits}-bit values overflow the modulus 2^{self.modulus_bits}: "
                "raise SecureAggregation's modulus_bits or lower its bits"
            )
        self.sealed = context.sealed or {}
        unknown = set(self.clip_ranges) - set(self.sealed)
        if unknown:
            raise ConfigError(
                f"SecureAggregation's clip_ranges names {sorted(unknown)}, not sums of {list(self.sealed)}"
            )
        self.clip = torch.cat(
            [
                torch.full((size,), float(self.clip_ranges.get(name, self.clip_range)))
                for name, size in self.sealed.items()
            ]
        ).to(torch.float64)
        self._graphs: dict[int, tuple[list[int], dict[int, list[int]], set[int]]] = {}
        self.check_rounds(server.rounds)

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
                    f"of clients {lost}; lower SecureAggregation's dropout or threshold, or raise its neighbours"
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

    def quantized(self, client_id: int, round: int, contribution: Tensor) -> Tensor:
        """The client's contribution in fixed point (its rounding drawn from (seed, round, client))."""
        generator = None
        if self.rounding == "stochastic":
            generator = torch.Generator(contribution.device)
            generator.manual_seed(
                derived_seed(self.seed, Stream.SECURE_AGGREGATION, SecureAggregationKey.ROUNDING, round, client_id)
            )
        return quantize(contribution, self.clip.to(contribution.device), self.bits, generator)

    def client_message(self, client_id: int, round: int, quantized: Tensor) -> Tensor:
        """The masked input y_u the client sends: all the server ever sees of it."""
        _, graph, _ = self.protocol(round)
        return masked_input(quantized, client_id, graph[client_id], self.seed, round, self.modulus_bits)

    def seal(self, contribution: Tensor, client_id: int, round: int, sums: Sums) -> None:
        if client_id in self.protocol(round)[2]:
            return  # dropped out: sends nothing
        began = time.perf_counter()
        clip = self.clip.to(contribution.device)
        quantized = self.quantized(client_id, round, contribution)
        message = self.client_message(client_id, round, quantized)
        sums[MASKED].add_(message.to(torch.float64)).remainder_(2**self.modulus_bits)
        error = dequantize_sum(quantized, clip, self.bits, 1) - contribution
        sums.add(SQUARED_ERROR, float(error.square().sum()))
        sums.add(CLIPPED, float((contribution.abs() > clip).sum()))
        sums.add(SUBMITTED, 1)
        sums.add(IDS, client_id)
        sums.add(CLIENT_SECONDS, time.perf_counter() - began)

    def sent_bytes(self, size: int, client_id: int, round: int) -> int:
        """The masked input, ``modulus_bits`` per value of the client's whole contribution (nothing when it drops)."""
        return 0 if client_id in self.protocol(round)[2] else math.ceil(self.clip.numel() * self.modulus_bits / 8)

    def unmasked_sum(self, sums: Sums, round: int) -> tuple[Tensor, int]:
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

    def recovered(self, sums: Sums, round: int) -> None:
        """Writes the dequantized sum of the survivors' contributions into the plain sums it sealed."""
        began = time.perf_counter()
        total, survivors = self.unmasked_sum(sums, round)
        plain = dequantize_sum(total, self.clip, self.bits, survivors).to(sums.buffer.device)
        offset = 0
        for name, size in self.sealed.items():
            sums[name].copy_(plain[offset : offset + size])
            offset += size
        size = self.clip.numel()
        self.last = {
            "dropped": float(self.clients_per_round - survivors),
            "quantization_rmse": math.sqrt(float(sums[SQUARED_ERROR]) / (survivors * size)),
            "clipped_fraction": float(sums[CLIPPED]) / (survivors * size),
            "client_seconds": float(sums[CLIENT_SECONDS]) / survivors,
            "server_seconds": time.perf_counter() - began,
        }

    def metrics(self) -> dict[str, float]:
        return self.last
