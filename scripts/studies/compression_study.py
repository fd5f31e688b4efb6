"""Digits: test accuracy against the bytes clients send, for FedAvg with each compressor at two settings.

Each setting is one ``lightfed fit`` of configs/digits/base.yaml (20 clients, 10 a round, 30 rounds, SmallCNN of
29,066 weights) with one compressor under ``transforms:`` (none, QSGD at 8 and 2 bits, TopK at 10 % and 1 %,
SignCompression), in its own folder; the table reads each run's ``metrics.jsonl``: the final model's test accuracy,
the best validation round's, and the megabytes the clients sent over the run.

    python scripts/studies/compression_study.py --out runs/compression_study
    python scripts/studies/compression_study.py --out runs/compression_study --rounds 3    # a quick look
"""

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

SETTINGS = {
    "none": [],
    "QSGD 8 bits": [{"class_path": "lightfed.transforms.QSGD", "init_args": {"bits": 8}}],
    "QSGD 2 bits": [{"class_path": "lightfed.transforms.QSGD", "init_args": {"bits": 2}}],
    "TopK 10 %": [{"class_path": "lightfed.transforms.TopK", "init_args": {"fraction": 0.1}}],
    "TopK 1 %": [{"class_path": "lightfed.transforms.TopK", "init_args": {"fraction": 0.01}}],
    "SignCompression": [{"class_path": "lightfed.transforms.SignCompression"}],
}


def run(out: Path, name: str, transforms: list, rounds: int) -> dict:
    """The run's final record and its summed communication/sent_bytes (runs it unless its folder has them)."""
    folder = out / name.replace(" ", "_").replace("%", "pc")
    metrics = folder / "run" / "version_0" / "metrics.jsonl"
    reused = metrics.is_file()
    if not reused:
        command = [sys.executable, "-m", "lightfed", "fit", "-c", "configs/digits/base.yaml"]
        command += ["--transforms", json.dumps(transforms), "--trainer.rounds", str(rounds)]
        command += ["--trainer.root_dir", str(folder), "--trainer.name", "run", "--trainer.progress_bar", "false"]
        subprocess.run(command, check=True, capture_output=True)
    lines = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    final = next(line for line in reversed(lines) if line.get("final"))
    sent = sum(line.get("communication/sent_bytes", 0.0) for line in lines if not line.get("final"))
    progress = f"{name}: test_acc={final['test_acc']:.4f}{' (reused)' if reused else ''}"
    print(progress + "\n", end="", flush=True)  # in one write: parallel runs' lines stay apart
    return {**final, "sent_mb": sent / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--workers", type=int, default=1, help="runs at a time")
    harness.add_json_option(parser)
    args = parser.parse_args()
    with ThreadPoolExecutor(args.workers) as pool:
        done = pool.map(lambda setting: run(args.out, *setting, args.rounds), SETTINGS.items())
    results = dict(zip(SETTINGS, done, strict=True))
    plain = results["none"]["sent_mb"]
    harness.print_table(
        ["compressor", "test_acc, final model", "test_acc, best val round", "MB sent", "x none"],
        [
            [
                name,
                f"{r['test_acc']:.3f}",
                f"{r['best_test_acc']:.3f}",
                f"{r['sent_mb']:.2f}",
                f"{r['sent_mb'] / plain:.3f}",
            ]
            for name, r in results.items()
        ],
    )
    print(harness.command_line("scripts/studies/compression_study.py", sys.argv[1:]))
    figures = [
        {"compressor": name, **{key: r[key] for key in ("test_acc", "best_test_acc", "sent_mb")}}
        for name, r in results.items()
    ]
    harness.write_json(args.json, figures)


if __name__ == "__main__":
    main()
