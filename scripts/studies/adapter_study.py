"""LLM fine-tuning: what federating only the adapters (LoRA) saves against full fine-tuning, in bytes, memory and time.

Every setting is one ``lightfed fit`` of configs/llm/pfl.yaml (a tiny random Llama on the embedded MarkovText, FedAvg,
AdamW) in its own subprocess and folder, one client at a time (``trainer.clients_in_parallel: 1``); the tables read
each run's ``metrics.jsonl`` and checkpoint.

1. pfl.yaml's setting (20 writers, 5 a round, 5 rounds): full fine-tuning, LoRA r 8 on q_proj and v_proj, and
   FFA-LoRA (A frozen, only B trained). Learning rates from a 5-round sweep: full fine-tuning AdamW 1e-2 (of 1e-3,
   3e-3, 1e-2, 3e-2; 3e-2 diverges), LoRA 1e-2 (pfl.yaml's) and 1e-1 (of 1e-2, 3e-2, 1e-1), FFA-LoRA 1e-1.
2. A bigger Llama (hidden 128, intermediate 128, 4 layers) whose frozen base is about 110x its adapters (LoRA r 2 on
   q_proj and v_proj), the 100 writers' text split IID among N clients, 10 a round, 2 local steps of 11 examples
   each, 15 rounds: LoRA and full fine-tuning with FedAvg (AdamW 1e-1 and 1e-2), then SCAFFOLD (SGD 1.0 and 0.1: it
   needs plain SGD), which keeps a control variate per client, with N = 10 and N = 100 and its per-client state in
   memory or on disk (``trainer.client_states``). The same data and the same work a round whatever N.

Columns: federated params: the checkpoint's ``params`` length (what trains and is exchanged). sent/round: the bytes
all clients of a round sent (``communication/sent_bytes``, its mean over rounds). peak RSS: the run process's peak
resident memory (``ru_maxrss`` of its ``os.wait4``): about 1 GB, set by importing torch, transformers and lightning
(a transient peak above the 860 MB they leave resident) more than by the run, and tens of MB apart from one run of the
same setting to the next. run's peak: what the run added to it: the process first imports what a run imports, then
resets its peak (``/proc/self/clear_refs``) and runs ``lightfed fit`` in-process; the figure is its peak
(``VmHWM``) less its resident memory before the run (Linux only; tracemalloc would miss torch's tensors). s/round: the
median ``round/time_s`` (training and evaluation) of rounds 2 on. state: the per-client state the last checkpoint
holds (``lightfed.core.saved_client_states``): clients with some, and their bytes. test_loss / test_acc: the final
global model's.

    python scripts/studies/adapter_study.py --out runs/adapter_study    # about 3 minutes on 2 cores
    python scripts/studies/adapter_study.py --out runs/adapter_study --rounds 2 --big-rounds 3    # a quick look
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

# The run's process: argv is [result.json, checkpoint, lightfed's arguments...]. It imports what a run imports (peft
# and the Llama modules, which a run would import lazily, too), resets its peak resident memory, runs lightfed
# in-process, and writes its resident memory before the run, its peak during it, and the checkpoint's figures.
CHILD = r"""
import json, re, sys
from pathlib import Path

import peft, torch, transformers.models.llama.modeling_llama
import lightfed.data, lightfed.models, lightfed.strategies
from lightfed.cli import main
from lightfed.core.saved_client_states import saved_client_states


