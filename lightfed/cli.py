"""The ``lightfed`` command: ``fit``, ``validate`` and ``test`` with LightningCLI conventions on jsonargparse."""

import atexit
import os
import re
import signal
import sys
import threading
import traceback
from argparse import ArgumentError

from jsonargparse import ActionConfigFile, ArgumentParser, Namespace
from lightning import LightningModule, seed_everything
from lightning.fabric.loggers import Logger

from lightfed.asynchronous.trainer import AsyncFederatedTrainer
from lightfed.asynchronous.schedule import Asynchrony
from lightfed.callbacks.logging import LoggerError
from lightfed.callbacks.preemption import hold_requests
from lightfed.core.lost_process import ProcessLostError, collective_failed, lost_process_line, timed_out
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError, LightfedError
from lightfed.models import SmallCNN
from lightfed.strategies import FedAvg, Strategy
from lightfed.trainer import FederatedTrainer

SUBCOMMANDS = {
    "fit": "Train the global model for trainer.rounds rounds.",
    "validate": "Evaluate the global model (of --ckpt_path) with validation_step on the validation split.",
    "test": "Evaluate the global model (of --ckpt_path) with test_step on the central test set.",
}


def _subcommand_parser(name: str) -> ArgumentParser:
    parser = ArgumentParser(description=SUBCOMMANDS[name], exit_on_error=False)  # main() prints the error in one line
    parser.add_argument("-c", "--config", action=ActionConfigFile, help="YAML config file(s), later ones override.")
    parser.add_argument("--seed_everything", type=int, default=0, help="Seed of model init, sampling and clients.")
    parser.add_class_arguments(FederatedTrainer, "trainer", skip={"seed"}, instantiate=False)
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
        "--ckpt_path",
        type=str | None,
        default=None,
        help='Checkpoint to start from; "last": the newest of this experiment; "auto": "last" if there is one.',
    )
    return parser


def build_parser() -> tuple[ArgumentParser, dict[str, ArgumentParser]]:
    parser = ArgumentParser(prog="lightfed", description="Federated learning on Lightning Fabric.", exit_on_error=False)
    subcommands = parser.add_subcommands()
    parsers = {name: _subcommand_parser(name) for name in SUBCOMMANDS}
    for name, sub in parsers.items():
        subcommands.add_subcommand(name, sub, help=SUBCOMMANDS[name])
    return parser, parsers


