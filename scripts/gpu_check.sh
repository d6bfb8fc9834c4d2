#!/usr/bin/env bash
# Everything that needs the GPU, in one call: the `gpu` tests (in parallel groups, since most of
# their time is compiling) and then the benchmarks one after another (timings must not share the
# GPU). Logs go to $LOGS (default ./gpu_logs); a summary line per log is printed at the end, and
# when $OUT is set (the device tool's return folder, which brings back few files) they are packed
# into $OUT/gpu_logs.tar.gz.
#
#   bash scripts/gpu_check.sh              # tests, sanitizer and every benchmark
#   bash scripts/gpu_check.sh tests        # only the tests
#   bash scripts/gpu_check.sh benches      # only the benchmarks (and the sanitizer)
#   LIMIT=200 bash scripts/gpu_check.sh tests   # seconds allowed to each test group
#   ONLY="tune tune_tir" bash scripts/gpu_check.sh tests      # some test groups
#   BENCHES="norms quantized" bash scripts/gpu_check.sh benches  # some benchmarks
set -uo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
LOGS=${LOGS:-gpu_logs}
LIMIT=${LIMIT:-300}
mkdir -p "$LOGS"
export TQDM_DISABLE=1
what=${1:-all}
only=${ONLY:-}   # ONLY="tune tune_more": run just these test groups

TEST_GROUPS=(
  "ctrl:tests/lang/test_control_flow_gpu.py tests/instructions/test_print_tensor.py tests/ir/test_printf.py tests/lang/test_grid.py tests/lang/test_instructions_gpu.py tests/lang/test_examples_gpu.py"
  "runtime:tests/lang/test_tilus_programs_gpu.py tests/utils tests/instructions/test_workspace.py tests/runtime"
  "matmul:tests/schedules/test_matmul.py tests/schedules/test_matmul_wgmma.py tests/schedules/test_matmul_tma.py tests/schedules/test_matmul_splitk.py tests/backend tests/intrin"
  "reduce:tests/instructions/test_reduce.py tests/instructions/test_reduce_dims.py tests/schedules/test_norms.py"
  "math:tests/schedules/test_softmax.py tests/schedules/test_elementwise.py tests/instructions/test_math.py tests/instructions/test_scan.py"
  "attention:tests/schedules/test_attention.py tests/schedules/test_attention_wgmma.py"
  "views:tests/instructions/test_views.py tests/instructions/test_shared_slices.py tests/instructions/test_item_ptr.py tests/instructions/test_async_copy.py tests/instructions/test_dot_split.py tests/instructions/test_scalar_memory.py tests/instructions/test_global_subview.py"
  "lowp:tests/instructions/test_lowp_gpu.py tests/schedules/test_quantized_placed_gpu.py"
  # (one process took more than 540 s over this file on the H100: three shards at once, TILUS_TEST_SHARD)
  "qmm@0/3:tests/schedules/test_quantized_matmul_gpu.py"
  "qmm@1/3:tests/schedules/test_quantized_matmul_gpu.py"
  "qmm@2/3:tests/schedules/test_quantized_matmul_gpu.py"
  "relax:tests/relax"
  "compile:tests/schedules/test_quantized_op_gpu.py"
  "tune:tests/tune/test_library_gpu.py tests/tune/test_tuned_matmul_gpu.py tests/tune/test_flushed_runner_gpu.py"
  "tune_tir:tests/tune/test_tir.py"
  "tune_more:tests/tune/test_attention_tune_gpu.py tests/tune/test_rpc_gpu.py"
)

if [[ $what == all || $what == tests ]]; then
  for group in "${TEST_GROUPS[@]}"; do
    name=${group%%:*}
    shard=""  # "name@i/n": the i-th of n shards of the group's tests (TILUS_TEST_SHARD, tests/conftest.py)
    if [[ $name == *@* ]]; then shard=${name#*@}; name=${name%%@*}; fi
    [[ -z $only || " $only " == *" $name "* ]] || continue
    files=()
    for f in ${group#*:}; do [[ -e $f ]] && files+=("$f"); done
    log="$LOGS/test_$name${shard:+_${shard%%/*}}.txt"
    # SIGINT first, so that pytest still prints its tracebacks and summary when time runs out
    TILUS_TEST_SHARD=$shard timeout -s INT -k 20 "$LIMIT" python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short \
      -rf "${files[@]}" > "$log" 2>&1 &
  done
  wait
fi

# name:seconds:command -- BENCHES="norms tuning" runs just these (one device call allows 600 s)
BENCH_LIST=(
  # (under memcheck quantized_matmul's kernels took more than 560 s at once: in two parts)
  "sanitize:300:compute-sanitizer --tool memcheck python3 scripts/sanitize_kernels.py others"
  "sanitize_u4:560:compute-sanitizer --tool memcheck python3 scripts/sanitize_kernels.py quantized uint4b"
  "sanitize_qmm:560:compute-sanitizer --tool memcheck python3 scripts/sanitize_kernels.py quantized uint8 uint3b uint6b uint2b"
  "matmul:300:python3 scripts/bench_matmul.py"
  "norms:300:python3 scripts/bench_norms.py"
  "attention:300:python3 scripts/bench_attention.py"
  "quantized:590:python3 scripts/bench_quantized.py"  # 14 shapes took 427 s on the H100; 16 now
  "tuning:560:python3 scripts/bench_tuning.py"
  "relax:400:python3 scripts/bench_relax.py"
  "overhead:120:python3 scripts/bench_overhead.py"
)
benches=${BENCHES:-}
if [[ $what == all || $what == benches ]]; then
  for bench in "${BENCH_LIST[@]}"; do
    name=${bench%%:*}; rest=${bench#*:}; seconds=${rest%%:*}; command=${rest#*:}
    [[ -z $benches || " $benches " == *" $name "* ]] || continue
    timeout -s INT -k 20 "$seconds" $command > "$LOGS/bench_$name.txt" 2>&1
  done
fi

for log in "$LOGS"/*.txt; do
  printf '%-28s %s\n' "$(basename "$log" .txt)" "$(tr '\r' '\n' < "$log" | grep -E 'passed|failed|FAILED|error|ERROR SUMMARY' | tail -1)"
done
if [[ -n ${OUT:-} ]]; then tar czf "$OUT/gpu_logs.tar.gz" -C "$LOGS" .; fi
