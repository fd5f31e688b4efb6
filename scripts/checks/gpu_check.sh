#!/usr/bin/env bash
# Everything of lightfed that needs a GPU, in one command, and one table at the end:
#
# - every strategy family (FedAvg, FedAdam, SCAFFOLD, FedBuff, DP-SGD, FedECADO, TrimmedMean) trains 2 rounds of
#   digits on the GPU in 32-true, 16-mixed and bf16-mixed precision (DP-SGD in 32-true alone: it refuses 16-bit
#   precision, which distorts the gradient norms that clipping bounds);
# - FedAvg twice with trainer.deterministic warn (torch's deterministic algorithms: the same weights bit for bit);
# - clients trained vectorized (trainer.clients_in_parallel vectorized: one batched computation), twice, Ditto's
#   personal models, DP-SGD and bf16-mixed vectorized, a vectorized round of more clients than the GPU holds at
#   once, FedECADO's per-client state offloaded to pinned host memory (strategy.state_device cpu), and FedAvg on the CPU: each compared with the GPU run of the same config (the largest
#   difference of the final weights, against a tolerance; the second vectorized run with the first, bit for bit);
# - the benchmarks with --device cuda (scripts/benchmarks/: benchmark.py, client_evaluation_benchmark.py,
#   circuit_benchmark.py, circuit_step_benchmark.py, compiled_step_benchmark.py, data_benchmark.py,
#   tiny_clients_benchmark.py), on small
#   workloads: the CIFAR-size CNN vectorized and one client at a time beside the hand-written loop, per-client
#   evaluation batched and one at a time, the MLP on batched matmuls and under vmap.
#
#   scripts/checks/gpu_check.sh            # run it all; the logs go to $GPU_CHECK_OUT (default runs/gpu-check/)
#   scripts/checks/gpu_check.sh --dry-run  # print each command and check that it parses (no GPU needed)
#
# The training runs go GPU_CHECK_JOBS (default 4) at a time: each is small, mostly the start of Python and CUDA. Then
# the comparisons, then the benchmarks one at a time (their timings need the machine to themselves). Each check prints
# one line as it ends. A row is "ok" when its command exits 0 (a comparison: when the difference is within its
# tolerance); "detail" is the run's final test metrics, the difference, or the benchmark's last line (its full table
# is in the row's log). Exits 1 when a row failed. GPU_CHECK_ARGS: extra `lightfed fit` arguments for every run;
# GPU_CHECK_TIMEOUT: seconds each row may take (default 300).
set -uo pipefail
cd "$(dirname "$0")/../.."

DRY_RUN=0
case "${1:-}" in
    --dry-run) DRY_RUN=1 ;;
    "") ;;
    *) echo "usage: scripts/checks/gpu_check.sh [--dry-run]" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-python}
OUT=${GPU_CHECK_OUT:-runs/gpu-check}
TIMEOUT=${GPU_CHECK_TIMEOUT:-300}
JOBS=${GPU_CHECK_JOBS:-4}
read -r -a EXTRA <<< "${GPU_CHECK_ARGS:-}"

# ----------------------------------------------------------------- the checks: name, then the command's words
NAMES=() COMMANDS=()
check() { NAMES+=("$1"); shift; COMMANDS+=("$(printf '%q ' "$@")"); }

# after the config files, which would override what comes before them
SHORT=(--trainer.accelerator gpu --trainer.devices 1 --trainer.rounds 2 --trainer.client_eval_interval 0
       --trainer.progress_bar false --trainer.logger false --trainer.root_dir "$OUT/runs")
