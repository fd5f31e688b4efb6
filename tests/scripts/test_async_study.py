"""scripts/studies/async_study.py: its table from numbers worked out by hand, then one tiny end-to-end study on digits."""

import json

import pytest

from tests.scripts.script_modules import load

study = load("studies/async_study.py")

TINY = [
    "--no-tune",
    "--rounds",
    "2",
    "--concurrency",
    "2",
    "4",
    "--tune-concurrency",
    "4",
    "--set",
    "trainer.clients_per_round=2",
    "--set",
    "data.partitioner.init_args.num_clients=8",
    "--set",
    "trainer.local_steps=2",
    "--set",
    "trainer.eval_interval=1",
]


def test_grid_and_table():
    assert study.grid("adamasfl", tune=True) == [()] and study.grid("fedbuff", tune=False) == [()]
    assert len(study.grid("fadas", tune=True)) == 9
    sweep = [
        {"method": m, "concurrency": c, "score": s, "staleness": c - 2.0}
        for m in study.METHODS
        for c, s in [(2, 0.5), (4, 0.7), (4, 0.9)]
    ]
    chosen = {m: () for m in study.METHODS} | {"fadas": ((study.LR, "0.1"), (study.SERVER_LR, "0.01"))}
    lines = study.render_table(sweep, chosen, [2, 4]).splitlines()
    assert lines[2] == "| adamasfl | theory (S, K, T) | 0.500 | 0.800 ± 0.141 | 0.300 |"
    assert lines[6] == "| fadas | lr=0.1 server_lr=0.01 | 0.500 | 0.800 ± 0.141 | 0.300 |"
    assert lines[7] == "| mean staleness | | 0.00 | 2.00 | |"


def test_tiny_study_prints_accuracy_per_method_and_concurrency(tmp_path, capsys):
    assert study.main(["--out", str(tmp_path), *TINY]) == 0
    printed = capsys.readouterr().out
    assert "[tune 5/5]" in printed and "[concurrency 5/5]" in printed  # the M_c = 4 runs are the tuning runs
    rows = [line for line in printed.splitlines() if line.startswith("| ")]
    assert rows[0] == "| method | step sizes | M_c=2 | M_c=4 | spread (max-min) |"
    assert [row.split(" | ")[0][2:] for row in rows[1:]] == [*study.METHODS, "mean staleness"]
    results = json.loads((tmp_path / "results.json").read_text())
    staleness = sum(r["staleness"] for r in results["sweep"] if r["concurrency"] == 4) / 5
    assert rows[-1] == f"| mean staleness | | 0.00 | {staleness:.2f} | |"
    assert len(results["tuning"]) == 5 and len(results["sweep"]) == 10
    for run in results["sweep"]:
        assert [step for step, _ in run["history"]] == [1, 2]
        assert run["score"] == pytest.approx(run["history"][-1][1])  # the last quarter of 2 evaluations: the last
    assert (tmp_path / "table.md").read_text() in printed
    assert (tmp_path / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tuning_concurrency_must_be_swept(capsys):
    with pytest.raises(SystemExit):
        study.main(["--concurrency", "5", "20", "--tune-concurrency", "10"])
    assert "--tune-concurrency 10 must be one of --concurrency" in capsys.readouterr().err
