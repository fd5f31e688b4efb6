"""The ``lightfed`` command: ``fit``, ``validate`` and ``test`` with LightningCLI's conventions on jsonargparse, and
``compare``; a user's error ends as one line ``lightfed: error: ...`` with exit status 2."""

import errno
import importlib
import re
import signal
import sys
from argparse import ArgumentError
from pathlib import Path

from lightfed import launcher
from lightfed.adapters import run_exit_handlers
from lightfed.audit.command import main as audit
from lightfed.core.checkpoint_files import write_error
from lightfed.errors import LightfedError
from lightfed.experiments.compare import main as compare
from lightfed.run.preemption import hold_requests
from lightfed.subcommands import SUBCOMMANDS, build_parser, run


def main(argv: list[str] | None = None) -> None:
    """Runs the command ``argv`` (default: this process's command line)."""
    command_line, argv = argv is None, sys.argv[1:] if argv is None else argv
    if command_line:
        hold_requests()  # a cluster's warning that comes before the run listens is kept for the run
    if argv[:1] == ["compare"]:
        sys.exit(compare(argv[1:]))
    if argv in (["-h"], ["--help"]):
        _print_help()
        return
    if command_line and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, launcher.stop_at_once)  # during a run's rounds: a second Ctrl-C (Preemption)
    try:
        _run_and_report(argv, command_line)
    except KeyboardInterrupt as error:  # Ctrl-C stopped the run after a round, which was checkpointed and said so
        _end_by_ctrl_c(error, command_line)
    except BaseException as error:
        if not launcher.is_fork():
            raise
        launcher.leave(error)
    if launcher.is_fork():
        launcher.leave()


def _print_help() -> None:
    build_parser()[0].print_help()
    print(f"    {'compare':<20}Compare configs over seeds and sweeps: a table and a plot (lightfed compare --help).")


def _end_by_ctrl_c(error: KeyboardInterrupt, command_line: bool) -> None:
    """Ends a forked process, or the command, as Ctrl-C does (status 130 in a shell); raises ``error`` for a caller
    that is not the command line."""
    if launcher.is_fork():
        launcher.leave(error)
    if not command_line:
        raise error
    run_exit_handlers()
    launcher.end_by_sigint()


def _run_and_report(argv: list[str], command_line: bool) -> None:
    """Runs ``argv``; a user's error (a bad config, an option) in one line on stderr and exit status 2."""
    try:
        try:
            if argv[:1] == ["audit"]:
                audit(argv[1:])  # its runs in this process
            else:
                run(argv, fork=command_line)  # forked processes only from a command, whose exit ends them
        except BaseException as error:
            launcher.finish(failed=not isinstance(error, KeyboardInterrupt))  # after Ctrl-C all stop after one round
            raise
        failure = launcher.finish(failed=False)  # the command ends when every process has
        if failure is not None:
            launcher.print_fork_errors()
            sys.exit(failure)
    except Exception as error:
        user_error, refused_write = _user_error(error), _refused_write(error)
        if user_error is not None:
            message = str(user_error)
        elif refused_write is not None:
            message = refused_write
        elif isinstance(error, ArgumentError):  # a config or command line jsonargparse could not parse
            command = f"lightfed {argv[0]}" if argv[:1] and argv[0] in SUBCOMMANDS else "lightfed"
            message = parse_error_line(error, command)
            if ".help " not in message:  # a line that names its own help command needs no other
                message += f" ({command} --help lists every option)"
        else:
            launcher.print_fork_errors()
            raise
        sys.stderr.flush()
        launcher.say_error(f"lightfed: error: {message}\n")  # once for all the run's processes
        sys.exit(2)


def _user_error(error: BaseException | None) -> LightfedError | None:
    """The LightfedError behind ``error``, also when jsonargparse wrapped it while building a component."""
    while error is not None and not isinstance(error, LightfedError):
        error = error.__cause__ or error.__context__
    return error


def _refused_write(error: BaseException | None) -> str | None:
    """A write the file system refused (full, over quota, read-only) wherever it happened, in one line."""
    while error is not None and not isinstance(error, OSError):
        error = error.__cause__ or error.__context__
    if error is None or error.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS) or not error.filename:
        return None
    return str(write_error(Path(error.filename), error, "file"))


def _accepted_options(path: str) -> list[str]:
    """The options the class at ``path`` takes, as jsonargparse reads its signature; [] when it cannot say."""
    from jsonargparse import ArgumentParser

    module, _, name = path.rpartition(".")
    try:
        parser = ArgumentParser(exit_on_error=False)
        parser.add_class_arguments(getattr(importlib.import_module(module), name))
        return list(dict.fromkeys(key.split(".")[0] for key in parser.get_defaults().keys()))
    except Exception:  # noqa: BLE001 - only a hint: the line stays right without it
        return []


def parse_error_line(error: ArgumentError, command: str = "lightfed fit") -> str:
    """jsonargparse's message in one line; for a class path that does not import, only the reason; for an option
    a class does not take, the option, the options it takes and the command that describes them."""
    message = " ".join(str(error).split())
    if re.search(r"does not accept option 'data\.(class_path|init_args)", message):
        return (
            "data is lightfed's FederatedDataModule: name your LightningDataModule or dataset under data.dataset "
            "(data: {dataset: {class_path: my.DataModule}, partitioner: ...})"
        )
    neither = re.search(
        r"Parser key \"data\.dataset\".*subclass of DatasetSource.*subclass of LightningDataModule.*"
        r"Given value: (\S+)",
        message,
    )
    if neither:
        return f"data.dataset: {neither.group(1)} is neither a lightfed DatasetSource nor a LightningDataModule"
    unknown_class = re.search(r"^(Parser key \S+ )?.*Problem with given class_path ('[^']+'): (.*?)( - |$)", message)
    keys = re.findall(r'Parser key "([^"]+)"', message)
    argument = re.search(  # a value of the wrong type for one of the class's options, as a union or a plain type
        r"Parser key \"\w+\": - Expected .*?Expected a <class '(\w+)'>.*?Given value: (.*?)\. Got value", message
    ) or re.search(r"Parser key \"\w+\": Expected a <class '(\w+)'>\. Got value: (.*?)(?: - |$)", message)
    if unknown_class and argument:  # the class imports; one of its arguments does not parse
        expected = f"a {argument[1]}"
        if argument[2].lower().lstrip("+-") in ("nan", "inf", "infinity"):
            expected = "a finite number"
        return f"{'.'.join(keys)}: expected {expected}, got {argument[2]!r}"
    not_accepted = re.search(
        r"Option '([^']+)' is not accepted(?:\. Got value: Namespace\(class_path='([^']+)')?", message
    ) or re.search(r"unrecognized arguments: --(\w+)()", message)  # an option under one it does not take
    if unknown_class and not_accepted and keys:  # the class imports; it takes no option of that name
        option, inner = not_accepted[1], not_accepted[2]  # inner: a class given as a callable's class_path
        path = inner or unknown_class.group(2).strip("'")
        accepted = _accepted_options(path)[1 if inner else 0 :]  # a callable's class gets its first argument given
        takes = f"it takes {', '.join(accepted)}" if accepted else "it takes no options"
        line = f"{'.'.join(keys)}.{option}: {path} has no option {option!r}; {takes}"
        return line if inner else f"{line} ({command} --{keys[0]}.help {path} describes them)"
    if unknown_class:
        key, path, reason = unknown_class.group(1) or "", unknown_class.group(2), unknown_class.group(3)
        return f"{key}cannot import {path}: {reason}"
    return message