DIGITS=(-c configs/digits/base.yaml)
declare -A FAMILY=(
    [fedavg]="-c configs/quickstart.yaml"
    [fedadam]="${DIGITS[*]} -c configs/digits/fedadam.yaml"
    [scaffold]="${DIGITS[*]} -c configs/digits/scaffold.yaml"
    [fedbuff]="-c configs/async/digits/base.yaml -c configs/async/digits/fedbuff.yaml"
    [dp-sgd]="${DIGITS[*]} -c configs/digits/fedavg.yaml -c configs/privacy/dp-sgd.yaml"
    [fedecado]="${DIGITS[*]} -c configs/digits/fedecado.yaml"
    [trimmedmean]="${DIGITS[*]} -c configs/digits/fedavg.yaml --strategy lightfed.strategies.TrimmedMean --strategy.trim 0.2"
)
for family in fedavg fedadam scaffold fedbuff dp-sgd fedecado trimmedmean; do
    read -r -a config <<< "${FAMILY[$family]}"
    precisions=(32-true 16-mixed bf16-mixed)
    [ "$family" = dp-sgd ] && precisions=(32-true)  # DP refuses 16-bit precision (one line, exit 2)
    for precision in "${precisions[@]}"; do
        check "$family $precision" lightfed fit "${config[@]}" "${SHORT[@]}" --trainer.precision "$precision" \
            --trainer.name "$family-$precision" "${EXTRA[@]}"
    done
done
check "fedavg deterministic" lightfed fit -c configs/quickstart.yaml "${SHORT[@]}" --trainer.deterministic warn \
    --trainer.name deterministic "${EXTRA[@]}"
check "fedavg deterministic, again" lightfed fit -c configs/quickstart.yaml "${SHORT[@]}" --trainer.deterministic warn \
    --trainer.name deterministic-again "${EXTRA[@]}"
check "  = the first deterministic run" compare_weights deterministic-again deterministic 0
check "clients vectorized" lightfed fit -c configs/quickstart.yaml "${SHORT[@]}" \
    --trainer.clients_in_parallel vectorized --trainer.name vectorized "${EXTRA[@]}"
check "  = one at a time" compare_weights vectorized fedavg-32-true 1e-5
check "clients vectorized, again" lightfed fit -c configs/quickstart.yaml "${SHORT[@]}" \
    --trainer.clients_in_parallel vectorized --trainer.name vectorized-again "${EXTRA[@]}"
check "  = the first vectorized run" compare_weights vectorized-again vectorized 0
# vectorized paths the quickstart does not take: a personal model and BatchNorm statistics kept per client (Ditto, from
# round 2 a chunk mixes returning and new clients), and every example's gradient (DP-SGD); 1e-4, as max-pooling can
# turn a convolution's rounding into a jump (docs/results/performance-vectorized.md)
PERSONAL=("${DIGITS[@]}" -c configs/personalization/base.yaml -c configs/personalization/ditto.yaml)
check "ditto vectorized" lightfed fit "${PERSONAL[@]}" "${SHORT[@]}" --trainer.clients_in_parallel vectorized \
    --trainer.name ditto-vectorized "${EXTRA[@]}"
check "ditto one at a time" lightfed fit "${PERSONAL[@]}" "${SHORT[@]}" --trainer.clients_in_parallel 1 \
    --trainer.name ditto-one "${EXTRA[@]}"
check "  = one at a time" compare_weights ditto-vectorized ditto-one 1e-4
check "dp-sgd vectorized" lightfed fit "${DIGITS[@]}" -c configs/digits/fedavg.yaml -c configs/privacy/dp-sgd.yaml \
    "${SHORT[@]}" --trainer.clients_in_parallel vectorized --trainer.name dp-sgd-vectorized "${EXTRA[@]}"
check "  = one at a time" compare_weights dp-sgd-vectorized dp-sgd-32-true 1e-4
check "clients vectorized bf16-mixed" lightfed fit -c configs/quickstart.yaml "${SHORT[@]}" \
    --trainer.clients_in_parallel vectorized --trainer.precision bf16-mixed --trainer.name vectorized-bf16 "${EXTRA[@]}"
