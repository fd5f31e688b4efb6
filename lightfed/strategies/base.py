"""The server side of a federated algorithm."""

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from torch import Tensor

from lightfed.core.client_states import ClientStates
from lightfed.core.process_states import Read
from lightfed.core.sums import Sums
from lightfed.core.messages import ClientPlan, ClientUpdate


class Strategy(ABC):
    """What each client is told, how client updates are summed and turned into the next global model.

    Strategies see only flat fp32 tensors. Client contributions are added into named sums (``sum_sizes`` declares
    them) on whichever process trained the client; one all-reduce combines them before ``aggregate``.

    Strategies that remember something per client set ``keeps_client_state`` and use ``self.client_states``: each
    client then always trains on the same process, where its state lives.

    This is the sums path (``server_path = "sums"``); ``ShardedStrategy`` is the other one, for strategies that need
    every active client's whole update.
    """

    server_path: ClassVar[Literal["sums", "sharded"]] = "sums"
    keeps_client_state = False
    needs_plain_sgd = False  # the update assumes local steps x <- x - lr g (SGD without momentum), checked at start
    chooses_client_steps = False  # its local rule sets every step size itself (no trainer.lr_schedule)

    def check(self, world_size: int) -> None:
        """Refuses a run this strategy cannot do, before any process starts or anything is written. Default: none."""

    def setup(self, params: Tensor, num_clients: int) -> None:
        """Called once with the initial global parameters before the first round (and before a resume)."""
        self.num_params = params.numel()
        self.num_clients = num_clients
        self.client_states = ClientStates()

    def configure_client(self, plan: ClientPlan) -> ClientPlan:
        """Adjusts a client's plan for this round (local work, learning rate). Default: unchanged."""
        return plan

    @abstractmethod
    def sum_sizes(self) -> dict[str, int]:
        """Names and lengths of the sums that ``accumulate`` adds into."""

    @abstractmethod
    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        """Adds one client's contribution into ``sums``."""

    @abstractmethod
    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        """The next global parameters from the current ones and the sums over all clients of the round."""

    def configure_job(self, plan: ClientPlan, package: Mapping[str, Tensor]) -> ClientPlan:
        """A client's plan, given what was published with the model it starts from (asynchronous training; empty in
        synchronous rounds). Default: ``configure_client(plan)``."""
        return self.configure_client(plan)

    def accumulate_job(self, sums: Sums, update: ClientUpdate, staleness: int) -> None:
        """Adds one update, trained from the model of ``staleness`` rounds ago, into ``sums``. Default: ``accumulate``
        (a synchronous round's updates all have staleness 0)."""
        self.accumulate(sums, update)

    def aggregate_buffer(self, params: Tensor, sums: Mapping[str, Tensor], round: int, staleness: Sequence[int]) -> Tensor:
        """The next model from a round's updates with these stalenesses. Default: ``aggregate``."""
        return self.aggregate(params, sums, round)

    def metrics(self) -> dict[str, float]:
        """Scalars to log after each round."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume that is the same on every process (saved once, in ``last.ckpt``)."""
        return {}

    def process_state(self) -> dict[str, Any]:
        """What only this process holds (its clients' states), saved in its own checkpoint file."""
        return self.client_states.process_state()

    def load_process_state(self, read: Read, saved_world: int, rank: int, world: int) -> None:
        """Restores this process's part of what ``saved_world`` processes saved with ``process_state``."""
        self.client_states.load_process_states(read, saved_world, rank, world)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what ``state_dict`` returned."""
