"""The results gallery: every figure of docs/results/gallery.md and the numbers of its tables, from short runs on the
embedded digits data.

    python scripts/gallery.py --out runs/gallery                     # runs what is missing, then figures and tables
    python scripts/gallery.py --out runs/gallery --only compression  # one part of the gallery

Each part is one ``lightfed compare`` or one study of ``scripts/studies/`` (run as a subprocess, its figures read from
its ``--json``), with its runs under ``OUT/<part>``. A rerun reuses every finished run. The script writes
``docs/images/gallery/<part>.png``, every number to ``docs/images/gallery/gallery.json``, and each part's table into
the page between the markers ``<!-- gallery:<part> -->`` and ``<!-- /gallery:<part> -->``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import harness  # scripts/, where this script lies, is first on sys.path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images" / "gallery"
PAGE = ROOT / "docs" / "results" / "gallery.md"
ROUNDS = 10  # of every digits run but the privacy study's (its own 30)
WORKERS = 2
ALPHAS = (0.1, 0.5, 10)
STRATEGIES = ("fedavg", "fedprox", "scaffold", "fedecado")
AGGREGATORS = ("fedavg", "median", "trimmed_mean")
FRACTIONS = (0, 0.15, 0.3)
PRIVACY_MECHANISMS = ("user-level-fixed", "user-level-adaptive")
PRIVACY_RUNS = 1 + 3 * len(PRIVACY_MECHANISMS)  # FedAvg, then each mechanism at the study's three epsilons
PROGRESS = re.compile(r"^(\[\d+/\d+\]|compare: \d+ runs|[^|\s].*: test_acc=)")

Rows = list[dict]
MARKERS, STYLES = "osD^v<>p", ("-", "--", "-.", ":") * 2  # lines that lie on each other stay apart


@dataclass(frozen=True)
class Part:
    """One part of the gallery: how its runs are made and read (``rows``), its table, the first line of its caption
    (the second is the command), and its figure (``plot``: None for a table alone)."""

    rows: Callable[[Path], Rows]
    table: Callable[[Rows], str]
    caption: str
    plot: Callable[[Rows, Path], None] | None = None


# ----------------------------------------------------------------------------------------------------------- runs


def stream(command: list[str], capture: Path | None = None) -> None:
    """Runs ``command``, printing the one line each of its runs ends with (the rest of its output in ``capture``)."""
    lines = []
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    with subprocess.Popen(command, cwd=ROOT, env=environment, **pipes) as process:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if PROGRESS.match(line):
                print("  " + line.rstrip(), flush=True)
    if capture is not None:
        capture.parent.mkdir(parents=True, exist_ok=True)
        capture.write_text("".join(lines))
    if process.returncode != 0:
        raise harness.RunFailed(f"exit {process.returncode}: {' '.join(command)} (its output: {capture})")


def lightfed_compare(out: Path, args: list[str]) -> dict:
    """``lightfed compare ARGS --out OUT``'s results.json. Runs only the runs without finished logs there: all of them
    in one sweep when none has finished, else each missing one as its own task."""
    compare = [sys.executable, "-m", "lightfed", "compare", *args, "--out", str(out)]
    results = out / "results.json"
    if not results.is_file():
        stream([*compare, "--workers", str(WORKERS)], out / "compare.log")
        return json.loads(results.read_text())
    stream([*compare, "--collect"], out / "collect.log")
    runs = json.loads(results.read_text())["runs"]
    missing = [index for index, run in enumerate(runs) if run["status"] != "finished"]
    print(f"  {len(runs) - len(missing)} of {len(runs)} runs finished before, reused", flush=True)
    if missing:
        with ThreadPoolExecutor(WORKERS) as pool:
            tasks = [[*compare, "--task-index", str(index)] for index in missing]
            list(pool.map(lambda task: stream(task, out / f"task{task[-1]}.log"), tasks))
        stream([*compare, "--collect"], out / "collect.log")
    return json.loads(results.read_text())


def compare_rows(results: dict) -> Rows:
    """One row a finished run: its config's stem, the value of its swept key (None when nothing is swept), its
    final model's test accuracy and its last round's validation metric."""
    rows = []
    for run in results["runs"]:
        if run["status"] != "finished":
            continue
        final = run["final_record"]
        rows.append(
            {
                "config": run["stem"],
                "value": next(iter(run["setting"].values()), None),
                "test_acc": final["test_acc"],
                "val_acc": run["final"],
            }
        )
    return rows


def study(script: str, out: Path, args: list[str]) -> Rows:
    """The figures (``--json``) of ``python scripts/studies/<script> --out OUT ARGS``."""
    figures = out / "study.json"
    stream(
        [sys.executable, f"scripts/studies/{script}", "--out", str(out), *args, "--json", str(figures)],
        out / "study.log",
    )
    return json.loads(figures.read_text())


def strategies_rows(out: Path) -> Rows:
    configs = [f"configs/digits/{name}.yaml" for name in STRATEGIES]
    alphas = ",".join(map(str, ALPHAS))
    args = ["--base", "configs/digits/base.yaml", "--configs", *configs]
    args += ["--grid", f"data.partitioner.init_args.alpha={alphas}", "--rounds", str(ROUNDS)]
    return compare_rows(lightfed_compare(out, args))


def robustness_rows(out: Path) -> Rows:
    configs = [f"configs/robust/{name}.yaml" for name in AGGREGATORS]
    fractions = ",".join(map(str, FRACTIONS))
    args = ["--base", "configs/robust/base.yaml", "--configs", *configs, "--rounds", str(ROUNDS)]
    args += ["--set", "trainer.attack=lightfed.attacks.SignFlipping"]
    args += ["--grid", f"trainer.attack.init_args.fraction={fractions}"]
    return compare_rows(lightfed_compare(out, args))


def expected_rows(out: Path) -> Rows:
    overlays = sorted(path for path in (ROOT / "configs" / "digits").glob("*.yaml") if path.name != "base.yaml")
    args = ["--base", "configs/digits/base.yaml", "--configs", *(str(p.relative_to(ROOT)) for p in overlays)]
    return compare_rows(lightfed_compare(out, [*args, "--rounds", str(ROUNDS)]))


def privacy_rows(out: Path) -> Rows:
    """The privacy study's rows, user-level DP only (DP-SGD's per-example gradients take too long for a gallery); its
    runs are made again unless every one has finished (the study has no resume of its own)."""
    mechanisms = ["--mechanisms", *PRIVACY_MECHANISMS]
    if (out / "runs").is_dir():
        try:
            rows = study("privacy_study.py", out, [*mechanisms, "--table"])
        except harness.RunFailed:
            rows = []
        if len(rows) == PRIVACY_RUNS and all(row["test_acc"] is not None for row in rows):
            print(f"  {len(rows)} of {len(rows)} runs finished before, reused", flush=True)
            return rows
    return study("privacy_study.py", out, [*mechanisms, "--workers", str(WORKERS)])


def compression_rows(out: Path) -> Rows:
    return study("compression_study.py", out, ["--rounds", str(ROUNDS), "--workers", str(WORKERS)])


def fairness_rows(out: Path) -> Rows:
    return study("fairness_study.py", out, ["--rounds", str(ROUNDS), "--seeds", "0", "--workers", str(WORKERS)])


# ----------------------------------------------------------------------------------------------------------- tables


def accuracy(value: float | None) -> str:
    return harness.cell(value, ".3f")


def pivot(rows: Rows, columns: Iterable, label: str) -> str:
    """Test accuracy, one row a config, one column a value of the swept key."""
    columns = list(columns)
    configs = list(dict.fromkeys(row["config"] for row in rows))
    cells = {(row["config"], float(row["value"])): row["test_acc"] for row in rows}
    body = [[config, *(accuracy(cells.get((config, float(value)))) for value in columns)] for config in configs]
    return harness.markdown_table([label, *map(str, columns)], body, "l" + "r" * len(columns))


def strategies_table(rows: Rows) -> str:
    return pivot(rows, ALPHAS, "strategy \\ Dirichlet alpha")


def robustness_table(rows: Rows) -> str:
    return pivot(rows, FRACTIONS, "aggregator \\ attackers")


def expected_table(rows: Rows) -> str:
    body = [
        [f"`configs/digits/{row['config']}.yaml`", accuracy(row["val_acc"]), accuracy(row["test_acc"])] for row in rows
    ]
    return harness.markdown_table(["overlay", "val_acc, last round", "test_acc, final model"], body, "lrr")


def setting(text: str) -> str:
    """``a.b.name=1.2345`` as ``name 1.23``; any other setting as it is."""
    key, _, value = text.partition("=")
    try:
        return f"{key.rsplit('.', 1)[-1]} {float(value):.3g}"
    except ValueError:
        return text


def privacy_table(rows: Rows) -> str:
    body = [
        [
            row["method"],
            setting(row["setting"]),
            harness.cell(row["epsilon (last round)"], ".3g", "∞"),
            accuracy(row["test_acc"]),
        ]
        for row in rows
    ]
    return harness.markdown_table(["method", "setting", "epsilon, last round", "test_acc"], body, "llrr")


def compression_table(rows: Rows) -> str:
    plain = next(row["sent_mb"] for row in rows if row["compressor"] == "none")
    body = [
        [row["compressor"], accuracy(row["test_acc"]), f"{row['sent_mb']:.2f}", f"{row['sent_mb'] / plain:.3f}"]
        for row in rows
    ]
    return harness.markdown_table(["compressor", "test_acc", "MB sent", "x none"], body, "lrrr")


def fairness_table(rows: Rows) -> str:
    body = [
        [row["method"], accuracy(row["test_acc"]), *(accuracy(row[stat]) for stat in ("mean", "worst10", "best10"))]
        for row in rows
    ]
    header = ["method", "test_acc", "clients: mean", "worst 10 %", "best 10 %"]
    return harness.markdown_table(header, body, "lrrrr")


# ----------------------------------------------------------------------------------------------------------- figures


def axes(xlabel: str, ylabel: str = "test accuracy"):
    """A small figure's axes, labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(5.6, 3.6), dpi=100)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return figure, ax


