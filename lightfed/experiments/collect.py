"""The outputs of a comparison from its runs' logs: ``table.md``/``.tex``/``.csv``, ``accuracy.png``/``.pdf``/``.svg``
and ``results.json``."""

import json
from dataclasses import asdict
from pathlib import Path

from lightfed.experiments.execution import divergence_marker
from lightfed.experiments.markdown import render_pivot, render_table, render_usable
from lightfed.experiments.paper_tables import render_csv, render_latex
from lightfed.experiments.plan import Run, setting_label
from lightfed.experiments.plot import plot_curves
from lightfed.experiments.run_logs import best_round_test_value, final_clients, read_log
from lightfed.experiments.summaries import summarise_group, summarise_history, usable_rates
from lightfed.experiments.sweep_specs import SpecError


def curve_label(stem: str, label: str, groups: list[tuple[str, str]]) -> str:
    """The setting when there is one config, the config when each has one setting, else both."""
    if len({g[0] for g in groups}) == 1:
        return label
    return stem if len(groups) == len({g[0] for g in groups}) else f"{stem} · {label}"


def run_record(
    run: Run, rounds: dict[tuple[str, str], int], runs_dir: Path, metric: str, target: float | None, mode: str
) -> dict:
    """What results.json holds of one planned run: its plan, its status (finished, diverged, unfinished or missing)
    and, from its logs, its history and numbers."""
    record = {**asdict(run), "setting_label": setting_label(run.setting), "status": "missing"}
    log = read_log(runs_dir, run.name, metric)
    if log is not None:
        if not log["history"] and log["metrics"]:
            raise SpecError(
                f"--metric {metric} is not in the logs of {run.name} (they hold {', '.join(log['metrics'])})"
            )
        complete = bool(log["history"]) and log["history"][-1][0] >= rounds[run.group]
        diverged = not complete and divergence_marker(runs_dir, run.name).is_file()
        record.update(log, status="finished" if complete else "diverged" if diverged else "unfinished")
        if complete:
            record.update(
                summarise_history(log["history"], target, mode),
                test_at_best=best_round_test_value(log, metric),
                clients=final_clients(log, metric),
            )
    for key in ("metrics", "last_round"):
        record.pop(key, None)
    return record


def collect(
    runs: list[Run],
    rounds: dict[tuple[str, str], int],
    out: Path,
    metric: str,
    target: float | None,
    mode: str,
    usable: float | None = None,
    pivot: str | None = None,
    fixed: str = "",
) -> list[Run]:
    """Reads every planned run's logs and writes table.md (with ``pivot``, also the final metric with one column per
    value of that swept key), the main table as table.tex and table.csv, accuracy.png/.pdf/.svg and results.json;
    ``fixed`` (the overrides of every run) goes under table.md and into the plot's title. Returns the runs still to
    run (neither finished nor diverged)."""
    results = [run_record(run, rounds, out / "runs", metric, target, mode) for run in runs]
    unfinished = [
        run for run, record in zip(runs, results, strict=True) if record["status"] in ("unfinished", "missing")
    ]
    groups = list(dict.fromkeys(run.group for run in runs))
    rows, curves = [], {}
    for stem, label in groups:
        members = [r for r in results if (r["stem"], r["setting_label"]) == (stem, label)]
        finished = [r for r in members if r["status"] == "finished"]
        rows.append({"config": stem, "setting": label, **summarise_group(finished, len(members))})
        if finished:
            curves[curve_label(stem, label, groups)] = [r["history"] for r in finished]
    table = render_table(rows, metric, target, mode, fixed)
    if pivot is not None:
        table += "\n" + render_pivot(rows, {run.group: run.setting for run in runs}, pivot, metric)
    summary: dict[str, object] = {"metric": metric, "mode": mode, "target": target, "fixed": fixed, "rows": rows}
    summary["runs"] = results
    if usable is not None:
        best, rates = usable_rates(results, usable)
        table += "\n" + render_usable(best, rates, metric, usable)
        summary["usable"] = {"fraction": usable, "best": best, "configs": rates}
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(table)
    (out / "table.tex").write_text(render_latex(rows, metric, target, mode))
    (out / "table.csv").write_text(render_csv(rows, metric, target))
    plot_curves(curves, metric, target, out / "accuracy", fixed)
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    print(table, end="", flush=True)
    print(
        f"tables: {out / 'table'}.md/.tex/.csv, plot: {out / 'accuracy'}.png/.pdf/.svg, results: {out / 'results.json'}",
        flush=True,
    )
    return unfinished
