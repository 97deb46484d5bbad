#!/usr/bin/env bash
# gpu-check: everything that needs an NVIDIA GPU, in one run, on any machine that has one.
#   1. builds with CUDA in build-gpu/ (for this GPU's architecture only, unless PP_CUDA_ARCHS is set)
#   2. test_backend_parity: every backend operation, CPU against CUDA
#   3. every golden case (tests/data/golden, and heldout/) with --device cuda, and lm-nf2's prompts
#      also as the prompt cache runs them (batched prefill: a conversation's frames in one pass)
#   4. personaplex-bench gemv on the GPU (each format on the real shapes, 1, 4 and 64 inputs, the
#      last again without the tensor-core product's L1 requests ahead, PP_CUDA_IMMA_L1_AHEAD=0), and
#      personaplex-bench frame on the GPU: all 32 layers, each weight format, contexts 100 and
#      3000, then the int8 KV cache on NF2 (with and without programmatic dependent launch, and
#      the emulation's node and byte count and H100 estimate of that frame beside it);
#      the codec per frame; the batched tick at 1-64 conversations at context 3000, timed on
#      synthetic models of 1 and 2 layers and extrapolated to the real 32 + 6 (so the models
#      are written in seconds; about 130 s on an H200), then at 1 and 64 with the batch's codec,
#      last again without the integer tensor cores (PP_CUDA_IMMA_MIN=0); the batch's attention
#      alone over 1, 8 and 64 conversations' rings, with and without int8's loads ahead
#      (PP_CUDA_ATTN_AHEAD=0)
#   5. personaplex-loadtest: 64 conversations through the server on this GPU over loopback, on
#      WEIGHTS=FILE (the real model), else on the demo model of the released shapes (random NF2
#      weights, written in seconds: the same work as model-turbo2bit.safetensors), for
#      LOADTEST_SECONDS (default 300); the server's tick times are reported for the whole run and
#      from 245 s on, when every conversation's ring holds the full context (3000 frames of
#      80 ms, prompts included, after its handshake); the server's start-up calibration is in its log
# The steps run in the order of what they tell: correctness, the frame, the batch and the load
# test, then the variants. Each row is printed as its step ends, the whole table and the
# benchmarks' output at the end; logs are in build-gpu/gpu-check/.
#   tools/gpu-check.sh                 FRAMES=N (default 50) frames per benchmark row
#   PREBUILT=1 tools/gpu-check.sh      use build-gpu/ as it is (built on another machine with
#                                      -DPP_CUDA_ARCHS for this GPU, e.g. unpacked from
#                                      tools/gpu-bundle.sh's bundle): a GPU host without the
#                                      server's -dev packages can still run every check; it
#                                      stops first if a library they load is missing here
#   LOADTEST_SECONDS=S (default 300)   length of the 64-conversation load test
#   STEP_TIMEOUT=S (default 600)       seconds before a step is stopped and marked FAIL (124)
#   DEADLINE=S                         start no step after S seconds (a lent GPU's minutes): a
#                                      step gets at most the time left, the rest are SKIP (time)
#   STEPS=REGEX                        run only the steps whose names match (grep -E; the build
#                                      always runs), e.g. STEPS='parity|loadtest' for the
#                                      64-conversation load test within a lent GPU's 15 minutes
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/script-help.sh" # -h/--help: the comment above, exit 0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-gpu"
logs="$build/gpu-check"
frames="${FRAMES:-50}"
loadtest_seconds="${LOADTEST_SECONDS:-300}"
full_context_s=245 # 3000 frames of 80 ms (fewer after the prompts) plus the handshakes
loadtest_args=(--clients 64 --seconds "$loadtest_seconds")
[ "$loadtest_seconds" -gt $((full_context_s + 10)) ] && loadtest_args+=(--ticks-from "$full_context_s")
step_timeout="${STEP_TIMEOUT:-600}"
started=$(date +%s)
rows=()

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-check: no NVIDIA GPU visible (nvidia-smi -L fails); nothing to check here" >&2
    exit 77
