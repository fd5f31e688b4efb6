"""The ``fit``, ``validate`` and ``test`` subcommands: their parser (LightningCLI's conventions on jsonargparse) and
``run``, which builds a config's components and runs one."""

import sys

from jsonargparse import ActionConfigFile, ArgumentParser, Namespace
from lightning import LightningModule, seed_everything
from lightning.fabric.loggers import Logger

from lightfed import launcher
from lightfed.asynchronous.schedule import Asynchrony
from lightfed.core.transforms import Transform
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.models import SmallCNN
from lightfed.run.lost_process import ProcessLostError, collective_failed, lost_process_line, timed_out
from lightfed.run.run_fabric import check_seed
from lightfed.run.run_output import LoggerError
from lightfed.run.settings import trainer_settings
from lightfed.strategies import FedAvg, Strategy
from lightfed.trainer import FederatedTrainer
from lightfed.user_modules import user_modules

SUBCOMMANDS = {
    "fit": "Train the global model for trainer.rounds rounds.",
    "validate": "Evaluate the global model (of --ckpt_path) with validation_step on the validation split.",
    "test": "Evaluate the global model (of --ckpt_path) with test_step on the central test set.",
}


AUDIT = "Estimate and attack a config's privacy under UserLevelDP at several noise levels (lightfed audit --help)."


def _subcommand_parser(name: str) -> ArgumentParser:
    parser = ArgumentParser(description=SUBCOMMANDS[name], exit_on_error=False)  # the CLI prints the error in one line
    parser.add_argument("-c", "--config", action=ActionConfigFile, help="YAML config file(s), later ones override.")
    parser.add_argument("--seed_everything", type=int, default=0, help="Seed of model init, sampling and clients.")
    parser.add_function_arguments(trainer_settings, "trainer", skip={"seed"})
    parser.add_argument(
        "--asynchronous",
        type=Asynchrony | None,
        default=None,
        help="Buffered asynchronous training (concurrency, delays); absent: synchronous rounds.",
    )
    # no default instances: jsonargparse would carry a default's init_args over to the class a config names
    # (a FedAdam would get FedAvg's server_lr 1.0); unset model/strategy are built in run()
    parser.add_subclass_arguments(LightningModule, "model", required=False, default=None)
    parser.add_class_arguments(FederatedDataModule, "data")
    # every subcommand takes the strategy, so one config file serves fit, validate and test
    parser.add_subclass_arguments(Strategy, "strategy", required=False, default=None)
    parser.add_argument(
        "--transforms",
        type=list[Transform],
        default=[],
        help="What each client's update goes through, in order, before the strategy (lightfed.transforms).",
    )
    parser.add_argument(
        "--ckpt_path",
        type=str | None,
        default=None,
        help='Checkpoint to start from; "last": the newest of this experiment; "auto": "last" if there is one.',
    )
    return parser


def build_parser() -> tuple[ArgumentParser, dict[str, ArgumentParser]]:
    """The ``lightfed`` parser and each subcommand's own."""
    parser = ArgumentParser(prog="lightfed", description="Federated learning on Lightning Fabric.", exit_on_error=False)
    subcommands = parser.add_subcommands()
    parsers = {name: _subcommand_parser(name) for name in SUBCOMMANDS}
    for name, sub in parsers.items():
        subcommands.add_subcommand(name, sub, help=SUBCOMMANDS[name])
    subcommands.add_subcommand("audit", ArgumentParser(description=AUDIT, exit_on_error=False), help=AUDIT)
    return parser, parsers


def run(argv: list[str] | None = None, fork: bool = False) -> dict[str, float]:
    """Parses ``argv``, builds the components and runs the subcommand; returns its metrics. ``fork``: start the
    other processes of a multi-process CPU run by forking this one (the command line does; ``launcher.start``). The
    user's modules the command names are importable while it runs (``lightfed.user_modules``)."""
    with user_modules(sys.argv[1:] if argv is None else argv):
        return _run(argv, fork)


