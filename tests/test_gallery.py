"""scripts/gallery.py and docs/results/gallery.md: the page embeds exactly the figures the script makes, its tables
are the script's, and the tables and figures come out right from tiny fake records."""

import json
import re
import sys

import pytest

from tests.scripts.script_modules import ROOT, SCRIPTS, load

sys.path.insert(0, str(SCRIPTS))  # the gallery imports the harness as the scripts do
gallery = load("gallery.py")

PAGE = ROOT / "docs" / "results" / "gallery.md"
IMAGES = ROOT / "docs" / "images" / "gallery"
EMBEDDED = re.compile(r"!\[[^\]]*\]\(\.\./images/gallery/([^)]+)\)")


def test_every_figure_the_script_makes_is_committed_small_and_embedded_and_no_other():
    made = gallery.figures()
    assert len(made) == 5
    for name in made:
        assert (IMAGES / name).is_file(), name
        assert (IMAGES / name).stat().st_size < 150_000, name
    assert sorted(EMBEDDED.findall(PAGE.read_text())) == sorted(made)


def test_the_pages_tables_are_the_scripts_own_from_its_numbers():
    numbers = json.loads((IMAGES / "gallery.json").read_text())
    page = PAGE.read_text()
    assert sorted(numbers) == sorted(gallery.PARTS)
    for name in gallery.PARTS:
        assert gallery.fill(page, name, gallery.block(name, numbers[name]["rows"])) == page, name


def _compare_run(stem: str, value: float, test_acc: float, status: str = "finished") -> dict:
    return {
        "stem": stem,
        "setting": {"data.partitioner.init_args.alpha": value},
        "status": status,
        "final": 0.5,
        "final_record": {"test_acc": test_acc},
    }


def test_compare_rows_keep_the_finished_runs_and_pivot_one_column_a_value():
    results = {"runs": [_compare_run("fedavg", 0.1, 0.25), _compare_run("fedavg", 10, 0.75)]}
    results["runs"].append(_compare_run("scaffold", 0.1, 0.5))
    results["runs"].append(_compare_run("scaffold", 10, 0.0, status="missing"))
    rows = gallery.compare_rows(results)
    assert [(row["config"], row["value"], row["test_acc"]) for row in rows] == [
        ("fedavg", 0.1, 0.25),
        ("fedavg", 10, 0.75),
        ("scaffold", 0.1, 0.5),
    ]
    assert gallery.pivot(rows, (0.1, 10), "strategy").splitlines() == [
        "| strategy | 0.1 | 10 |",
        "|---|---:|---:|",
        "| fedavg | 0.250 | 0.750 |",
        "| scaffold | 0.500 | - |",
    ]


def test_the_privacy_table_shows_no_privacy_as_infinite_epsilon_and_compression_as_a_share_of_none():
    rows = [
        {"method": "fedavg", "setting": "-", "epsilon (last round)": None, "test_acc": 0.9},
        {
            "method": "user-level-fixed",
            "setting": "transforms.noise_multiplier=1.95068359375",
            "epsilon (last round)": 3.14159,
            "test_acc": 0.8,
        },
    ]
    assert gallery.privacy_table(rows).splitlines()[2:] == [
        "| fedavg | - | ∞ | 0.900 |",
        "| user-level-fixed | noise_multiplier 1.95 | 3.14 | 0.800 |",
    ]
    sent = [
        {"compressor": "none", "test_acc": 0.8, "sent_mb": 10.0},
        {"compressor": "TopK", "test_acc": 0.7, "sent_mb": 0.5},
    ]
    assert gallery.compression_table(sent).splitlines()[3] == "| TopK | 0.700 | 0.50 | 0.050 |"


def test_a_parts_block_is_its_figure_its_caption_with_the_command_and_its_table_between_its_markers():
    rows = [{"compressor": "none", "test_acc": 0.8, "sent_mb": 10.0}]
    page = "a\n<!-- gallery:compression -->\nold\n<!-- /gallery:compression -->\nb\n"
    filled = gallery.fill(page, "compression", gallery.block("compression", rows))
    head, begin, figure, _, caption, made, _, *table, end, tail = filled.splitlines()
    assert (head, begin, end, tail) == ("a", "<!-- gallery:compression -->", "<!-- /gallery:compression -->", "b")
    assert figure.endswith("](../images/gallery/compression.png)") and caption.endswith("<br>")
    assert made == "Made by `python scripts/gallery.py --out runs/gallery --only compression`."
    assert table == gallery.compression_table(rows).splitlines()
    assert gallery.fill(filled, "compression", gallery.block("compression", rows)) == filled
    assert "../images/gallery/" not in gallery.block("expected", [])
    with pytest.raises(ValueError, match="gallery:fairness"):
        gallery.fill(page, "fairness", "new")


FAKE_ROWS = {
    "strategies": [{"config": c, "value": a, "test_acc": 0.5} for c in ("fedavg", "scaffold") for a in (0.1, 0.5, 10)],
    "robustness": [{"config": "median", "value": f, "test_acc": 0.6 - f} for f in (0, 0.1, 0.2, 0.3)],
    "privacy": [
        {"method": "fedavg", "setting": "-", "epsilon (last round)": None, "test_acc": 0.9},
        {"method": "user-level-fixed", "setting": "z=2", "epsilon (last round)": 2.0, "test_acc": 0.7},
        {"method": "user-level-fixed", "setting": "z=1", "epsilon (last round)": 8.0, "test_acc": 0.8},
    ],
    "compression": [
        {"compressor": "none", "test_acc": 0.8, "sent_mb": 10.0},
        {"compressor": "TopK", "test_acc": 0.7, "sent_mb": 0.5},
    ],
    "fairness": [
        {
            "method": "FedAvg",
            "test_acc": 0.8,
            "mean": 0.7,
            "worst10": 0.2,
            "best10": 1.0,
            "per_client": [0.2, 0.7, 1.0],
        },
        {"method": "Ditto", "test_acc": 0.7, "mean": 0.8, "worst10": 0.5, "best10": 1.0, "per_client": [0.5, 0.9, 1.0]},
    ],
}


@pytest.mark.parametrize("name", sorted(FAKE_ROWS))
def test_each_figure_is_a_small_png_from_a_tiny_record(name, tmp_path):
    path = tmp_path / f"{name}.png"
    gallery.PARTS[name].plot(FAKE_ROWS[name], path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size < 150_000
