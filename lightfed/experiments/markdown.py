"""The Markdown tables of a comparison: one row per (config, setting), and each config's usable runs."""

from lightfed.experiments.plan import setting_label, short_key
from lightfed.experiments.run_logs import metric_on_test_set
from lightfed.experiments.sweep_specs import Setting


def format_rounds(row: dict) -> str:
    if not row["reached"]:
        return "—"
    return f"{round(row['rounds_to_target_mean'], 1):g} ({row['reached']}/{row['finished']})"


def mean_std(mean: float | None, std: float | None, n: int) -> str:
    """``mean ± std`` with the std to 2 significant digits and the mean to the same decimal place; 4 decimals when
    the std is 0, and the mean alone for one run."""
    if mean is None:
        return "—"
    if n <= 1 or not std:
        return f"{mean:.4f}" + (" ± 0.0000" if n > 1 else "")
    places = 1 - int(f"{std:.1e}".split("e")[1])  # std = d.d x 10^e: its second digit is at 10^(e-1)
    return " ± ".join(f"{round(value, places):.{max(places, 0)}f}" for value in (mean, std))


def table_cells(rows: list[dict], metric: str, target: float | None, mode: str = "max") -> list[list[str]]:
    """The main table as text, header first: one row per (config, setting), a row holding ``config``, ``setting``
    and summarise_group's keys; without the setting column when every row's is ``defaults`` (nothing swept)."""
    test = metric_on_test_set(metric)
    header = ["config", "setting", "runs", f"final {metric}", f"best {metric}"]
    if test is not None:
        header.append(f"{test} at best {metric}")
    if target is not None:
        header.append(f"rounds to {metric} {'≥' if mode == 'max' else '≤'} {target:g}")
    clients = has_clients(rows)
    if clients:
        header += [f"clients' {metric} {name}" for name in CLIENT_COLUMNS.values()]
    header += ["time/run (s)", "sent/run (MB)"]
    table = [header]
    for row in rows:
        cells = [
            row["config"],
            row["setting"],
            f"{row['finished']}/{row['planned']}",
            mean_std(row["final_mean"], row["final_std"], row["finished"]),
            mean_std(row["best_mean"], row["best_std"], row["finished"]),
        ]
        if test is not None:
            tested = mean_std(row["test_at_best_mean"], row["test_at_best_std"], row["tested"])
            cells.append(
                tested + (f" ({row['tested']}/{row['finished']})" if 0 < row["tested"] < row["finished"] else "")
            )
        if target is not None:
            cells.append(format_rounds(row))
        if clients:
            cells += [client_cell(row, stat) for stat in CLIENT_COLUMNS]
        cells.append("—" if row["wall_time_s_mean"] is None else f"{row['wall_time_s_mean']:.1f}")
        cells.append("—" if row.get("sent_bytes_mean") is None else f"{row['sent_bytes_mean'] / 1e6:.3g}")
        table.append(cells)
    if not swept(rows):
        return [[cell for i, cell in enumerate(line) if i != 1] for line in table]
    return table


CLIENT_COLUMNS = {"mean": "mean", "std": "std", "worst10": "worst 10 %", "best10": "best 10 %"}


def has_clients(rows: list[dict]) -> bool:
    """Whether any row has a final distribution over clients (``summaries.client_stats``)."""
    return any(row.get("clients_runs") for row in rows)


def client_cell(row: dict, stat: str) -> str:
    runs = row["clients_runs"]
    cell = mean_std(row[f"clients_{stat}_mean"], row[f"clients_{stat}_std"], runs)
    return cell + (f" ({runs}/{row['finished']})" if 0 < runs < row["finished"] else "")


def swept(rows: list[dict]) -> bool:
    """Whether any row has a setting other than the configs as they are."""
    return any(row["setting"] != "defaults" for row in rows)


def render_table(rows: list[dict], metric: str, target: float | None, mode: str = "max", fixed: str = "") -> str:
    """Markdown ``table_cells`` with a note on what the columns hold and, under it, ``fixed`` (the overrides of every
    run, ``fixed_label``) where there are any."""
    header, *body = table_cells(rows, metric, target, mode)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |" for cells in body]
    test = metric_on_test_set(metric)
    note = (
        "\nruns: finished/planned. final, best: mean ± std over the finished runs (the std to 2 significant digits, "
        "the mean to its decimal place; best: each run's best evaluated round)."
        + (
            f" {test} at best {metric}: the test set, read once at the end of each run, at the round with "
            f"the best {metric} (if not every run has it: with/finished)."
            if test is not None
            else ""
        )
        + (" rounds to target: mean over the runs that reach it (reached/finished)." if target is not None else "")
        + (
            f" clients' {metric}: the final model on each client's own data (its held-out share with "
            "data.client_val_fraction > 0, else its training examples; each client's own model where the run keeps "
            "one), summarised over clients (std over clients; worst/best 10 %: the mean of the worst/best tenth), "
            "then mean ± std over the runs."
            if has_clients(rows)
            else ""
        )
        + " time/run: the sum of round/time_s (training and evaluation, without start-up). sent/run: the bytes the"
        " clients sent over the run (communication/sent_bytes; 1 MB = 10^6 bytes).\n"
    )
    return "\n".join(lines) + "\n" + note + (f"\nevery run: {fixed}\n" if fixed else "")


def fixed_label(fixed: dict[str, str], rounds: int | None = None) -> str:
    """The overrides of every run (``--set``, then ``--rounds``) as ``key=value`` pairs; "" where there are none."""
    pairs = {**fixed, **({"trainer.rounds": str(rounds)} if rounds is not None else {})}
    return " ".join(f"{short_key(key)}={value}" for key, value in pairs.items())


def render_usable(best: float | None, rates: dict[str, dict], metric: str, fraction: float) -> str:
    """Markdown table of ``usable_rates``."""
    lines = ["| config | usable runs | diverged | usable share |", "|---|---|---|---|"]
    for stem, rate in rates.items():
        share = "—" if rate["share"] is None else f"{100 * rate['share']:.0f}%"
        ended = rate["finished"] + rate["diverged"]
        lines.append(f"| {stem} | {rate['usable']}/{ended} | {rate['diverged']} | {share} |")
    reference = "—" if best is None else f"{best:.4f}"
    return (
        "\n".join(lines) + f"\n\nusable: final {metric} >= {fraction:g} x the best final {metric} of all finished "
        f"runs ({reference}); a run whose weights became NaN/Inf counts as diverged, not usable.\n"
    )


def render_pivot(rows: list[dict], settings: dict[tuple[str, str], Setting], key: str, metric: str) -> str:
    """The final ``metric`` (mean ± std over seeds) with one column per value of the swept ``key`` and one row per
    config and its other settings (``settings``: each row's (config, setting label) -> its setting)."""
    values = list(dict.fromkeys(setting[key] for setting in settings.values() if key in setting))
    table: dict[tuple[str, str], dict[str, str]] = {}
    for row in rows:
        setting = settings[row["config"], row["setting"]]
        rest = setting_label({k: v for k, v in setting.items() if k != key})
        cell = mean_std(row["final_mean"], row["final_std"], row["finished"])
        table.setdefault((row["config"], rest), {})[setting.get(key, "")] = cell
    header = ["config", "setting", *(f"{short_key(key)}={value}" for value in values)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (config, rest), cells in table.items():
        line = [config, rest, *(cells.get(value, "—") for value in values)]
        lines.append("| " + " | ".join(text.replace("|", "\\|") for text in line) + " |")
    return "\n".join(lines) + f"\n\nfinal {metric} by {short_key(key)}: mean ± std over the finished runs.\n"