fi
nvidia-smi -L
if [ -z "${PP_CUDA_ARCHS:-}" ]; then
    # compute capability "9.0" -> "90": one architecture compiles much faster than the list
    PP_CUDA_ARCHS="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')"
fi
mkdir -p "$logs"

# step NAME LOG COMMAND...: runs the command, records PASS / FAIL / SKIP and seconds, prints the
# row. Under DEADLINE a step gets at most the time left, and none once it is spent; under STEPS
# only the steps it matches run.
step() {
    local name="$1" log="$2" t0 rc status limit="$step_timeout" left
    shift 2
    t0=$(date +%s.%N)
    if [ -n "${DEADLINE:-}" ]; then
        left=$((started + DEADLINE - $(date +%s)))
        [ "$left" -lt "$limit" ] && limit=$left
    fi
    if [ -n "${STEPS:-}" ] && [[ $name != build* ]] && ! grep -qE -- "$STEPS" <<<"$name"; then
        echo "not run: STEPS=$STEPS does not match it" >"$log"
        rc=77 status="SKIP (STEPS)"
    elif [ "$limit" -le 0 ]; then
        echo "not run: DEADLINE=$DEADLINE s was reached" >"$log"
        rc=77 status="SKIP (time)"
    else
        timeout "$limit" "$@" >"$log" 2>&1
        rc=$?
        case $rc in 0) status=PASS ;; 77) status=SKIP ;; *) status="FAIL ($rc)" ;; esac
    fi
    rows+=("$(printf '%-52s %-12s %7.1f s   %s' "$name" "$status" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" \
        "${log#"$root"/}")")
    echo "${rows[-1]}"
    return $rc
}

# frame_int8kv LABEL [VAR=VALUE...]: the NF2 frame with the int8 KV cache under those settings,
# logged as bench-frame-int8kv-LABEL.log (LABEL empty: the defaults, bench-frame-int8kv.log)
frame_int8kv() {
    local label="$1"
    shift
    step "bench frame (nf2; int8 KV${*:+; $*})" "$logs/bench-frame-int8kv${label:+-$label}.log" \
        env "$@" "$build/personaplex-bench" frame --device cuda --frames "$frames" --formats nf2 --kv int8
}