class _Forks:
    """The processes this one forked (processes 1, 2, ... of the run), each waited for by a thread; when one fails,
    the others and this one are ended unless they end by themselves within ``grace_s`` (a process busy training would
    learn of it only at its next collective)."""

    def __init__(self, pids: list[int], grace_s: float = 5.0):
        self.ranks = {pid: rank for rank, pid in enumerate(pids, start=1)}
        self.running, self.grace_s = set(pids), grace_s
        self.failure: int | None = None  # the exit code of the first process that failed
        self.failed_rank: int | None = None
        self.failed = threading.Event()
        self.ending = threading.Event()  # set when this process's run returned or raised
        self._lock = threading.RLock()  # also taken by the Ctrl-C handler, which runs between this thread's steps
        self._waiters = [threading.Thread(target=self._wait, args=(pid,), daemon=True) for pid in pids]
        for waiter in self._waiters:
            waiter.start()

    def _wait(self, pid: int) -> None:
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        with self._lock:
            self.running.discard(pid)
            if code == 0 or self.failure is not None:
                return
            self.failure, self.failed_rank = code, self.ranks[pid]
        self.failed.set()
        ended = self.ending.wait(self.grace_s)
        self.kill_running()
        if not ended:  # busy outside a collective: said here, as the collective would have
            os.write(2, f"lightfed: error: process {self.ranks[pid]} of {len(self.ranks) + 1} {_ended(code)}; the run "
                        "stops: resume it from its last checkpoint with --ckpt_path last\n".encode())
            os.kill(os.getpid(), signal.SIGKILL)

    def lost(self) -> tuple[int, str] | None:
        """The process that was stopped or ended with an error, and how (``(1, "died (killed by SIGKILL)")``)."""
        for pid, rank in self.ranks.items():
            try:
                stopped = os.waitid(os.P_PID, pid, os.WSTOPPED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:  # it ended, and its waiter has it
                continue
            if stopped is not None and stopped.si_code == os.CLD_STOPPED:
                return rank, f"was stopped ({signal.Signals(stopped.si_status).name})"
        self.failed.wait(2.0)  # a process's connections close a moment before its end can be waited for
        return None if self.failure is None else (self.failed_rank, _ended(self.failure))

    def kill_running(self) -> None:
        with self._lock:
            for pid in self.running:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def finish(self, failed: bool) -> None:
        """This process's run ended: waits for the others (``grace_s`` at most after a failure, then ends them)."""
        self.ending.set()
        for waiter in self._waiters:
            waiter.join(self.grace_s if failed else None)
        self.kill_running()
        for waiter in self._waiters:
            waiter.join(self.grace_s)  # each has what it ended: none is left a zombie


def _ended(code: int) -> str:
    """How a process ended, from its exit code (negative: the signal that killed it)."""
    return f"died (killed by {signal.Signals(-code).name})" if code < 0 else f"exited with status {code}"


_forks: _Forks | None = None  # in the process that forked the others
_forked = False  # this process is a fork: it leaves with os._exit, as multiprocessing's forks do
_parent = 0  # in a fork: the process it was forked from (process 0 of the run)


def _fork_processes(trainer: dict) -> None:
    """Starts processes 1.. of a single-node CPU run as forks of this one, which has imported and parsed everything
    already (Lightning would start each as a new interpreter that does both again). The forks find the launcher's
    environment variables, so ``Fabric.launch`` starts nothing more; elsewhere (a GPU, several nodes, a cluster's own
    launcher, threads running) this does nothing and Lightning starts the processes as usual."""
    from lightning.fabric.plugins.environments import (
        LightningEnvironment,
        LSFEnvironment,
        MPIEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )

    devices = trainer.get("devices")
    devices = int(devices) if isinstance(devices, int) or (isinstance(devices, str) and devices.isdigit()) else 0
    clusters = (TorchElasticEnvironment, SLURMEnvironment, LSFEnvironment, MPIEnvironment)  # Fabric's, in its order
    if (
        trainer.get("accelerator") != "cpu"
        or devices < 2
        or trainer.get("num_nodes", 1) != 1
        or "LOCAL_RANK" in os.environ
        or not hasattr(os, "fork")
        or threading.active_count() > 1
        or any(cluster.detect() for cluster in clusters)
    ):
        return
    environment = LightningEnvironment()  # the variables Lightning's subprocess launcher sets
    os.environ["MASTER_ADDR"] = environment.main_address
    os.environ["MASTER_PORT"] = str(environment.main_port)
    os.environ["NODE_RANK"] = "0"
    os.environ["WORLD_SIZE"] = str(devices)
    os.environ["LOCAL_RANK"] = "0"
    sys.stdout.flush()
    sys.stderr.flush()
    children, parent = [], os.getpid()
    for local_rank in range(1, devices):
        pid = os.fork()
        if pid == 0:
            global _forked, _parent
            _forked, _parent = True, parent
            os.environ["LOCAL_RANK"] = str(local_rank)
            return
        children.append(pid)
    global _forks
    _forks = _Forks(children)


def run(argv: list[str] | None = None, fork: bool = False) -> dict[str, float]:
    """Parses ``argv``, builds the components and runs the subcommand; returns its metrics. ``fork``: start the
    other processes of a multi-process CPU run by forking this one (the command line does; ``_fork_processes``)."""
    parser, parsers = build_parser()
    try:
        config = parser.parse_args(argv)
    except UnicodeDecodeError as error:  # jsonargparse reads a config file as UTF-8 text
        raise ConfigError(f"a --config file is not UTF-8 text ({error.reason} at byte {error.start}): pass a YAML file") from None
    name = config.subcommand
    sub_config = config[name]
    if fork:
        _fork_processes(vars(sub_config.trainer))
    seed_everything(sub_config.seed_everything, verbose=False)  # before the model is built
    try:
        objects = parser.instantiate(config)[name]
    except ValueError:
        _raise_logger_error(sub_config.trainer.logger)
        raise
    model = objects.model if objects.model is not None else SmallCNN()
    strategy = objects.strategy if objects.strategy is not None else FedAvg()
    settings = {**vars(objects.trainer), "seed": sub_config.seed_everything}  # its privacy, callbacks, logger built
    if objects.asynchronous is None:
        trainer = FederatedTrainer(**settings)
    else:
        trainer = AsyncFederatedTrainer(objects.asynchronous, **settings)
    run_config = parsers[name].dump(sub_config, skip_unset=False)  # keeps null settings (local_epochs: null)
    try:
        if name == "fit":
            metrics = trainer.fit(model, objects.data, strategy, sub_config.ckpt_path, run_config)
        else:
            metrics = getattr(trainer, name)(model, objects.data, sub_config.ckpt_path, run_config)
    except RuntimeError as error:
        if not collective_failed(error):
            raise
        lost = _forks.lost() if _forks is not None else (0, "died") if _forked and os.getppid() != _parent else None
        if _forked and lost is None and not timed_out(error):
            sys.exit(1)  # process 0 saw the same failure and says what happened
        raise ProcessLostError(lost_process_line(error, trainer, name == "fit", lost)) from error
    trainer.fabric.print(" ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items()) if not k.startswith("round/")))
    if name == "fit":
        trainer.fabric.print(f"logs, config and checkpoints: {trainer.log_dir}")
    else:
        trainer.fabric.print(f"evaluated: {trainer.log_dir or 'the initial model (no --ckpt_path)'}")
    return metrics


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


def _user_error(error: BaseException | None) -> LightfedError | None:
    """The LightfedError behind ``error``, also when jsonargparse wrapped it while building a component."""
    while error is not None and not isinstance(error, LightfedError):
        error = error.__cause__ or error.__context__
    return error


def _parse_error_line(error: ArgumentError) -> str:
    """jsonargparse's message in one line; for a class path that does not import, only the reason."""
    message = " ".join(str(error).split())
    unknown_class = re.search(r"^(Parser key \S+ )?.*Problem with given class_path ('[^']+'): (.*?)( - |$)", message)
    if unknown_class:
        key, path, reason = unknown_class.group(1) or "", unknown_class.group(2), unknown_class.group(3)
        return f"{key}cannot import {path}: {reason}"
    return message


def main(argv: list[str] | None = None) -> None:
    command_line, argv = argv is None, sys.argv[1:] if argv is None else argv
    if command_line:
        hold_requests()  # a cluster's warning that comes before the run listens is kept for the run
    if argv[:1] == ["compare"]:
        from lightfed.experiments.compare import main as compare

        sys.exit(compare(argv[1:]))
    if argv in (["-h"], ["--help"]):
        build_parser()[0].print_help()
        print(f"    {'compare':<20}Compare configs over seeds and sweeps: a table and a plot (lightfed compare --help).")
        return
    if command_line and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _stop_at_once)  # during a run's rounds: a second Ctrl-C (Preemption)
    try:
        _run_and_report(argv, command_line)
    except KeyboardInterrupt:  # Ctrl-C stopped the run after a round, which was checkpointed and said so
        if _forked:
            _leave(0)
        if not command_line:
            raise
        atexit._run_exitfuncs()
        _end_by_sigint()
    except BaseException as error:
        if not _forked:
            raise
        if not isinstance(error, SystemExit):
            traceback.print_exc()
        _leave(error.code if isinstance(error, SystemExit) else 1)
    if _forked:
        _leave(0)


def _stop_at_once(signum: int, frame: object) -> None:
    """Ctrl-C before or after a run's rounds, or a second one during them: every process of the command ends now."""
    if not _forked:
        os.write(2, b"lightfed: stopped at once (Ctrl-C); the checkpoints written so far are whole: resume with "
                    b"--ckpt_path last\n")
    if _forks is not None:
        _forks.kill_running()
        _forks.finish(failed=True)
    _end_by_sigint()


def _end_by_sigint() -> None:
    """Ends this process as Ctrl-C ends a program: by SIGINT, status 130 in a shell (which then stops a loop too)."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def _leave(code: int | str | None) -> None:
    """Ends a forked process: its exit handlers and output, not the interpreter's teardown (its parent's work)."""
    atexit._run_exitfuncs()
    if isinstance(code, str):
        print(code, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


def _run_and_report(argv: list[str], command_line: bool) -> None:
    """Runs ``argv``; a user's error (a bad config, an option) in one line on stderr and exit status 2."""
    try:
        try:
            run(argv, fork=command_line)  # forked processes only from a command, whose exit ends them
        except BaseException as error:
            if _forks is not None:  # after Ctrl-C every process stops after the same round, by itself
                _forks.finish(failed=not isinstance(error, KeyboardInterrupt))
            raise
        if _forks is not None:
            _forks.finish(failed=False)  # the command ends when every process has
            if _forks.failure is not None:
                sys.exit(_forks.failure if _forks.failure > 0 else 1)
    except Exception as error:
        user_error = _user_error(error)
        if user_error is not None:
            message = str(user_error)
        elif isinstance(error, ArgumentError):  # a config or command line jsonargparse could not parse
            where = f"lightfed {argv[0]} --help" if argv[:1] and argv[0] in SUBCOMMANDS else "lightfed --help"
            message = f"{_parse_error_line(error)} ({where} lists every option)"
        else:
            raise
        sys.stderr.write(f"lightfed: error: {message}\n")  # one write: the lines of several processes stay whole
        sys.exit(2)
