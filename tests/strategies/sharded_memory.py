"""A sharded strategy with per-client state, for the two-process tests (imported by class path)."""

from torch import Tensor

from lightfed.strategies import CoordinateMedian
from lightfed.strategies.sharded_base import ShardedRound


class MedianRememberingDeltas(CoordinateMedian):
    """The coordinate median; also keeps every client's latest delta and its examples in the per-client store."""

    def aggregate_shard(self, params: Tensor, updates: ShardedRound) -> Tensor:
        for row, client_id in enumerate(updates.client_ids):
            self.client_states.set(client_id, "delta", updates.deltas[row])
            self.client_states.set(client_id, "examples", updates.num_examples[row])
        return super().aggregate_shard(params, updates)
