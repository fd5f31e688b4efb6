"""``lightfed compare --collect`` on metrics files as they are found: a malformed line is skipped with one warning
naming the file and the line, the rest counts; and the table's test metric comes from each run's final record."""

import json
from pathlib import Path

import pytest

from lightfed.experiments import compare

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")
GOOD = [{"round": 1, "val_acc": 0.5, "round/time_s": 1.0}, {"round": 2, "val_acc": 0.7, "round/time_s": 2.0}]
BAD_LINES = {  # each after the good line of round 2, so that it would be round 2's last word
    "not an object": (b"[2, 0.9]", "not a JSON object"),
    "no round": (b'{"val_acc": 0.9}', "no round"),
    "a string round": (b'{"round": "2", "val_acc": 0.9}', "round '2' is not a whole number"),
    "non-UTF-8 bytes": (b'{"round": 2, "val_acc": 0.9, "note": "\xff\xfe"}', "not UTF-8"),
    "a NaN metric": (b'{"round": 2, "val_acc": NaN}', "val_acc nan is not a finite number"),
    "a string metric": (b'{"round": 2, "val_acc": "high"}', "val_acc 'high' is not a finite number"),
    "a string time": (
        b'{"round": 2, "val_acc": 0.9, "round/time_s": "2s"}',
        "round/time_s '2s' is not a finite number",
    ),
    "cut short": (b'{"round": 2, "val_a', "not JSON"),
}


def _run_folder(out: Path, seed: int) -> Path:
    return out / "runs" / f"quickstart__seed{seed}" / "version_0"


def _write(folder: Path, *lines: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "metrics.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _collect(out: Path, *extra: str) -> int:
    return compare.main(
        ["--configs", QUICKSTART, "--seeds", "0", "1", "--rounds", "2", "--out", str(out), "--collect", *extra]
    )


@pytest.mark.parametrize("bad, reason", BAD_LINES.values(), ids=BAD_LINES.keys())
def test_a_malformed_line_is_skipped_with_one_warning_and_the_table_is_that_of_the_good_lines(
    tmp_path, capsys, bad, reason
):
    out = tmp_path / "out"
    for seed in (0, 1):
        path = _write(_run_folder(out, seed), *GOOD)
    assert _collect(out) == 0
    clean = (out / "table.md").read_text()
    path.write_bytes(path.read_bytes() + bad + b"\n")  # seed 1's third line
    capsys.readouterr()
    assert _collect(out) == 0
    assert [line for line in capsys.readouterr().err.splitlines() if "warning" in line] == [
        f"compare: warning: skipped line 3 of {path}: {reason}"
    ]
    assert (out / "table.md").read_text() == clean
    assert "| quickstart | 2/2 | 0.7000 ± 0.0000 | 0.7000 ± 0.0000 |" in clean


def _final(round: int, best_test: float, monitor: str = "val_acc") -> dict:
    return {
        "final": True,
        "round": round,
        "monitor": monitor,
        "best_round": 1,
        "best_val_acc": 0.75,
        "test_acc": 0.4,
        "test_loss": 1.0,
        "best_test_acc": best_test,
        "best_test_loss": 0.9,
    }


def test_the_table_reports_the_test_metric_of_the_best_validation_round(tmp_path, capsys):
    out = tmp_path / "out"
    _write(_run_folder(out, 0), {"round": 1, "val_acc": 0.75}, {"round": 2, "val_acc": 0.5}, _final(2, 0.8))
    _write(
        _run_folder(out, 1), {"round": 1, "val_acc": 0.75}, _final(1, 0.3), {"round": 2, "val_acc": 0.5}, _final(2, 0.9)
    )  # a run resumed to more rounds: the newest record counts
    assert _collect(out) == 0
    lines = (out / "table.md").read_text().splitlines()
    assert lines[0] == (
        "| config | runs | final val_acc | best val_acc | test_acc at best val_acc | time/run (s) | sent/run (MB) |"
    )
    assert lines[2] == "| quickstart | 2/2 | 0.5000 ± 0.0000 | 0.7500 ± 0.0000 | 0.850 ± 0.071 | 0.0 | — |"
    assert [run["test_at_best"] for run in json.loads((out / "results.json").read_text())["runs"]] == [0.8, 0.9]
    # a record older than the run's last round (a resumed run killed before its end) or chosen on another metric
    _write(_run_folder(out, 0), {"round": 1, "val_acc": 0.75}, _final(1, 0.8), {"round": 2, "val_acc": 0.5})
    _write(_run_folder(out, 1), {"round": 1, "val_acc": 0.75}, {"round": 2, "val_acc": 0.5}, _final(2, 0.9, "val_loss"))
    assert _collect(out) == 0
    assert (out / "table.md").read_text().splitlines()[2].split(" | ")[4] == "—"