def save(figure, path: Path) -> None:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, bbox_inches="tight")
    plt.close(figure)


def lines(rows: Rows, path: Path, xlabel: str, log_x: bool = False) -> None:
    """Test accuracy against the swept value, one line a config."""
    figure, ax = axes(xlabel)
    for config, marker, style in zip(dict.fromkeys(row["config"] for row in rows), MARKERS, STYLES, strict=False):
        points = sorted((float(row["value"]), row["test_acc"]) for row in rows if row["config"] == config)
        ax.plot(*zip(*points, strict=True), marker=marker, linestyle=style, label=config)
    if log_x:
        ax.set_xscale("log")
    ax.legend(fontsize="small")
    save(figure, path)


def strategies_plot(rows: Rows, path: Path) -> None:
    lines(rows, path, "Dirichlet alpha (label skew: smaller is more skewed)", log_x=True)


def robustness_plot(rows: Rows, path: Path) -> None:
    lines(rows, path, "fraction of clients flipping their update's sign")


def privacy_plot(rows: Rows, path: Path) -> None:
    figure, ax = axes("epsilon at delta 1e-5, logged in the last round")
    for method in dict.fromkeys(row["method"] for row in rows):
        ours = [row for row in rows if row["method"] == method and row["test_acc"] is not None]
        epsilons = [row["epsilon (last round)"] for row in ours]
        if all(epsilon is None or math.isinf(epsilon) for epsilon in epsilons):
            for row in ours:
                ax.axhline(row["test_acc"], linestyle="--", color="grey", label=f"{method}, no privacy")
            continue
        points = sorted((row["epsilon (last round)"], row["test_acc"]) for row in ours)
        ax.plot(*zip(*points, strict=True), marker="o", label=method)
    ax.legend(fontsize="small")
    save(figure, path)


