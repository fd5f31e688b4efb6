"""The ``lightfed`` command: ``fit``, ``validate`` and ``test`` with LightningCLI's conventions on jsonargparse, and
``compare``; a user's error ends as one line ``lightfed: error: ...`` with exit status 2."""

import errno
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
from lightfed.parse_errors import parse_error_line
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
