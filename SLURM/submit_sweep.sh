#!/bin/bash
# Submits a `lightfed compare` plan as a SLURM job array (one task per run, SLURM/sweep_array.sbatch) and a job
# that builds the table and the plot (lightfed compare --collect) once every task has ended.
#
#   SLURM/submit_sweep.sh COMPARE_ARGS...
#   SLURM/submit_sweep.sh --base configs/digits/base.yaml \
#       --configs configs/digits/fedavg.yaml configs/digits/scaffold.yaml --seeds 0 1 2 --out runs/cmp
#   MAX_PARALLEL=8 SBATCH_ARGS="--partition=gpu --time=8:00:00" SLURM/submit_sweep.sh ...
#
# Run it from the repository root. Environment:
#   VENV          virtual environment holding lightfed (default .venv; VENV= when it is on PATH)
#   MAX_PARALLEL  at most this many tasks at a time (default: no limit)
#   SBATCH_ARGS   extra sbatch options for the array and the collect job, e.g. "--partition=gpu --account=me"
#   COLLECT_ARGS  extra sbatch options for the collect job only (they win over SBATCH_ARGS)
# Prints the two job ids; the collect job's log is slurm-lightfed-collect-<id>.out.
set -eo pipefail
here=$(cd "$(dirname "$0")" && pwd)
VENV=${VENV-.venv}
if [ -n "$VENV" ]; then source "$VENV/bin/activate"; fi
set -u
[ $# -gt 0 ] || { echo "usage: SLURM/submit_sweep.sh COMPARE_ARGS... (see lightfed compare --help)" >&2; exit 2; }
python=$(command -v python)
compare=("$python" -m lightfed.experiments.compare)

runs=$("${compare[@]}" "$@" --list | wc -l)   # also checks every run's arguments (stops here if one is wrong)
[ "$runs" -gt 0 ] || { echo "submit_sweep.sh: the plan has no runs" >&2; exit 1; }
# shellcheck disable=SC2086  # SBATCH_ARGS and COLLECT_ARGS are lists of options
array=$(VENV="$VENV" sbatch --parsable --array="0-$((runs - 1))${MAX_PARALLEL:+%$MAX_PARALLEL}" \
    ${SBATCH_ARGS:-} "$here/sweep_array.sbatch" "$@")
array=${array%%;*}
# shellcheck disable=SC2086
collect=$(sbatch --parsable --job-name=lightfed-collect --ntasks=1 --dependency="afterany:$array" \
    ${SBATCH_ARGS:-} --output=slurm-%x-%j.out ${COLLECT_ARGS:-} \
    --wrap="$(printf '%q ' "${compare[@]}" "$@" --collect)")
collect=${collect%%;*}
echo "array job $array: $runs runs (tasks 0-$((runs - 1))); collect job $collect (after all of them)"
