"""Which coordinates of the flat parameters and buffers are a client's own, from parameter names."""

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

import torch
from torch import Tensor, nn

from lightfed.core.batch_norms import BATCH_NORMS
from lightfed.core.federated_weights import federated_parameters
from lightfed.errors import ConfigError

ATTRIBUTE = "personal_parameters"  # a module's own list of name patterns of its personal parameters


@dataclass(frozen=True)
class PersonalCoordinates:
    """Boolean masks over the flat parameters and the flat floating-point buffers (``lightfed.core.flat``): True where
    the coordinate belongs to a personal parameter or buffer.

    ``FedPer`` and its subclasses compute them from ``personal`` patterns (``matching``).

    Examples:
        >>> from lightfed.models import MLP
        >>> from lightfed.personalization.personal_coordinates import matching
        >>> model = MLP(in_features=3, num_classes=2, hidden=(4,))
        >>> coordinates = matching(model, ["net.3.*"], "FedPer")
        >>> coordinates.params.int().tolist()
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    """

    params: Tensor
    buffers: Tensor


def _mask(named: Iterable[tuple[str, Tensor]], personal: set[str]) -> Tensor:
    """The flat mask of ``named`` tensors (in flattening order) that are in ``personal``."""
    parts = [torch.full((t.numel(),), name in personal, dtype=torch.bool) for name, t in named]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.bool)


def coordinates_of(module: nn.Module, names: set[str]) -> PersonalCoordinates:
    """The masks of the parameters and floating-point buffers named in ``names`` (the module's own names), laid out
    as ``FlatModule`` flattens them (the federated parameters, then the floating-point ``buffers()``)."""
    buffers = [(n, b) for n, b in module.named_buffers() if b.is_floating_point()]
    return PersonalCoordinates(_mask(federated_parameters(module), names), _mask(buffers, names))


def matching(module: nn.Module, patterns: list[str], method: str) -> PersonalCoordinates:
    """The parameters and buffers whose names match one of ``patterns`` (``fnmatch``, e.g. ``net.7.*``); refused when
    they match no parameter, or every parameter (nothing would be shared)."""
    names = [n for n, _ in federated_parameters(module)] + [n for n, _ in module.named_buffers()]
    chosen = {n for n in names if any(fnmatchcase(n, p) for p in patterns)}
    coordinates = coordinates_of(module, chosen)
    if not coordinates.params.any() or coordinates.params.all():
        some = ", ".join(n for n, _ in federated_parameters(module)[:6])
        raise ConfigError(
            f"transforms: {method}'s personal patterns {patterns} match {int(coordinates.params.sum())} of "
            f"{coordinates.params.numel()} parameter values; they must match some but not all (names: {some}, ...)"
        )
    return coordinates


def declared_patterns(module: nn.Module, patterns: list[str] | None, method: str) -> list[str]:
    """``patterns`` from the config, else the module's ``personal_parameters`` attribute; refused when neither is
    set."""
    if patterns is not None:
        return list(patterns)
    declared = getattr(module, ATTRIBUTE, None)
    if declared is None:
        raise ConfigError(
            f"transforms: {method} needs the names of the personal parameters: set {method}'s personal (e.g. "
            f"['net.7.*']) or give {type(module).__name__} an attribute {ATTRIBUTE} = ['head.*']"
        )
    return [declared] if isinstance(declared, str) else list(declared)


def batchnorm_coordinates(module: nn.Module) -> PersonalCoordinates:
    """Every BatchNorm layer's weight, bias and running statistics (FedBN); refused for a model without one."""
    names = {
        f"{prefix}.{name}" if prefix else name
        for prefix, layer in module.named_modules()
        if isinstance(layer, BATCH_NORMS)
        for name, _ in [*layer.named_parameters(recurse=False), *layer.named_buffers(recurse=False)]
    }
    if not names:
        raise ConfigError(f"transforms: FedBN keeps BatchNorm layers local, but {type(module).__name__} has none")
    return coordinates_of(module, names)