def compression_plot(rows: Rows, path: Path) -> None:
    figure, ax = axes("MB the clients sent over the run (log scale)")
    for row in rows:
        ax.scatter(row["sent_mb"], row["test_acc"])
        ax.annotate(row["compressor"], (row["sent_mb"], row["test_acc"]), fontsize="small", xytext=(4, 4),
                    textcoords="offset points")  # fmt: skip
    ax.set_xscale("log")
    ax.margins(x=0.15, y=0.1)  # room for the labels of the outermost points
    save(figure, path)


def fairness_plot(rows: Rows, path: Path) -> None:
    figure, ax = axes("accuracy on a client's own held-out data", "")
    ax.boxplot(
        [row["per_client"] for row in rows], orientation="horizontal", tick_labels=[row["method"] for row in rows]
    )
    ax.scatter([row["mean"] for row in rows], range(1, len(rows) + 1), marker="D", color="black", label="mean")
    ax.scatter([row["worst10"] for row in rows], range(1, len(rows) + 1), marker="v", color="red", label="worst 10 %")
    ax.tick_params(axis="y", labelsize="small")
    ax.legend(fontsize="small", loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)
    save(figure, path)


# ----------------------------------------------------------------------------------------------------------- page

COMMAND = "python scripts/gallery.py --out runs/gallery"
PARTS = {
    "strategies": Part(
        strategies_rows,
        strategies_table,
        f"FedAvg, FedProx, SCAFFOLD and FedECADO as the label skew changes: {ROUNDS} rounds, one seed.",
        strategies_plot,
    ),
    "privacy": Part(
        privacy_rows,
        privacy_table,
        "User-level DP-FedAvg, fixed and adaptive clipping, at the privacy study's three noise levels: 30 rounds.",
        privacy_plot,
    ),
    "robustness": Part(
        robustness_rows,
        robustness_table,
        f"Three aggregators as more clients flip the sign of their update: {ROUNDS} rounds, one seed.",
        robustness_plot,
    ),
    "compression": Part(
        compression_rows,
        compression_table,
        f"FedAvg with each compressor of the compression study: {ROUNDS} rounds, one seed.",
        compression_plot,
    ),
    "fairness": Part(
        fairness_rows,
        fairness_table,
        f"Each client's accuracy on its own held-out data, Dirichlet(0.1) split: {ROUNDS} rounds, one seed.",
        fairness_plot,
    ),
    "expected": Part(
        expected_rows,
        expected_table,
        f"Every overlay of configs/digits/ over configs/digits/base.yaml: {ROUNDS} rounds, one seed.",
    ),
}


