"""lightfed compare's outputs for papers, by hand: mean ± std rounded to the seeds' spread, the main table as LaTeX
and CSV, no setting column when nothing is swept, and the plot as PNG, PDF and SVG with curves that stay apart."""

import pytest

from lightfed.experiments import markdown, paper_tables, plot

FEDAVG = {
    "config": "fed_avg",
    "setting": "strategy.server_lr=0.5 tag=50%&#1",
    "finished": 3,
    "planned": 3,
    "final_mean": 0.95341,
    "final_std": 0.01234,
    "best_mean": 0.96,
    "best_std": 0.0,
    "tested": 3,
    "test_at_best_mean": 0.9,
    "test_at_best_std": 0.05,
    "reached": 3,
    "rounds_to_target_mean": 2.5,
    "wall_time_s_mean": 12.34,
    "sent_bytes_mean": 1234567.0,
}
KRUM = FEDAVG | {  # one finished run, without a test metric, not reaching the target
    "config": "krum",
    "setting": "defaults",
    "finished": 1,
    "final_mean": 0.7,
    "final_std": 0.0,
    "best_mean": 0.8,
    "tested": 0,
    "test_at_best_mean": None,
    "test_at_best_std": None,
    "reached": 0,
    "rounds_to_target_mean": None,
    "wall_time_s_mean": 10.0,
    "sent_bytes_mean": None,  # logs from before communication was logged
}
ROWS = [FEDAVG, KRUM]


@pytest.mark.parametrize(
    "mean, std, n, text",
    [
        (0.95341, 0.01234, 3, "0.953 ± 0.012"),
        (0.5, 0.0996, 2, "0.50 ± 0.10"),  # the std rounds up to 0.10: its 2 digits end at the second decimal
        (0.123456, 0.00096, 2, "0.12346 ± 0.00096"),
        (0.9, 0.0, 2, "0.9000 ± 0.0000"),  # no spread: 4 decimals
        (0.95341, 0.0, 1, "0.9534"),  # one seed: 4 decimals, no std
        (12.345, 1.234, 3, "12.3 ± 1.2"),
        (95.4, 12.6, 3, "95 ± 13"),
        (1234.5, 123.4, 3, "1230 ± 120"),
        (None, None, 0, "—"),
    ],
)
def test_mean_std_shows_the_std_to_two_significant_digits_and_the_mean_to_the_same_place(mean, std, n, text):
    assert markdown.mean_std(mean, std, n) == text


def test_the_markdown_table_rounds_to_the_spread():
    lines = markdown.render_table(ROWS, "val_acc", 0.9).splitlines()
    assert lines[2] == (
        "| fed_avg | strategy.server_lr=0.5 tag=50%&#1 | 3/3 | 0.953 ± 0.012 | 0.9600 ± 0.0000 | "
        "0.900 ± 0.050 | 2.5 (3/3) | 12.3 | 1.23 |"
    )
    assert lines[3] == "| krum | defaults | 1/3 | 0.7000 | 0.8000 | — | — | 10.0 | — |"


def test_the_latex_table_has_the_markdown_tables_rows_and_columns_escaped_by_hand():
    assert paper_tables.render_latex(ROWS, "val_acc", 0.9) == (
        "\\begin{tabular}{llrrrrrrr}\n"
        "\\toprule\n"
        "config & setting & runs & final val\\_acc & best val\\_acc & test\\_acc at best val\\_acc & "
        "rounds to val\\_acc $\\geq$ 0.9 & time/run (s) & sent/run (MB) \\\\\n"
        "\\midrule\n"
        "fed\\_avg & strategy.server\\_lr=0.5 tag=50\\%\\&\\#1 & 3/3 & 0.953 $\\pm$ 0.012 & 0.9600 $\\pm$ 0.0000 & "
        "0.900 $\\pm$ 0.050 & 2.5 (3/3) & 12.3 & 1.23 \\\\\n"
        "krum & defaults & 1/3 & 0.7000 & 0.8000 & --- & --- & 10.0 & --- \\\\\n"
        "\\bottomrule\n"
        "\\end{tabular}\n"
    )
    assert paper_tables.latex("a\\b{c}~^$") == "a\\textbackslash{}b\\{c\\}\\textasciitilde{}\\textasciicircum{}\\$"
    assert "$\\leq$ 0.5" in paper_tables.render_latex(ROWS, "val_loss", 0.5, "min")