def _prepared(argv: list[str] | None, fork: bool) -> tuple[str, Namespace, Namespace, FederatedTrainer, str]:
    """Parses ``argv`` and builds its components: (subcommand, its config, its objects with model and strategy set,
    the trainer, the run's config as YAML)."""
    parser, parsers = build_parser()
    try:
        config = parser.parse_args(argv)
    except UnicodeDecodeError as error:  # jsonargparse reads a config file as UTF-8 text
        raise ConfigError(
            f"a --config file is not UTF-8 text ({error.reason} at byte {error.start}): pass a YAML file"
        ) from None
    name = config.subcommand
    sub_config = config[name]
    if fork:
        launcher.start(vars(sub_config.trainer))
    check_seed(sub_config.seed_everything)
    seed_everything(sub_config.seed_everything, verbose=False)  # before the model is built
    try:
        objects = parser.instantiate(config)[name]
    except ValueError:
        _raise_logger_error(sub_config.trainer.logger)
        raise
    objects.model = objects.model if objects.model is not None else SmallCNN()
    objects.strategy = objects.strategy if objects.strategy is not None else FedAvg()
    settings = {**vars(objects.trainer), "seed": sub_config.seed_everything}  # its privacy, callbacks, logger built
    trainer = FederatedTrainer.from_settings(objects.asynchronous, **settings)
    run_config = parsers[name].dump(sub_config, skip_unset=False)  # keeps null settings (local_epochs: null)
    return name, sub_config, objects, trainer, run_config


def fit_in_process(argv: list[str]) -> tuple[dict[str, float], LightningModule, FederatedDataModule]:
    """Runs ``lightfed fit ARGV`` in this process (no forked processes, nothing printed after it); returns its last
    round's metrics, its module (holding the final global model) and its data."""
    with user_modules(argv):
        _, sub_config, objects, trainer, run_config = _prepared(["fit", *argv], fork=False)
        metrics = trainer.fit(
            objects.model, objects.data, objects.strategy, sub_config.ckpt_path, run_config, objects.transforms
        )
    return metrics, objects.model, objects.data


def _run(argv: list[str] | None, fork: bool) -> dict[str, float]:
    name, sub_config, objects, trainer, run_config = _prepared(argv, fork)
    model, strategy = objects.model, objects.strategy
    try:
        if name == "fit":
            metrics = trainer.fit(model, objects.data, strategy, sub_config.ckpt_path, run_config, objects.transforms)
        else:
            metrics = getattr(trainer, name)(model, objects.data, sub_config.ckpt_path, run_config)
    except RuntimeError as error:
        if not collective_failed(error):
            raise
        lost = launcher.lost_process()
        if launcher.is_fork() and lost is None and not timed_out(error):
            sys.exit(1)  # process 0 saw the same failure and says what happened
        raise ProcessLostError(lost_process_line(error, trainer, name == "fit", lost)) from error
    trainer.fabric.print(headline(metrics))
    if name == "fit":
        trainer.fabric.print(f"logs, config and checkpoints: {trainer.log_dir}")
    else:
        trainer.fabric.print(f"evaluated: {trainer.log_dir or 'the initial model (no --ckpt_path)'}")
    return metrics


def headline(metrics: dict[str, float]) -> str:
    """The last round's metrics that matter at a glance, in one short line: the run's own (``train_loss``,
    ``val_*``), the means of per-client evaluation and a private run's epsilon; the strategy's diagnostics and the
    rest are in the logs."""
    shown = {
        k: v
        for k, v in metrics.items()
        if "/" not in k or (k.startswith("clients/") and k.endswith("_mean")) or "epsilon" in k.rsplit("/", 1)[-1]
    }
    return "last round: " + " ".join(f"{k}={v:.4g}" for k, v in sorted(shown.items())) + " (all metrics: the logs)"


def _raise_logger_error(loggers: object) -> None:
    """Raises, as one line that names it, the error of a logger of the config that cannot be built alone
    (jsonargparse folds it into a many-line error about the types trainer.logger takes)."""
    for spec in loggers if isinstance(loggers, list) else [loggers]:
        if not isinstance(spec, Namespace):
            continue
        builder = ArgumentParser(exit_on_error=False)
        builder.add_argument("--logger", type=Logger)
        try:
            builder.instantiate(builder.parse_object({"logger": spec}))
        except Exception as error:  # LoggerError names the constructor's own error, under jsonargparse's
            raise LoggerError(spec.class_path, "could not be built", error) from error