# gemv_batch N [LABEL VAR=VALUE...]: every format's products of N inputs on the real shapes, logged
# as bench-gemv-N[-LABEL].log
gemv_batch() {
    local batch="$1" label="${2:-}"
    shift $(($# > 1 ? 2 : 1))
    step "bench gemv (batch $batch${*:+; $*})" "$logs/bench-gemv-$batch${label:+-$label}.log" \
        env "$@" "$build/personaplex-bench" gemv --device cuda --batch "$batch" --seconds 0.3 \
        --formats bf16,nf2,int4,nf4,int8,q4_k
}

# attn_int8kv LABEL [VAR=VALUE...]: the same for the attention of 1, 8 and 64 conversations, logged
# as bench-attn[-LABEL].log
attn_int8kv() {
    local label="$1"
    shift
    step "bench attn (int8 KV, 1 / 8 / 64 conversations${*:+; $*})" "$logs/bench-attn${label:+-$label}.log" \
        env "$@" bash -c 'for rows in 1 8 64; do "$1/personaplex-bench" attn --device cuda --rows $rows \
            --layers 8 --kv int8 --contexts 1000,3000 --frames 9 || exit; done' _ "$build"
}

if [ "${PREBUILT:-0}" = 1 ]; then
    [ -x "$build/personaplex-golden" ] || { echo "gpu-check: PREBUILT=1 but $build has no personaplex-golden" >&2; exit 1; }
    # The bundle leaves cuBLAS to this host's toolkit (tools/gpu-bundle.sh): one of another CUDA
    # major version would fail every step with exit status 127 and the reason only in its log.
    missing="$(for program in "$build"/personaplex-* "$build"/test_backend_*; do
        [ -x "$program" ] && ldd "$program" 2>/dev/null | awk -v p="${program##*/}" '/not found/ { print "  " p ": " $1 }'
    done)"
    if [ -n "$missing" ]; then
        echo "gpu-check: PREBUILT=1 but these libraries are not on this host (install the CUDA toolkit the bundle was built with):" >&2
        echo "$missing" >&2
        exit 1
    fi
    # a tools/gpu-bundle.sh bundle: its programs look for the test data and the web UI in the
    # source path they were built in
    if [ -f "$build/source-root" ]; then
        built_in="$(cat "$build/source-root")"
        if [ ! -e "$built_in" ]; then mkdir -p "$(dirname "$built_in")" && ln -s "$root" "$built_in"; fi
    fi
elif ! step "build (sm_$PP_CUDA_ARCHS)" "$logs/build.log" bash -c \
    "cmake -S '$root' -B '$build' -DPP_CUDA=ON -DPP_CUDA_ARCHS='$PP_CUDA_ARCHS' && cmake --build '$build' -j$(nproc)"; then
    printf '%s\n' "${rows[@]}"
    echo "gpu-check: build failed, see $logs/build.log" >&2
    exit 1
fi
step "test_backend_parity (CPU vs CUDA)" "$logs/parity.log" "$build/test_backend_parity"
step "test_backend_sample" "$logs/sample.log" "$build/test_backend_sample"
for dir in "$root"/tests/data/golden/lm-* "$root"/tests/data/golden/mimi-* "$root"/tests/data/golden/heldout/*/; do
    [ -d "$dir" ] || continue
    name="$(basename "$dir")"
    step "golden $name --device cuda" "$logs/golden-$name.log" "$build/personaplex-golden" "$dir" --device cuda
done
step "golden lm-nf2 --device cuda --prompt-cache" "$logs/golden-lm-nf2-prefill.log" "$build/personaplex-golden" \
    "$root/tests/data/golden/lm-nf2" --device cuda --prompt-cache
gemv_batch 1
frame_int8kv ""
step "bench batch (nf2, int8 KV, n = 1..64, context 3000)" "$logs/bench-batch.log" \
    "$build/personaplex-bench" batch --device cuda --format nf2 --kv int8 --batches 1,8,32,64 --ticks "$frames" \
    --context 3000 --layers 32 --dep-layers 6 --extrapolate
# the same tick with the batch's Mimi encode and decode (the released codec, f32 weights): the
# whole pass a server's engine runs every 80 ms
step "bench batch with the codec (nf2, int8 KV, n = 1 / 64)" "$logs/bench-batch-codec.log" \
    "$build/personaplex-bench" batch --device cuda --format nf2 --kv int8 --batches 1,64 --ticks "$frames" \
    --context 3000 --layers 32 --dep-layers 6 --extrapolate --codec
# the batched tick's attention alone: 1, 8 and 64 conversations' int8 rings (8 layers each, so 64
# conversations' fit an 80 GB card), read at what bandwidth; then without the loads ahead (attn.cuh):
# what they gain on this GPU
attn_int8kv ""
attn_int8kv noahead PP_CUDA_ATTN_AHEAD=0
if [ -n "${WEIGHTS:-}" ]; then
    step "loadtest (64 conversations, $(basename "$WEIGHTS"))" "$logs/loadtest.log" bash -c '
        port=$((20000 + RANDOM % 20000))
        "$1/personaplex-server" --weights "$2" --host 127.0.0.1 --port "$port" --no-tls --max-sessions 64 \
            --state-dir "$3/loadtest-state" >"$3/loadtest-server.log" 2>&1 &
        server=$!
        for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
        "$1/personaplex-loadtest" --port "$port" "${@:4}"
        rc=$?
        kill "$server"; wait "$server"
        exit $rc' _ "$build" "$WEIGHTS" "$logs" "${loadtest_args[@]}"
else
    step "loadtest (64 conversations, demo model of the released shapes)" "$logs/loadtest.log" \
        "$build/personaplex-loadtest" --server "$build/personaplex-server" --server-arg --demo-size \
        --server-arg released "${loadtest_args[@]}"
fi
step "bench codec (Mimi encode + decode)" "$logs/bench-codec.log" \
    "$build/personaplex-bench" codec --device cuda --frames "$frames"
gemv_batch 4
gemv_batch 64
# the same without the tensor-core product's activations asked of L1 ahead (gemm_int.cuh): what
# that gains on this GPU
gemv_batch 64 nol1ahead PP_CUDA_IMMA_L1_AHEAD=0
step "bench frame (nf2,int4,nf4,bf16; f32 KV)" "$logs/bench-frame.log" \
    "$build/personaplex-bench" frame --device cuda --frames "$frames" --formats nf2,int4,nf4,bf16
# the same without programmatic dependent launch: what it gains on this GPU
frame_int8kv nopdl PP_CUDA_PDL=0
# the same with the opt-in fusions (cuda.c), each alone and both: the depformer's products
# preparing their inputs in their own blocks (one launch instead of two, redundant work in
# every block), and products handing the next one its prepared input (126 fewer launches)
frame_int8kv selfprep PP_CUDA_SELF_PREP=1
frame_int8kv handover PP_CUDA_HAND_OVER=1
frame_int8kv fused PP_CUDA_SELF_PREP=1 PP_CUDA_HAND_OVER=1
# the batched tick without the integer tensor cores (NF2: the GEMV to 8 inputs, TF32 beyond):
# what they gain on this GPU
step "bench batch (as above; PP_CUDA_IMMA_MIN=0)" "$logs/bench-batch-noimma.log" \
    env PP_CUDA_IMMA_MIN=0 "$build/personaplex-bench" batch --device cuda --format nf2 --kv int8 --batches 1,8,32,64 \
    --ticks "$frames" --context 3000 --layers 32 --dep-layers 6 --extrapolate
# the emulation's count and H100 estimate of the same frame, to set beside the measurement (a
# PREBUILT copy may leave the emulated benchmark out: it runs on the CPU, as anywhere)
[ -x "$build/personaplex-bench-emu" ] && step "emulated estimate (nf2; int8 KV; context 3000)" \
    "$logs/bench-frame-emu.log" "$build/personaplex-bench-emu" frame --formats nf2 --kv int8 --frames 1 \
    --contexts 3000 --no-mimi --extrapolate

echo
printf '%-52s %-12s %9s   %s\n' "check" "result" "time" "log"
printf '%s\n' "${rows[@]}"
echo
echo "== parity: failures and totals =="
grep -E "^FAIL|passed" "$logs/parity.log" 2>/dev/null
echo "== gemv, frame, codec and batch benchmarks =="
cat "$logs/bench-gemv-1.log" "$logs/bench-gemv-4.log" "$logs/bench-gemv-64.log" "$logs/bench-gemv-64-nol1ahead.log" \
    "$logs/bench-frame-int8kv.log" \
    "$logs/bench-frame-int8kv-nopdl.log" "$logs/bench-frame-int8kv-selfprep.log" "$logs/bench-frame-int8kv-handover.log" \
    "$logs/bench-frame-int8kv-fused.log" "$logs/bench-frame-emu.log" "$logs/bench-frame.log" "$logs/bench-codec.log" \
    "$logs/bench-batch.log" "$logs/bench-batch-codec.log" "$logs/bench-batch-noimma.log" "$logs/bench-attn.log" \
    "$logs/bench-attn-noahead.log" \
    2>/dev/null
echo "== loadtest =="
grep -E '^(loadtest:|all |live:|joiners:|server)' "$logs/loadtest.log" 2>/dev/null
! printf '%s\n' "${rows[@]}" | grep -q FAIL
