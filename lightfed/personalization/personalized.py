"""What every personalization method has: a wrapper around a sums strategy whose clients keep a model of their own
in the per-client store."""

from dataclasses import replace

from lightning import LightningModule
from torch import Tensor

from lightfed.core.messages import ClientUpdate
from lightfed.core.requirements import Requirements, Sent
from lightfed.core.sums import Sums
from lightfed.data.module import FederatedDataModule
from lightfed.strategies.base import Strategy
from lightfed.strategies.wrapper import StrategyWrapper, SumsStrategyWrapper

PERSONAL, PERSONAL_BUFFERS = "personal", "personal_buffers"  # names in the client store and in a client's report


class Personalized(SumsStrategyWrapper):
    """The inner strategy of the sums path trains the global model; each client also keeps personal weights
    (``personal``, and ``personal_buffers``) in the per-client store (``client_states``), which its local rule
    reports after training. Like SCAFFOLD's control variates they live on the process that trains the client (client
    i on process i % world size), are saved in that process's checkpoint file and restored for any number of
    processes.

    ``bind`` is called once with the live module and the data before the run; ``personal_model`` gives the weights a
    client is evaluated with."""

    own_requirements = Requirements(
        client_state=True, sends=frozenset({Sent(PERSONAL, "kept"), Sent(PERSONAL_BUFFERS, "kept")})
    )

    @property
    def requirements(self) -> Requirements:  # type: ignore[override]
        return self.inner.requirements | self.own_requirements

    def bind(self, module: LightningModule, data: FederatedDataModule) -> None:  # noqa: B027 (an optional hook)
        """Learns from the live module (names of its parameters) and the data (clients' sizes) what it needs."""

    def personal_model(self, client_id: int, params: Tensor, buffers: Tensor) -> tuple[Tensor, Tensor] | None:
        """The client's personal weights when the global model is ``params``/``buffers``; None before it has trained
        (on the process that holds its state)."""
        personal = self.client_states.get(client_id, PERSONAL)
        if personal is None:
            return None
        return personal.to(params.device), self._personal_buffers(client_id, buffers)

    def _personal_buffers(self, client_id: int, buffers: Tensor) -> Tensor:
        kept = self.client_states.get(client_id, PERSONAL_BUFFERS)
        return buffers if kept is None or kept.numel() != buffers.numel() else kept.to(buffers.device)

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        """Keeps the client's reported personal weights; the inner strategy gets the rest of its update."""
        report = dict(update.report)
        self.client_states.set(update.client_id, PERSONAL, report.pop(PERSONAL))
        self.client_states.set(update.client_id, PERSONAL_BUFFERS, report.pop(PERSONAL_BUFFERS))
        super().accumulate(sums, replace(update, report=report))


def personalization_of(strategy: Strategy) -> Personalized | None:
    """The ``Personalized`` strategy in ``strategy``'s chain of wrappers, or None."""
    while not isinstance(strategy, Personalized):
        if not isinstance(strategy, StrategyWrapper):
            return None
        strategy = strategy.inner
    return strategy