def kb(field):
    return int(re.search(field + r":\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


start = kb("VmRSS")
try:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here on: this run's peak
    reset = True
except OSError:
    reset = False
main(sys.argv[3:])
peak = kb("VmHWM")
checkpoint = Path(sys.argv[2])
states = saved_client_states(checkpoint)
Path(sys.argv[1]).write_text(json.dumps({
    "start_kb": start,
    "run_peak_kb": peak if reset else None,
    "params": torch.load(checkpoint, map_location="cpu", weights_only=False)["params"].numel(),
    "state_clients": len(states),
    "state_bytes": sum(t.numel() * t.element_size() for s in states.values() for t in s.values()),
}))
"""

BIG = {
    "model_type": "llama",
    "vocab_size": 16,
    "hidden_size": 128,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}


def lora(r: int, alpha: int, train_a: bool = True) -> list[str]:
    init = {"r": r, "alpha": alpha, "target_modules": ["q_proj", "v_proj"], "train_a": train_a}
    return ["--model.init_args.lora", json.dumps({"class_path": "lightfed.models.LoRA", "init_args": init})]


def optimizer(name: str, lr: float) -> list[str]:
    return ["--model.init_args.optimizer", json.dumps({"class_path": f"torch.optim.{name}", "init_args": {"lr": lr}})]


FULL = ["--model.init_args.lora", "null"]

SMALL = {  # pfl.yaml as it is, but for the adapters and the learning rate
    "full fine-tuning, lr 1e-2": FULL + optimizer("AdamW", 1e-2),
    "LoRA r 8, lr 1e-2 (pfl.yaml)": lora(8, 16) + optimizer("AdamW", 1e-2),
    "LoRA r 8, lr 1e-1": lora(8, 16) + optimizer("AdamW", 1e-1),
    "FFA-LoRA r 8, lr 1e-1": lora(8, 16, train_a=False) + optimizer("AdamW", 1e-1),
}

SCAFFOLD = ["--strategy", "lightfed.strategies.Scaffold"]
ADAPTERS = lora(2, 4)
LORA_SCAFFOLD = ADAPTERS + optimizer("SGD", 1.0) + SCAFFOLD
FULL_SCAFFOLD = FULL + optimizer("SGD", 0.1) + SCAFFOLD
BIG_SETTINGS = [  # (run, clients, client_states, arguments)
    ("LoRA, FedAvg, AdamW 1e-1", 10, "memory", ADAPTERS + optimizer("AdamW", 1e-1)),
    ("full, FedAvg, AdamW 1e-2", 10, "memory", FULL + optimizer("AdamW", 1e-2)),
    ("LoRA, SCAFFOLD, SGD 1.0", 10, "memory", LORA_SCAFFOLD),
    ("LoRA, SCAFFOLD, SGD 1.0", 100, "memory", LORA_SCAFFOLD),
    ("LoRA, SCAFFOLD, SGD 1.0", 100, "disk", LORA_SCAFFOLD),
    ("full, SCAFFOLD, SGD 0.1", 10, "memory", FULL_SCAFFOLD),
    ("full, SCAFFOLD, SGD 0.1", 100, "memory", FULL_SCAFFOLD),
    ("full, SCAFFOLD, SGD 0.1", 100, "disk", FULL_SCAFFOLD),
]


def big_arguments(clients: int, client_states: str, rounds: int) -> list[str]:
    """The bigger Llama on the 100 writers' text split IID among ``clients``, 10 a round, 2 local steps each in batches
    of 11: a client of the 100 holds 22 or 23 examples, so that every step is a whole batch of 11 whatever the number
    of clients (batches of 16 would alternate 16 and 6 or 7 with 100 clients: less work, and less memory, than with
    10). Evaluation in batches of 11 too (pfl.yaml's 512 would set the run's peak with the same activations in every
    setting)."""
    partitioner = {"class_path": "lightfed.data.IIDPartitioner", "init_args": {"num_clients": clients}}
    return [
        *["--model.init_args.config", json.dumps(BIG), "--data.dataset.init_args.num_writers", "100"],
        *["--data.partitioner", json.dumps(partitioner), "--trainer.client_states", client_states],
        *["--data.batch_size", "11", "--data.eval_batch_size", "11", "--trainer.clients_per_round", "10"],
        *["--trainer.local_epochs", "null", "--trainer.local_steps", "2", "--trainer.rounds", str(rounds)],
    ]


def run(folder: Path, arguments: list[str]) -> dict:
    """The run's figures (runs it unless its folder has them): its final record, what its process wrote, its peak
    resident memory, its mean bytes sent and median seconds a round."""
    result = folder / "result.json"
    metrics = folder / "run" / "version_0" / "metrics.jsonl"
    if not result.is_file():
        shutil.rmtree(folder, ignore_errors=True)  # a run that did not finish
        folder.mkdir(parents=True)
        command = [sys.executable, "-c", CHILD, str(result), str(metrics.parent / "checkpoints" / "last.ckpt")]
        command += ["fit", "-c", "configs/llm/pfl.yaml", *arguments, "--trainer.clients_in_parallel", "1"]
        command += ["--trainer.root_dir", str(folder), "--trainer.name", "run", "--trainer.progress_bar", "false"]
        with open(folder / "output.txt", "w") as output:
            process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(process.pid, 0)  # this child's own rusage, not all children's
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            last = (folder / "output.txt").read_text().strip().splitlines()[-1:]
            raise RuntimeError(f"{folder}: exit {process.returncode}: {''.join(last)}")
        figures = json.loads(result.read_text())
        result.write_text(json.dumps({**figures, "peak_kb": usage.ru_maxrss}))  # KB on Linux
    lines = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    rounds = [line for line in lines if not line.get("final")]
    final = next(line for line in reversed(lines) if line.get("final"))
    return {
        **final,
        **json.loads(result.read_text()),
        "sent_per_round": statistics.mean(line.get("communication/sent_bytes", 0.0) for line in rounds),
        "s_per_round": statistics.median(line["round/time_s"] for line in rounds[1:] or rounds),
    }


def mb(kb: float | None) -> str:
    return harness.cell(None if kb is None else kb / 1024, ".0f")


def run_peak(r: dict) -> str:
    """The run's own peak: its process's peak during the run less its resident memory before it, in MB."""
    return harness.cell(None if r["run_peak_kb"] is None else (r["run_peak_kb"] - r["start_kb"]) / 1024, ".1f")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the pfl.yaml runs (table 1)")
    parser.add_argument("--big-rounds", type=int, default=15, help="rounds of the bigger model's runs (table 2)")
    harness.add_json_option(parser)
    args = parser.parse_args()

    small = {
        name: run(args.out / f"small_{i}", [*arguments, "--trainer.rounds", str(args.rounds)])
        for i, (name, arguments) in enumerate(SMALL.items())
    }
    big = [
        {
            "run": name,
            "clients": clients,
            "client_states": where,
            **run(args.out / f"big_{i}", [*arguments, *big_arguments(clients, where, args.big_rounds)]),
        }
        for i, (name, clients, where, arguments) in enumerate(BIG_SETTINGS)
    ]

    full = small["full fine-tuning, lr 1e-2"]
    print(f"pfl.yaml's setting, {args.rounds} rounds, one client at a time:\n")
    harness.print_table(
        ["run", "federated params", "sent/round (kB)", "x full", "peak RSS (MB)", "run's peak (MB)", "s/round"]
        + ["test_loss", "test_acc"],
        [
            [
                name,
                f"{r['params']:,}",
                f"{r['sent_per_round'] / 1e3:.1f}",
                f"{r['sent_per_round'] / full['sent_per_round']:.3f}",
                mb(r["peak_kb"]),
                run_peak(r),
                f"{r['s_per_round']:.3f}",
                f"{r['test_loss']:.3f}",
                f"{r['test_acc']:.3f}",
            ]
            for name, r in small.items()
        ],
        align="lrrrrrrrr",
    )
    adapters, base = big[0]["params"], big[1]["params"]  # LoRA's and full fine-tuning's, with FedAvg
    print(
        f"\nThe bigger Llama: its frozen base {base:,} weights (full fine-tuning federates them all), its LoRA r 2"
        f" adapters {adapters:,}: {base / adapters:.0f}x. {args.big_rounds} rounds of 10 clients, 2 local steps of 11"
        " examples each.\n"
    )
    harness.print_table(
        ["run", "clients", "client_states", "federated params", "sent/round (kB)", "peak RSS (MB)", "run's peak (MB)"]
        + ["s/round", "clients with state", "state (MB)", "test_loss", "test_acc"],
        [
            [
                r["run"],
                r["clients"],
                r["client_states"] if "SCAFFOLD" in r["run"] else "-",
                f"{r['params']:,}",
                f"{r['sent_per_round'] / 1e3:.1f}",
                mb(r["peak_kb"]),
                run_peak(r),
                f"{r['s_per_round']:.3f}",
                r["state_clients"] if "SCAFFOLD" in r["run"] else "-",
                f"{r['state_bytes'] / 2**20:.2f}" if "SCAFFOLD" in r["run"] else "-",
                f"{r['test_loss']:.3f}",
                f"{r['test_acc']:.3f}",
            ]
            for r in big
        ],
        align="lrlrrrrrrrrr",
    )
    harness.write_json(args.json, {"small": small, "big": big})
    print(harness.command_line("scripts/studies/adapter_study.py", sys.argv[1:]))


if __name__ == "__main__":
    main()
