"""A tracker's own error (a store refused, a client library missing) ends the command in one line naming the logger."""

from pathlib import Path

import pytest

from lightfed.cli import main

ROOT = Path(__file__).resolve().parents[2]


def fit_with_logger(tmp_path: Path, logger: str) -> int:
    with pytest.raises(SystemExit) as exit:
        main(["fit", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--trainer.rounds", "2",
              "--trainer.client_eval_interval", "0", "--trainer.root_dir", str(tmp_path), "--trainer.progress_bar",
              "false", "--trainer.logger", logger])
    return exit.value.code


@pytest.mark.parametrize(
    "logger, error",
    [
        ("RefusingLogger", "failed: RuntimeError: the file store file:./mlruns is not supported: use a database-backed store"),
        ("UnbuildableLogger", "could not be built: ModuleNotFoundError: no tracking client for file:./mlruns: install it"),
    ],
)
def test_a_logger_that_fails_is_named_in_one_line(tmp_path, capsys, logger, error):
    code = fit_with_logger(tmp_path, f"tests.process_faults.{logger}")
    assert code == 2
    assert capsys.readouterr().err == (
        f"lightfed: error: the logger tests.process_faults.{logger} {error}; change or remove trainer.logger\n"
    )
