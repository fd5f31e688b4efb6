"""The main table of a comparison for papers: LaTeX (booktabs) with the Markdown table's text, and CSV with plain
numbers."""

import csv
import io

from lightfed.experiments.markdown import CLIENT_COLUMNS, has_clients, swept, table_cells
from lightfed.experiments.run_logs import metric_on_test_set

LATEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "—": "---",
}


def latex(text: str) -> str:
    return "".join(LATEX.get(char, char) for char in text)


def render_latex(rows: list[dict], metric: str, target: float | None, mode: str = "max") -> str:
    """``table_cells`` as a booktabs tabular (``\\usepackage{booktabs}``), LaTeX's special characters escaped."""
    table = table_cells(rows, metric, target, mode)
    columns = "".join("l" if name in ("config", "setting") else "r" for name in table[0])
    head, *body = [" & ".join(map(latex, cells)) + r" \\" for cells in table]
    lines = [
        rf"\begin{{tabular}}{{{columns}}}",
        r"\toprule",
        head,
        r"\midrule",
        *body,
        r"\bottomrule",
        r"\end{tabular}",
    ]
    return "\n".join(lines) + "\n"


def render_csv(rows: list[dict], metric: str, target: float | None) -> str:
    """The main table's rows at full precision, columns named as results.json's rows (mean and std apart); an empty
    field where there is no number, no setting column when nothing is swept."""
    keys = ["config", "setting", "finished", "planned", "final_mean", "final_std", "best_mean", "best_std"]
    if metric_on_test_set(metric) is not None:
        keys += ["tested", "test_at_best_mean", "test_at_best_std"]
    if target is not None:
        keys += ["reached", "rounds_to_target_mean"]
    if has_clients(rows):
        keys += ["clients_runs", *(f"clients_{stat}_{part}" for stat in CLIENT_COLUMNS for part in ("mean", "std"))]
    keys += ["wall_time_s_mean", "sent_bytes_mean"]
    if not swept(rows):
        keys.remove("setting")
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(keys)
    writer.writerows([row[key] for key in keys] for row in rows)
    return text.getvalue()
