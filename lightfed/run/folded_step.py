"""A user's own ``training_step`` computed for stacked clients at once, without ``vmap``: folded.

The clients' parameters are rows ``[clients, *shape]`` and their batches are folded into one, client after client:
``[clients * width, ...]``, each client's ``width`` examples of which its first ``counts[k]`` are its own (the rest
pads a short batch). ``FoldedStep`` runs ``training_step`` on that batch and computes, for the functions that meet a
client's rows, what each client computes alone:

- ``F.linear`` of stacked weights is a batched matmul of each client's examples with its own rows;
- ``F.cross_entropy`` (mean over the examples) is each client's mean over its own examples: a loss ``[clients]``,
  logged as one value a client, whose sum back-propagated gives each client its own gradient;
- ``F.dropout`` draws each client's mask from a generator of its own, as ``F.dropout`` draws one on the CPU.

Every other function is called as it is, on the folded examples: right for what acts on each example alone
(activations, reshapes of an example). A function that is given a client's rows otherwise, a random draw, or a loss
of another reduction raises ``NotFolded``. What acts across examples (a batch norm, a mean over the batch) is not
seen here: ``VectorizedClients`` compares the folded step with ``vmap``'s once before it trusts it.
"""

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from lightfed.adapters import forward_hooked
from lightfed.run.stacked_layers import dropped_out, stacked_linear

RANDOM = {
    torch.rand,
    torch.randn,
    torch.randint,
    torch.rand_like,
    torch.randn_like,
    torch.randint_like,
    torch.randperm,
    torch.bernoulli,
    torch.normal,
    torch.poisson,
    torch.multinomial,
    Tensor.bernoulli_,
    Tensor.normal_,
    Tensor.uniform_,
    Tensor.random_,
    Tensor.exponential_,
    Tensor.geometric_,
    Tensor.cauchy_,
    Tensor.log_normal_,
    F.alpha_dropout,
    F.feature_alpha_dropout,
    F.dropout1d,
    F.dropout2d,
    F.dropout3d,
    F.rrelu,
    F.gumbel_softmax,
}


def folded(batch: Any) -> Any:
    """A padded batch's tensors ``[clients, width, ...]`` as ``[clients * width, ...]`` (views)."""
    if isinstance(batch, Tensor):
        return batch.flatten(0, 1)
    if isinstance(batch, dict):
        return {key: folded(value) for key, value in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(folded(value) for value in batch)
    return batch


def may_fold(module: nn.Module) -> bool:
    """Whether ``module``'s training step may compute folded: its parameters are all ``nn.Linear`` layers', it has no
    floating buffers (running statistics) and no forward hooks."""
    with_parameters = [m for m in module.modules() if any(True for _ in m.parameters(recurse=False))]
    return (
        all(type(m).forward is nn.Linear.forward for m in with_parameters)
        and not any(b.is_floating_point() for b in module.buffers())
        and not forward_hooked(module)
    )


class NotFolded(Exception):
    """``training_step`` called a function that the folded step does not compute for each client."""


class FoldedStep(TorchFunctionMode):
    """While active, the functions of a folded ``training_step`` computed per client (the module's docstring):
    ``rows`` the ids of the stacked tensors (parameters ``[stacked, ...]``, of which the clients ``at`` are
    computed), ``counts`` and ``sizes`` each client's examples of its ``width`` (a tensor, and numbers),
    ``generators`` each client's (for dropout; none: dropout is refused)."""

    def __init__(
        self,
        rows: set[int],
        at: slice,
        counts: Tensor,
        sizes: list[int],
        width: int,
        generators: list[torch.Generator],
    ) -> None:
        """``sizes``: ``counts`` as numbers."""
        super().__init__()
        self.rows, self.at, self.width, self.generators = rows, at, width, generators
        self.clients, self.counts, self.sizes = len(sizes), counts, sizes
        self.full = all(size == width for size in sizes)
        self.handlers: dict[Callable[..., Any], Callable[..., Any]] = {
            F.linear: self._linear,
            F.cross_entropy: self._cross_entropy,
            F.dropout: self._dropout,
        }

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        handler = self.handlers.get(func)
        if handler is not None:
            return handler(*args, **kwargs)
        if func in RANDOM:
            raise NotFolded(f"{_name(func)} draws random numbers")
        for arg in (*args, *kwargs.values()) if kwargs else args:
            if id(arg) in self.rows:
                raise NotFolded(f"{_name(func)} is given a client's rows")
        return func(*args, **kwargs)

    def _linear(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        if id(weight) not in self.rows:
            if bias is not None and id(bias) in self.rows:
                raise NotFolded("linear of a frozen weight and a trained bias")
            return F.linear(x, weight, bias)
        if bias is not None and id(bias) not in self.rows:
            raise NotFolded("linear of a trained weight and a frozen bias")
        self._check_folded(x, "linear")
        weight, bias = self._computed(weight), None if bias is None else self._computed(bias)
        return stacked_linear(x, weight, bias)

    def _cross_entropy(
        self,
        input: Tensor,
        target: Tensor,
        weight: Tensor | None = None,
        size_average: bool | None = None,
        ignore_index: int = -100,
        reduce: bool | None = None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ) -> Tensor:
        if weight is not None or size_average is not None or reduce is not None or reduction != "mean":
            raise NotFolded("cross_entropy other than the mean over the examples, unweighted")
        self._check_folded(input, "cross_entropy")
        per_example = F.cross_entropy(
            input, target, ignore_index=ignore_index, reduction="none", label_smoothing=label_smoothing
        ).view(self.clients, -1)  # 0 where a target is ignored
        counted = (target != ignore_index).view(self.clients, self.width, -1)
        if self.full:
            return per_example.sum(1) / counted.sum((1, 2))
        own = (torch.arange(self.width, device=input.device) < self.counts.unsqueeze(1)).unsqueeze(2)
        counted = counted & own
        kept = torch.where(counted.view(self.clients, -1), per_example, per_example.new_zeros(()))
        return kept.sum(1) / counted.sum((1, 2))  # a full batch's loss as the full path gives it, bit for bit

    def _dropout(self, input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
        if not training or p == 0:
            return input
        if not self.generators:
            raise NotFolded("dropout without the clients' generators")
        self._check_folded(input, "dropout")
        each = input.numel() // (self.clients * self.width)  # the numbers of an example
        counts = [size * each for size in self.sizes]
        return dropped_out(input.reshape(self.clients, -1), p, self.generators, counts).reshape(input.shape)

    def _computed(self, rows: Tensor) -> Tensor:
        """The rows of the clients computed (``at``)."""
        return rows if len(rows) == self.clients else rows[self.at]

    def _check_folded(self, x: Tensor, name: str) -> None:
        """Refuses a tensor whose rows are not the folded examples."""
        rows = self.clients * self.width
        if x.ndim == 0 or x.shape[0] != rows:
            raise NotFolded(f"{name} of a tensor of {list(x.shape)}, not the folded examples ({rows} rows)")


def _name(func: Callable[..., Any]) -> str:
    return getattr(func, "__qualname__", getattr(func, "__name__", repr(func)))