def test_the_csv_table_keeps_full_precision_with_mean_and_std_apart_by_hand():
    assert paper_tables.render_csv(ROWS, "val_acc", 0.9) == (
        "config,setting,finished,planned,final_mean,final_std,best_mean,best_std,tested,test_at_best_mean,"
        "test_at_best_std,reached,rounds_to_target_mean,wall_time_s_mean,sent_bytes_mean\n"
        "fed_avg,strategy.server_lr=0.5 tag=50%&#1,3,3,0.95341,0.01234,0.96,0.0,3,0.9,0.05,3,2.5,12.34,1234567.0\n"
        "krum,defaults,1,3,0.7,0.0,0.8,0.0,0,,,0,,10.0,\n"
    )
    # no test metric for a training metric, no rounds without a target
    assert paper_tables.render_csv(ROWS, "train_loss", None).splitlines()[0] == (
        "config,setting,finished,planned,final_mean,final_std,best_mean,best_std,wall_time_s_mean,sent_bytes_mean"
    )


def test_no_setting_column_when_nothing_is_swept():
    rows = [{**FEDAVG, "setting": "defaults"}, KRUM]
    lines = markdown.render_table(rows, "val_acc", None).splitlines()
    assert lines[0] == (
        "| config | runs | final val_acc | best val_acc | test_acc at best val_acc | time/run (s) | sent/run (MB) |"
    )
    assert lines[3] == "| krum | 1/3 | 0.7000 | 0.8000 | — | 10.0 | — |"
    latex = paper_tables.render_latex(rows, "val_acc", None).splitlines()
    assert latex[0] == "\\begin{tabular}{lrrrrrr}" and latex[2].startswith("config & runs & ")
    assert latex[5] == "krum & 1/3 & 0.7000 & 0.8000 & --- & 10.0 & --- \\\\"
    csv = paper_tables.render_csv(rows, "val_acc", None).splitlines()
    assert csv[0].startswith("config,finished,planned,") and csv[2] == "krum,1,3,0.7,0.0,0.8,0.0,0,,,10.0,"
    # one swept row keeps the column for all
    assert markdown.render_table(ROWS, "val_acc", None).startswith("| config | setting | runs |")


def test_the_plot_is_saved_as_png_pdf_and_svg_and_two_coinciding_curves_differ_in_style(tmp_path):
    seeds = [[[1, 0.5], [2, 0.6], [3, 0.7]], [[1, 0.4], [2, 0.6], [3, 0.8]]]
    fig = plot.plot_curves({"fedavg": seeds, "fedprox": seeds}, "val_acc", 0.65, tmp_path / "accuracy")
    assert (tmp_path / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "accuracy.pdf").read_bytes()[:4] == b"%PDF"
    svg = (tmp_path / "accuracy.svg").read_bytes()
    assert svg.startswith(b"<?xml") and b"<svg" in svg[:1000]
    (ax,) = fig.axes
    fedavg, fedprox, target = ax.get_lines()
    assert list(fedavg.get_ydata()) == list(fedprox.get_ydata()) == pytest.approx([0.45, 0.6, 0.75])
    assert fedavg.get_linestyle() != fedprox.get_linestyle() and fedavg.get_marker() != fedprox.get_marker()
    assert target.get_ydata()[0] == 0.65
    assert len(ax.collections) == 2  # each curve keeps its min-max band
