"""What TensorBoard's HPARAMS tab shows of a run: the settings that tell runs apart first, then the whole config.

TensorBoard orders the columns by whether their values differ between the runs shown, then by name; the summary
columns are capitalized so that, among the settings the runs share, they come before the config's own keys (all
lowercase). No run writes an experiment summary: TensorBoard then builds the columns from every run's settings (the
union: FedProx's ``mu`` beside FedAvg's runs) and the metrics from every scalar logged, the test metrics included.
"""

from collections.abc import Mapping
from typing import Any


def flat_hparams(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"trainer": {"rounds": 5}}`` -> ``{"trainer/rounds": 5}``; values TensorBoard cannot show become strings."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update(flat_hparams(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value if isinstance(value, (bool, int, float, str)) else str(value)
    return flat


def summary_hparams(config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings that tell runs apart, from a run's config (or the few values a run from Python records): the run
    name, the seed, the strategy and its settings, the learning rate, the partition's alpha and the numbers of
    clients, each where the config has it."""
    init = _init_args
    trainer, data, strategy = config.get("trainer") or {}, config.get("data") or {}, config.get("strategy") or {}
    optimizer = init(config.get("model")).get("optimizer")
    partitioner = init(data).get("partitioner") if "init_args" in data else data.get("partitioner")
    values = {
        "Run": trainer.get("name"),
        "Seed": config.get("seed_everything", config.get("seed")),
        "Strategy": _class_name(strategy),
        **{f"Strategy/{key}": value for key, value in flat_hparams(init(strategy)).items()},
        "LR": init(optimizer).get("lr"),
        "Alpha": init(partitioner).get("alpha"),
        "Clients": init(partitioner).get("num_clients"),
        "Clients per round": trainer.get("clients_per_round"),
    }
    return flat_hparams({key: value for key, value in values.items() if value not in (None, "")})


def _init_args(component: Any) -> Mapping[str, Any]:
    if not isinstance(component, Mapping):
        return {}
    return component.get("init_args", component) or {}


def _class_name(component: Any) -> str:
    """A component's class name without its module (``lightfed.strategies.FedProx`` -> ``FedProx``)."""
    path = component.get("class_path") if isinstance(component, Mapping) else None
    return path.rsplit(".", 1)[-1] if isinstance(path, str) else ""
