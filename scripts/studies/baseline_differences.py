"""How far each baseline's authors'-code and Flower settings move the weights from lightfed's defaults.

A tiny problem: 2 quadratic clients in 3 coordinates, f_i(x) = 1/2 sum_j a_ij (x_j - c_ij)^2, with 30 and 10
examples; each takes K exact gradient steps (client 1 with half the learning rate, so that FedNova's normalisers
differ); 3 rounds from x = 0. Prints, per setting, the largest coordinate difference of the weights the run
evaluates after the last round from those of the default. With ``flwr`` installed, Flower's FedAdam, FedYogi and
FedAdagrad run on the same client results (``--flower``)::

    python scripts/studies/baseline_differences.py [--flower]
"""

import argparse
import sys
from pathlib import Path

import torch

from lightfed.core.messages import ClientUpdate
from lightfed.core.sums import Sums
from lightfed.strategies import FedAdagrad, FedAdam, FedBuff, FedExP, FedNova, FedYogi
from lightfed.strategies.async_base import AsyncSetting
from lightfed.strategies.base import ServerContext

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

CURVATURE = torch.tensor([[1.0, 4.0, 0.5], [3.0, 0.5, 2.0]], dtype=torch.float64)
OPTIMUM = torch.tensor([[1.0, -2.0, 0.5], [-1.0, 1.0, 2.0]], dtype=torch.float64)
EXAMPLES, LR, STEPS, ROUNDS = (30, 10), (0.1, 0.05), (5, 10), 3


def client_update(client: int, params: torch.Tensor) -> ClientUpdate:
    """K exact gradient steps on client ``client``'s quadratic from ``params``."""
    x = params.double().clone()
    for _ in range(STEPS[client]):
        x -= LR[client] * CURVATURE[client] * (x - OPTIMUM[client])
    delta = (x - params.double()).float()
    time = LR[client] * STEPS[client]
    return ClientUpdate(client, delta, torch.zeros(0), EXAMPLES[client], STEPS[client], time, torch.tensor(0.0))


def run(strategy, staleness=(0, 0)) -> torch.Tensor:
    """The weights the run evaluates after ``ROUNDS`` rounds of both clients."""
    params = torch.zeros(3)
    if isinstance(strategy, FedBuff):
        strategy.configure_async(AsyncSetting(buffer_size=2, local_steps=None, rounds=ROUNDS))
    strategy.setup(ServerContext(params, num_clients=2))
    for round in range(ROUNDS):
        sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
        for client in range(2):
            if isinstance(strategy, FedBuff):
                strategy.accumulate(sums, client_update(client, params), staleness[client])
            else:
                strategy.accumulate(sums, client_update(client, params))
        if isinstance(strategy, FedBuff):
            params = strategy.aggregate(params, sums, round, list(staleness))
        else:
            params = strategy.aggregate(params, sums, round)
    return strategy.evaluated(params)


def flower_run(name: str, beta1: float, flower_rounds: range) -> torch.Tensor:
    """Flower's strategy ``name`` on the same clients (its ``server_round`` taking the values ``flower_rounds``)."""
    from flwr import common
    from flwr.server import strategy as strategies

    betas = {} if name == "FedAdagrad" else {"beta_1": beta1, "beta_2": 0.99}
    flower = getattr(strategies, name)(
        initial_parameters=common.ndarrays_to_parameters([torch.zeros(3).numpy()]), eta=0.1, tau=1e-3, **betas
    )
    params, ok = torch.zeros(3), common.Status(code=common.Code.OK, message="")
    for server_round in flower_rounds:
        results = []
        for client in range(2):
            update = client_update(client, params)
            weights = common.ndarrays_to_parameters([(params + update.delta).numpy()])
            results.append((None, common.FitRes(ok, weights, update.num_examples, {})))
        aggregated, _ = flower.aggregate_fit(server_round, results, [])
        params = torch.from_numpy(common.parameters_to_ndarrays(aggregated)[0]).float()
    return params


def difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flower", action="store_true", help="also run Flower's FedAdam, FedYogi, FedAdagrad")
    harness.add_json_option(parser)
    args = parser.parse_args()
    adam = dict(server_lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3)
    flower_settings = dict(weighting="examples", initial_v="zero")
    rows = {
        "FedExP": (
            lambda **o: FedExP(eps=1e-3, **o),
            {
                "weighting=examples": {"weighting": "examples"},
                "eps_times_clients=true": {"eps_times_clients": True},
                "eps_decay=0.996004": {"eps_decay": 0.998**2},
                "evaluate=average_last_two": {"evaluate": "average_last_two"},
                "all four (the released code)": {
                    "weighting": "examples",
                    "eps_times_clients": True,
                    "eps_decay": 0.998**2,
                    "evaluate": "average_last_two",
                },
            },
        ),
        "FedAdam": (
            lambda **o: FedAdam(**{**adam, **o}),
            {
                "weighting=examples (TFF code)": {"weighting": "examples"},
                "initial_v=zero": {"initial_v": "zero"},
                "bias_correction=adam": {"bias_correction": "adam"},
                "Flower's settings": {**flower_settings, "bias_correction": "flower"},
            },
        ),
        "FedYogi": (
            lambda **o: FedYogi(**{**adam, **o}),
            {"weighting=examples (TFF code)": {"weighting": "examples"}, "Flower's settings": flower_settings},
        ),
        "FedAdagrad": (
            lambda **o: FedAdagrad(**{**adam, **o}),
            {
                "weighting=examples (TFF code)": {"weighting": "examples"},
                "Flower's settings": {**flower_settings, "beta1": 0.0},
            },
        ),
        "FedNova": (lambda **o: FedNova(**o), {"normalise_by=steps (released code)": {"normalise_by": "steps"}}),
    }
    figures = []

    def report(baseline: str, setting: str, value: float) -> None:
        figures.append({"baseline": baseline, "setting": setting, "max_abs_difference": value})
        print(harness.markdown_row([baseline, setting, f"{value:.3g}"]), flush=True)

    print(harness.markdown_table(["baseline", "setting", "max abs difference from the default after 3 rounds"]))
    for name, (build, options) in rows.items():
        default = run(build())
        for label, overrides in options.items():
            report(name, label, difference(run(build(**overrides)), default))
    staleness = (0, 3)
    plain = run(FedBuff(server_lr=1.0), staleness)
    scaled = run(FedBuff(server_lr=1.0, staleness_weighting=True), staleness)
    report("FedBuff", "staleness_weighting=true (staleness 0 and 3)", difference(scaled, plain))
    if args.flower:
        for name, beta1, bias in [("FedAdam", 0.9, "flower"), ("FedYogi", 0.9, "none"), ("FedAdagrad", 0.0, "none")]:
            build = {"FedAdam": FedAdam, "FedYogi": FedYogi, "FedAdagrad": FedAdagrad}[name]
            ours = run(build(**{**adam, "beta1": beta1}, **flower_settings, bias_correction=bias))
            default = run(build(**adam))
            in_a_run = flower_run(name, beta1, range(1, ROUNDS + 1))
            flower = "Flower 1.42, server_round 1..3"
            report(name, f"{flower} (a Flower run) vs lightfed's default", difference(in_a_run, default))
            report(name, f"{flower} vs Flower's settings", difference(in_a_run, ours))
    harness.write_json(args.json, figures)


if __name__ == "__main__":
    main()
