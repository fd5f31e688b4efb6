"""Heterogeneous local work: per-client epochs, steps and learning rates drawn from distributions."""

from lightfed.core.seeding import derived_rng
from lightfed.distributions import Distribution
from lightfed.errors import ConfigError
from lightfed.streams import Stream


class LocalWork:
    """Each client's local epochs (or steps) and learning rate, drawn once per client or afresh each round.

    Draws come from the stream (seed, client) or (seed, client, round): the same on every process and on resume.
    """

    def __init__(
        self,
        epochs: int | str | None,
        steps: int | str | None,
        lr: float | str | None = None,
        redraw_each_round: bool = False,
    ) -> None:
        if (epochs is None) == (steps is None):
            raise ConfigError("set exactly one of trainer.local_epochs and trainer.local_steps (the other to null)")
        self.epochs = None if epochs is None else Distribution.parse(epochs, "trainer.local_epochs")
        self.steps = None if steps is None else Distribution.parse(steps, "trainer.local_steps")
        self.lr = None if lr is None else Distribution.parse(lr, "trainer.local_lr")
        for name, distribution in [("local_epochs", self.epochs), ("local_steps", self.steps)]:
            if distribution is not None and (distribution.low < 1 or not float(distribution.low).is_integer()):
                raise ConfigError(f"trainer.{name} must be whole numbers >= 1, got {distribution.low}")
        if self.lr is not None and self.lr.low <= 0:
            raise ConfigError(f"trainer.local_lr must be > 0, got {self.lr.low}")
        self.redraw_each_round = redraw_each_round

    @property
    def drawn(self) -> bool:
        """Whether any of a client's epochs, steps and lr is drawn (not fixed)."""
        return any(d is not None and d.kind != "fixed" for d in (self.epochs, self.steps, self.lr))

    @property
    def fixed(self) -> tuple[int | None, int | None, float | None] | None:
        """Every client's (epochs, steps, lr) where nothing is drawn (None where something is)."""
        return None if self.drawn else self.draw(0, 0, 0)

    def draw(self, seed: int, round: int, client_id: int) -> tuple[int | None, int | None, float | None]:
        """(epochs, steps, lr) of ``client_id`` in ``round``; lr None keeps the optimizer's own."""
        if not self.drawn:
            rng = None  # nothing is drawn: no stream to derive (a tenth of a round of many tiny clients)
        else:
            rng = derived_rng(
                seed, Stream.LOCAL_WORK, *((client_id, round) if self.redraw_each_round else (client_id,))
            )
        epochs = None if self.epochs is None else int(self.epochs.sample(rng))
        steps = None if self.steps is None else int(self.steps.sample(rng))
        lr = None if self.lr is None else self.lr.sample(rng)
        return epochs, steps, lr
