"""Whether a client's gradient under ``torch.vmap`` is bit-identical whatever the clients it is batched with: the
property ``clients_in_parallel: auto`` would need to pick vectorized training and keep a run the same on any number
of processes (each process batches other clients together).

For each small model, 8 clients (weights 1 % apart, their own batch of 10) back-propagate the summed loss of
``vmap(functional_call)`` as ``VectorizedClients`` does, all 8 at once, as 3 + 5, and one at a time; a row says whether
every client's gradient is the same, bit for bit, in each split.

    OMP_NUM_THREADS=1 python scripts/checks/vectorized_invariance.py
"""

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

CLIENTS, BATCH = 8, 10


def models() -> dict[str, tuple[nn.Module, torch.Tensor]]:
    """Each model with its clients' inputs (clients, batch, ...)."""
    g = torch.Generator().manual_seed(0)
    features = torch.randn(CLIENTS, BATCH, 60, generator=g)
    tokens = torch.randint(20, (CLIENTS, BATCH, 5), generator=g)
    return {
        "MLP 60-64-10, ReLU": (nn.Sequential(nn.Linear(60, 64), nn.ReLU(), nn.Linear(64, 10)), features),
        "MLP 60-100-10, ReLU": (nn.Sequential(nn.Linear(60, 100), nn.ReLU(), nn.Linear(100, 10)), features),
        "MLP 60-33-10, ReLU": (nn.Sequential(nn.Linear(60, 33), nn.ReLU(), nn.Linear(33, 10)), features),
        "MLP 60-64-10, LayerNorm, GELU": (
            nn.Sequential(nn.Linear(60, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 10)),
            features,
        ),
        "Embedding 20x12, Linear": (nn.Sequential(nn.Embedding(20, 12), nn.Flatten(1), nn.Linear(60, 10)), tokens),
        "Conv2d 1-4 3x3, Linear": (
            nn.Sequential(nn.Unflatten(1, (1, 6, 10)), nn.Conv2d(1, 4, 3), nn.Flatten(1), nn.Linear(128, 10)),
            features,
        ),
    }


def gradients(net: nn.Module, weights: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, rows: list[int]):
    """The gradients of the clients ``rows``, batched together: (len(rows), d)."""
    chosen = {name: w[rows].detach().requires_grad_() for name, w in weights.items()}

    def loss(params, xb, yb):
        return F.cross_entropy(torch.func.functional_call(net, params, (xb,)), yb)

    torch.vmap(loss)(chosen, x[rows], y[rows]).sum().backward()
    return torch.cat([w.grad.flatten(1) for w in chosen.values()], dim=1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_json_option(parser)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    y = torch.randint(10, (CLIENTS, BATCH), generator=torch.Generator().manual_seed(1))
    results, everyone = {}, list(range(CLIENTS))
    for name, (net, x) in models().items():
        weights = {n: p.detach() * (1 + 0.01 * torch.randn(CLIENTS, *p.shape)) for n, p in net.named_parameters()}
        together = gradients(net, weights, x, y, everyone)
        split = torch.cat([gradients(net, weights, x, y, everyone[:3]), gradients(net, weights, x, y, everyone[3:])])
        alone = torch.cat([gradients(net, weights, x, y, [k]) for k in everyone])
        results[name] = {"3 + 5": torch.equal(together, split), "one at a time": torch.equal(together, alone)}
    print(f"{CLIENTS} clients, batch {BATCH}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    harness.print_table(
        ["model", "same in 3 + 5", "same one at a time"],
        [[name, "yes" if r["3 + 5"] else "no", "yes" if r["one at a time"] else "no"] for name, r in results.items()],
    )
    harness.write_json(args.json, results)


if __name__ == "__main__":
    main()
