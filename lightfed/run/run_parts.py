"""What a run builds before its first round, side by side: none of them holds another's parts for the trainer."""

from dataclasses import dataclass

from lightfed.core.transforms import Pipeline
from lightfed.run.client_training import ClientTraining
from lightfed.run.engine import RoundEngine
from lightfed.run.evaluation import Evaluation
from lightfed.run.rounds import SampledRounds
from lightfed.strategies.base import Strategy


@dataclass(frozen=True)
class RunParts:
    """Client ``training`` (the seam, ``lightfed.run.client_training``), the ``strategy`` and the ``transforms`` in
    front of it, the ``source`` of rounds'
    jobs, the round ``engine`` that runs them, the global model's ``evaluation``, and whether client i always trains
    on process i % world size (``fixed_process``: where its per-client state lives)."""

    training: ClientTraining
    strategy: Strategy
    transforms: Pipeline
    source: SampledRounds
    engine: RoundEngine
    evaluation: Evaluation
    fixed_process: bool