check "  = one at a time in bf16" compare_weights vectorized-bf16 fedavg-bf16-mixed 1e-2
# 20 clients of a 1.2e9-parameter MLP (about 12 GB each in a chunk) do not fit on one GPU together: the chunks are
# sized from the free memory, and a chunk that runs out of it trains in halves
check "vectorized past the memory" lightfed fit -c configs/quickstart.yaml "${SHORT[@]}" \
    --model lightfed.models.MLP --model.init_args.in_features 64 --model.init_args.hidden "[24576, 24576]" \
    --trainer.clients_per_round 20 --trainer.rounds 1 --trainer.clients_in_parallel vectorized \
    --trainer.name past-memory "${EXTRA[@]}"
check "fedecado pinned offload" lightfed fit "${DIGITS[@]}" -c configs/digits/fedecado.yaml "${SHORT[@]}" \
    --strategy.init_args.state_device cpu --trainer.name pinned "${EXTRA[@]}"
check "  = state on the GPU" compare_weights pinned fedecado-32-true 1e-6
check "fedavg on the CPU" lightfed fit -c configs/quickstart.yaml "${SHORT[@]}" --trainer.accelerator cpu \
    --trainer.name cpu "${EXTRA[@]}"
check "  = on the GPU" compare_weights cpu fedavg-32-true 1e-3
check "benchmark.py" "$PYTHON" scripts/benchmarks/benchmark.py --device cuda --rounds 2 --warmup-rounds 1 \
    --repeats 1 --paths reference lightfed lightfed-sequential lightfed-vectorized
check "tiny_clients_benchmark.py" "$PYTHON" scripts/benchmarks/tiny_clients_benchmark.py --device cuda \
    --clients 1000 --clients-per-round 50 --client-size 100 --rounds 3
check "tiny clients under vmap" "$PYTHON" scripts/benchmarks/tiny_clients_benchmark.py --device cuda \
    --clients 1000 --clients-per-round 200 --client-size 100 --rounds 3 --vmap
check "compiled_step_benchmark.py" "$PYTHON" scripts/benchmarks/compiled_step_benchmark.py --device cuda
check "client_evaluation_benchmark.py" "$PYTHON" scripts/benchmarks/client_evaluation_benchmark.py --device cuda \
    --finetune-steps 5
check "circuit_benchmark.py" "$PYTHON" scripts/benchmarks/circuit_benchmark.py --accelerator gpu \
    --workloads resnet18gn --clients 20 --clients-per-round 5 --examples 200 --rounds 2 --warmup-rounds 1
check "circuit_step_benchmark.py" "$PYTHON" scripts/benchmarks/circuit_step_benchmark.py --device cuda --repeats 3
check "data_benchmark.py" "$PYTHON" scripts/benchmarks/data_benchmark.py --device cuda --repeats 2

compare_weights() {  # compare_weights RUN REFERENCE TOLERANCE: the largest difference of two runs' final weights
    "$PYTHON" - "$OUT/runs" "$@" <<'PY'
import sys
from pathlib import Path

import torch

runs, run, reference, tolerance = Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
def params(name):
    newest = max((runs / name).glob("version_*/checkpoints/last.ckpt"), key=lambda path: path.stat().st_mtime)
    return torch.load(newest, map_location="cpu", weights_only=False)["params"].double()
difference = (params(run) - params(reference)).abs().max().item()
print(f"max |{run} - {reference}| = {difference:.3g} (tolerance {tolerance:g})")
sys.exit(0 if difference <= tolerance else 1)
PY
}

# ----------------------------------------------------------------- --dry-run: print, and parse every command line
if [ "$DRY_RUN" = 1 ]; then
    for i in "${!NAMES[@]}"; do printf '%-28s %s\n' "${NAMES[$i]}" "${COMMANDS[$i]}"; done
    # one Python process parses them all: lightfed's commands with --print_config, the scripts' argparse parsers
    GPU_CHECK_LINES=$(printf '%s\n' "${COMMANDS[@]}") "$PYTHON" - "${NAMES[@]}" <<'PY'
import argparse, contextlib, io, os, runpy, shlex, sys

from lightfed.cli import main


