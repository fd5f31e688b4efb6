"""The ``lightfed`` command: ``fit``, ``validate`` and ``test`` with LightningCLI conventions on jsonargparse."""

import sys

from jsonargparse import ActionConfigFile, ArgumentParser, lazy_instance
from lightning import LightningModule, seed_everything

from lightfed.data.module import FederatedDataModule
from lightfed.errors import LightfedError
from lightfed.models import SmallCNN
from lightfed.strategies import FedAvg, Strategy
from lightfed.trainer import FederatedTrainer

SUBCOMMANDS = {
    "fit": "Train the global model for trainer.rounds rounds.",
    "validate": "Evaluate the global model (of --ckpt_path) with validation_step on the central test set.",
    "test": "Evaluate the global model (of --ckpt_path) with test_step on the central test set.",
}


def _subcommand_parser(name: str) -> ArgumentParser:
    parser = ArgumentParser(description=SUBCOMMANDS[name])
    parser.add_argument("-c", "--config", action=ActionConfigFile, help="YAML config file(s), later ones override.")
    parser.add_argument("--seed_everything", type=int, default=0, help="Seed of model init, sampling and clients.")
    parser.add_class_arguments(FederatedTrainer, "trainer", skip={"seed"})
    parser.add_subclass_arguments(LightningModule, "model", default=lazy_instance(SmallCNN))
    parser.add_class_arguments(FederatedDataModule, "data")
    if name == "fit":
        parser.add_subclass_arguments(Strategy, "strategy", default=lazy_instance(FedAvg))
    parser.add_argument("--ckpt_path", type=str | None, default=None, help='Checkpoint to start from, or "last".')
    return parser


def build_parser() -> tuple[ArgumentParser, dict[str, ArgumentParser]]:
    parser = ArgumentParser(prog="lightfed", description="Federated learning on Lightning Fabric.")
    subcommands = parser.add_subcommands()
    parsers = {name: _subcommand_parser(name) for name in SUBCOMMANDS}
    for name, sub in parsers.items():
        subcommands.add_subcommand(name, sub, help=SUBCOMMANDS[name])
    return parser, parsers


def run(argv: list[str] | None = None) -> dict[str, float]:
    """Parses ``argv``, builds the components and runs the subcommand; returns its metrics."""
    parser, parsers = build_parser()
    config = parser.parse_args(argv)
    name = config.subcommand
    sub_config = config[name]
    seed_everything(sub_config.seed_everything, verbose=False)  # before the model is built
    objects = parser.instantiate_classes(config)[name]
    trainer = FederatedTrainer(**{**vars(sub_config.trainer), "seed": sub_config.seed_everything})
    run_config = parsers[name].dump(sub_config, skip_none=False)
    if name == "fit":
        return trainer.fit(objects.model, objects.data, objects.strategy, sub_config.ckpt_path, run_config)
    return getattr(trainer, name)(objects.model, objects.data, sub_config.ckpt_path, run_config)


def main(argv: list[str] | None = None) -> None:
    try:
        metrics = run(argv)
    except LightfedError as error:
        print(f"lightfed: error: {error}", file=sys.stderr)
        sys.exit(2)
    print(" ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items()) if not k.startswith("round/")))