def command(name: str) -> str:
    """The command that makes the part again."""
    return f"{COMMAND} --only {name}"


def figures() -> list[str]:
    """The file names of the figures the gallery makes."""
    return [f"{name}.png" for name, part in PARTS.items() if part.plot is not None]


def block(name: str, rows: Rows) -> str:
    """The part's figure (if it has one), its caption of two lines, then its table."""
    part = PARTS[name]
    figure = [f"![{part.caption}](../images/gallery/{name}.png)", ""] if part.plot is not None else []
    return "\n".join([*figure, f"{part.caption}<br>", f"Made by `{command(name)}`.", "", part.table(rows)])


def fill(page: str, name: str, text: str) -> str:
    """The page with ``text`` between the part's markers (which must be there)."""
    begin, end = f"<!-- gallery:{name} -->", f"<!-- /gallery:{name} -->"
    if page.count(begin) != 1 or page.count(end) != 1:
        raise ValueError(f"the page needs one {begin} and one {end}")
    head, rest = page.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{text}\n{end}{tail}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs/gallery"), help="where the runs go")
    parser.add_argument("--only", nargs="+", choices=list(PARTS), default=list(PARTS), help="make these parts only")
    args = parser.parse_args()
    numbers = IMAGES / "gallery.json"
    gallery = json.loads(numbers.read_text()) if numbers.is_file() else {}
    for name in args.only:
        part, began = PARTS[name], time.perf_counter()
        print(f"{name}: runs in {args.out / name}", flush=True)
        rows = part.rows((args.out / name).resolve())
        if part.plot is not None:
            part.plot(rows, IMAGES / f"{name}.png")
        PAGE.write_text(fill(PAGE.read_text(), name, block(name, rows)))
        gallery[name] = {"command": command(name), "rows": rows}
        harness.write_json(numbers, gallery)
        print(f"{name}: done in {time.perf_counter() - began:.0f} s", flush=True)
    print(f"figures in {IMAGES.relative_to(ROOT)}, tables in {PAGE.relative_to(ROOT)}", flush=True)


if __name__ == "__main__":
    main()