class Parsed(Exception):
    """A script's command line parsed: stop before the script runs."""


parse_known_args = argparse.ArgumentParser.parse_known_args


def parse_only(self, args=None, namespace=None):
    namespace, rest = parse_known_args(self, args, namespace)  # an error exits 2, as usual
    if rest:
        self.error(f"unrecognized arguments: {' '.join(rest)}")
    raise Parsed


argparse.ArgumentParser.parse_args = parse_only
lines = os.environ["GPU_CHECK_LINES"].splitlines()
failed = []
commands = [(name, shlex.split(line)) for name, line in zip(sys.argv[1:], lines)]
commands = [(name, words) for name, words in commands if words[0] != "compare_weights"]  # no command line of its own
for name, words in commands:
    errors = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(errors):
            if words[0] == "lightfed":
                main([*words[1:], "--print_config"])
            else:
                sys.argv = words[1:]
                runpy.run_path(words[1], run_name="__main__")
        code = 0
    except Parsed:
        code = 0
    except SystemExit as exit:
        code = exit.code or 0
    if code:
        failed.append(name)
        reason = (errors.getvalue().strip().splitlines() or ["(no message)"])[-1]
        print(f"gpu_check: {name}: does not parse: {reason}", file=sys.stderr)
print(f"gpu_check: dry run: {len(commands) - len(failed)} of {len(commands)} command lines parse")
sys.exit(1 if failed else 0)
PY
    exit $?
fi

# ----------------------------------------------------------------- the run
if ! "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: error: no CUDA device is visible to torch; run it on a machine with a GPU (or use --dry-run)" >&2
    exit 2
fi
mkdir -p "$OUT/logs"
log_of() { printf '%s/logs/%03d%s.log' "$OUT" "$1" "$(printf '%s' "${NAMES[$1]}" | tr -cs 'A-Za-z0-9.-' '_')"; }
run_check() {  # run_check I: check I's command into its log, then "exit-code seconds" into the log's .result
    local i=$1 log code seconds start
    log=$(log_of "$i") start=$(date +%s%N)
    case ${COMMANDS[$i]} in
        compare_weights*) eval "${COMMANDS[$i]}" > "$log" 2>&1 ;;  # a shell function: not under timeout
        *) eval "timeout $TIMEOUT ${COMMANDS[$i]}" > "$log" 2>&1 ;;
    esac
    code=$?
    seconds=$(awk "BEGIN {printf \"%.1f\", ($(date +%s%N) - $start) / 1e9}")
    echo "$code $seconds" > "$log.result"
    if [ "$code" = 0 ]; then code=ok; else code="FAIL ($code)"; fi
    echo "gpu_check: ${NAMES[$i]}: $code, $seconds s" >&2  # as it ends: a run stopped half-way shows what it did
}
is_run() { case ${COMMANDS[$1]} in lightfed*) return 0 ;; *) return 1 ;; esac; }
for i in "${!NAMES[@]}"; do
    is_run "$i" || continue
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    run_check "$i" &
done
wait
for i in "${!NAMES[@]}"; do
    is_run "$i" || run_check "$i"
done
ROWS=() FAILED=0
for i in "${!NAMES[@]}"; do
    log=$(log_of "$i")
    read -r code seconds < "$log.result"
    if [ "$code" = 0 ]; then result=ok; else result="FAIL ($code)"; FAILED=$((FAILED + 1)); fi
    detail=$(grep "^test set, final global model" "$log" | tail -n 1 | cut -d ';' -f 1)
    [ -n "$detail" ] || detail=$(grep -v '^\s*$' "$log" | tail -n 1)
    ROWS+=("| ${NAMES[$i]} | $result | $seconds | ${detail//|/\\|} |")
done
echo
"$PYTHON" -c "import torch; print(f'{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}')"
echo "| check | result | seconds | detail |"
echo "|---|---|---:|---|"
printf '%s\n' "${ROWS[@]}"
echo "logs: $OUT/logs"
[ "$FAILED" = 0 ]
