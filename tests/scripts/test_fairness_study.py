"""scripts/studies/fairness_study.py: its table's cells from numbers worked out by hand."""

from tests.scripts.script_modules import load

study = load("studies/fairness_study.py")


def _record(test_acc: float, worst: float, prefix: str = "clients/val_acc") -> dict:
    return {
        "test_acc": test_acc,
        **{f"{prefix}_{s}": v for s, v in zip(study.STATS, (0.8, 0.1, worst, 1.0), strict=True)},
    }


def test_a_row_is_the_mean_and_std_over_seeds_of_the_personal_models_where_kept():
    # worst 10 % of two seeds 0.4 and 0.6: mean 0.5, sample std 0.1414
    assert study.row("FedAvg", [_record(0.9, 0.4), _record(0.7, 0.6)]) == [
        "FedAvg", "0.800 ± 0.141", "0.800 ± 0.000", "0.100 ± 0.000", "0.500 ± 0.141", "1.000 ± 0.000",
    ]  # fmt: skip
    personal = {**_record(0.9, 0.4), **_record(0.9, 0.9, "clients/personal/val_acc")}
    assert study.row("Ditto", [personal])[4] == "0.900 ± 0.000"
