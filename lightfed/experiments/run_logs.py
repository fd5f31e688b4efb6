"""A run's history read back from its metrics file: the lines that can be used, the newest version's rounds and
its final record."""

import json
import math
import sys
from pathlib import Path

from lightfed.run.evaluation import per_client_monitor
from lightfed.run.run_output import METRICS_FILE

SENT = "communication/sent_bytes"  # what the clients sent in a round (None in logs from before it was logged)


def metric_on_test_set(metric: str) -> str | None:
    """The test-set counterpart of a validation metric (``val_acc`` -> ``test_acc``); None for another metric."""
    return "test_" + metric.removeprefix("val_") if metric.startswith("val_") else None


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def line_problem(values: object, metric: str) -> str | None:
    """Why a metrics-file line cannot be used (None when it can): what it must hold to count."""
    if not isinstance(values, dict):
        return "not a JSON object"
    if "round" not in values:
        return "no round"
    if not isinstance(values["round"], int) or isinstance(values["round"], bool):
        return f"round {values['round']!r} is not a whole number"
    test = metric_on_test_set(metric)
    for key in (metric, "round/time_s", *([f"best_{test}"] if test else [])):
        if key in values and not _finite(values[key]):
            return f"{key} {values[key]!r} is not a finite number"
    return None


def metrics_lines(path: Path, metric: str) -> list[dict]:
    """The lines of a metrics file that can be used; each other line is skipped with one warning on stderr that
    names the file, the line and what is wrong with it (a line cut short by a kill, bytes that are not UTF-8, ...)."""
    lines = []
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            values = json.loads(raw.decode("utf-8"))
            problem = line_problem(values, metric)
        except UnicodeDecodeError:
            problem = "not UTF-8"
        except ValueError:  # json.JSONDecodeError, or a number too large for Python
            problem = "not JSON"
        if problem is None:
            lines.append(values)
        else:
            print(f"compare: warning: skipped line {number} of {path}: {problem}", file=sys.stderr, flush=True)
    return lines


def read_log(runs_dir: Path, name: str, metric: str) -> dict | None:
    """History of ``metric``, summed ``round/time_s`` and ``communication/sent_bytes``, the names of the logged metrics
    and the final record (the run's test metrics, ``{"final": true, ...}``), from the metrics file of the newest
    version of a run; None if it has none. A round logged again (a resumed run) counts with its last line, and the
    newest final record counts; lines that cannot be used are skipped (``metrics_lines``)."""
    versions = [p for p in (runs_dir / name).glob("version_*") if p.name[8:].isdigit() and (p / METRICS_FILE).is_file()]
    if not versions:
        return None
    log_dir = max(versions, key=lambda p: int(p.name[8:]))
    rounds, final = {}, None
    for values in metrics_lines(log_dir / METRICS_FILE, metric):
        if values.get("final") is True:
            final = values
        else:
            rounds[values.pop("round")] = values
    history = [[done, values[metric]] for done, values in sorted(rounds.items()) if metric in values]
    return {
        "log_dir": str(log_dir),
        "metrics": sorted({key for values in rounds.values() for key in values}),
        "history": history,
        "wall_time_s": sum(values.get("round/time_s", 0.0) for values in rounds.values()),
        "sent_bytes": sum(sent) if (sent := [v[SENT] for v in rounds.values() if SENT in v]) else None,
        "final_record": final,
        "last_round": max(rounds, default=0),
    }


def best_round_test_value(log: dict, metric: str) -> float | None:
    """The test metric of the round with the best ``metric``, from the run's final record; None when the record is
    missing, older than the run's last round, or chose its best round on another metric."""
    final, test = log["final_record"], metric_on_test_set(metric)
    if final is None or test is None or final["round"] != log["last_round"] or final.get("monitor") != metric:
        return None
    return final.get(f"best_{test}")


CLIENT_STATS = ("mean", "std", "worst10", "best10")  # the final record's distribution over clients


def final_clients(log: dict, metric: str) -> dict[str, float] | None:
    """The final model's distribution over clients of ``metric`` (``CLIENT_STATS``) from the run's final record: the
    clients' own models' (``clients/personal/``) where the run keeps them, else the global model's; None when the
    record is missing, older than the run's last round, or holds no distribution of that metric."""
    final = log["final_record"]
    if final is None or final["round"] != log["last_round"]:
        return None
    monitor = per_client_monitor(metric)
    for name in (f"clients/personal/{monitor}", f"clients/{monitor}"):
        if all(_finite(final.get(f"{name}_{stat}")) for stat in CLIENT_STATS):
            return {stat: final[f"{name}_{stat}"] for stat in CLIENT_STATS}
    return None
