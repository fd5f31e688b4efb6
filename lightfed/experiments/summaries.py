"""The numbers of a comparison: each run's final and best value and rounds to a target, the mean and spread over a
(config, setting)'s seeds, and each config's share of usable runs."""

import statistics

from lightfed.experiments.run_logs import CLIENT_STATS


def reached(value: float, target: float, mode: str) -> bool:
    return value >= target if mode == "max" else value <= target


def summarise_history(history: list[list[float]], target: float | None, mode: str = "max") -> dict:
    """Final and best value and the first round that reaches ``target`` (None if never) of one run."""
    values = [v for _, v in history]
    first = next((step for step, v in history if reached(v, target, mode)), None) if target is not None else None
    return {"final": values[-1], "best": max(values) if mode == "max" else min(values), "rounds_to_target": first}


def summarise_group(results: list[dict], planned: int) -> dict:
    """One table row's numbers from the finished runs of one (config, setting)."""

    def mean_std(key: str, runs: list[dict] = results) -> tuple[float | None, float | None]:
        values = [r[key] for r in runs]
        if not values:
            return None, None
        return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0

    hits = [r["rounds_to_target"] for r in results if r["rounds_to_target"] is not None]
    final_mean, final_std = mean_std("final")
    best_mean, best_std = mean_std("best")
    tested = [r for r in results if r.get("test_at_best") is not None]
    test_mean, test_std = mean_std("test_at_best", tested)
    return {
        **client_stats(results),
        "finished": len(results),
        "planned": planned,
        "final_mean": final_mean,
        "final_std": final_std,
        "best_mean": best_mean,
        "best_std": best_std,
        "tested": len(tested),
        "test_at_best_mean": test_mean,
        "test_at_best_std": test_std,
        "reached": len(hits),
        "rounds_to_target_mean": statistics.fmean(hits) if hits else None,
        "wall_time_s_mean": mean_std("wall_time_s")[0],
        "sent_bytes_mean": mean_std("sent_bytes", [r for r in results if r.get("sent_bytes") is not None])[0],
    }


def client_stats(results: list[dict]) -> dict:
    """The mean and std over seeds of each run's final distribution over clients (``clients_<stat>_{mean,std}``),
    from the runs that have one (``clients_runs``)."""
    having = [r["clients"] for r in results if r.get("clients")]
    row: dict = {"clients_runs": len(having)}
    for stat in CLIENT_STATS:
        values = [each[stat] for each in having]
        row[f"clients_{stat}_mean"] = statistics.fmean(values) if values else None
        row[f"clients_{stat}_std"] = (statistics.stdev(values) if len(values) > 1 else 0.0) if values else None
    return row


def usable_rates(results: list[dict], fraction: float) -> tuple[float | None, dict[str, dict]]:
    """The best final value over the finished runs of every config, and per config how many of its finished runs
    end at or above ``fraction`` x that best value ("usable", as in the Adaptive FedECADO paper's Table 1); diverged
    runs count as ended and not usable."""
    finished = [r for r in results if r["status"] == "finished"]
    best = max((r["final"] for r in finished), default=None)
    rates = {}
    for stem in dict.fromkeys(r["stem"] for r in results):
        mine = [r for r in finished if r["stem"] == stem]
        diverged = sum(r["status"] == "diverged" and r["stem"] == stem for r in results)
        usable = sum(best is not None and r["final"] >= fraction * best for r in mine)
        ended = len(mine) + diverged
        rates[stem] = {
            "usable": usable,
            "finished": len(mine),
            "diverged": diverged,
            "share": usable / ended if ended else None,
        }
    return best, rates
