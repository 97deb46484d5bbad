#!/usr/bin/env bash
# tools/bench-vs-ggml.sh with stand-ins for both sides (no ggml needed): each stand-in logs its
# call and prints a figure in the real program's format. Checks that the two sides' runs
# alternate (ours, ggml, ours, ggml, ...), so load that comes and goes meets both alike, that
# each side's figure is the best of its REPEAT runs, and the weights/s ratio that follows; then,
# under an affinity mask of one CPU, that ours runs as many threads as ggml would; with a ggml
# that fails, that the script says so and exits 1 after the rows it could not fill.
#   tests/bench_vs_ggml_order.sh SOURCE_DIR
set -euo pipefail

src="${1:?usage: bench_vs_ggml_order.sh SOURCE_DIR}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/ggml/build-bench/bin" "$tmp/build"
log="$tmp/calls"

# Both print a slower figure on their first run than on their second: the best must be taken.
cat >"$tmp/ggml/build-bench/bin/test-backend-ops" <<EOF
#!/bin/sh
echo ggml >>"$log"
us=\$( [ \$(grep -c ggml "$log") -eq 1 ] && echo 9000.00 || echo 4000.00 )
echo "  MUL_MAT(type_a=q2_K,type_b=f32,m=4096,n=1,k=14336):   10 runs - \$us us/run - 117 MFLOP/run - 29 GFLOPS"
EOF
cat >"$tmp/build/personaplex-bench" <<EOF
#!/bin/sh
echo ours >>"$log"
echo "\$*" >"$tmp/ours-args"
ms=\$( [ \$(grep -c ours "$log") -eq 1 ] && echo 8.000 || echo 2.000 )
echo "4096 x 14336                 nf2          16.5      \$ms      8.25      60%     29.36"
EOF
chmod +x "$tmp/ggml/build-bench/bin/test-backend-ops" "$tmp/build/personaplex-bench"

# One pair and one batch are enough: the script's loops are the same for every pair.
sed -e 's/^pairs=.*/pairs=("nf2 q2_K")/' -e 's/^batches=.*/batches=(1)/' "$src/tools/bench-vs-ggml.sh" >"$tmp/bench.sh"
cp "$src/tools/script-help.sh" "$tmp/" # what the script sources beside itself
out="$(REPEAT=3 bash "$tmp/bench.sh" "$tmp/ggml" "$tmp/build")"
echo "$out"
order="$(tr '\n' ' ' <"$log")"
[ "$order" = "ours ggml ours ggml ours ggml " ] || { echo "FAIL: runs in the order: $order"; exit 1; }
# best of three: ours 2 ms, ggml 4 ms; ratio of weights/s 2
echo "$out" | grep -qE '^nf2 +q2_K +1 +2\.000 +4\.000 .* 2\.00$' || { echo "FAIL: not the best figures"; exit 1; }
echo "ok: alternating runs, best figures, ratio 2.00"

# ggml runs a thread per online CPU whatever the affinity mask; ours must get as many under one
online="$(getconf _NPROCESSORS_ONLN)"
if command -v taskset >/dev/null && [ "$online" -gt 1 ]; then
    REPEAT=1 taskset -c 0 bash "$tmp/bench.sh" "$tmp/ggml" "$tmp/build" >/dev/null
    grep -q -- "--threads $online " "$tmp/ours-args" || { echo "FAIL: under taskset -c 0 ours ran: $(cat "$tmp/ours-args")"; exit 1; }
    echo "ok: $online threads on both sides under taskset -c 0"
fi

printf '#!/bin/sh\nexit 1\n' >"$tmp/ggml/build-bench/bin/test-backend-ops"
set +e
out="$(bash "$tmp/bench.sh" "$tmp/ggml" "$tmp/build" 2>&1)"
rc=$?
set -e
echo "$out"
[ "$rc" -eq 1 ] && echo "$out" | grep -q "no figure: ours '2.000', ggml ''" &&
    echo "$out" | grep -q 'bench-vs-ggml: 1 of 1 rows without a figure' || { echo "FAIL: a failing ggml went unreported (exit $rc)"; exit 1; }
echo "ok: a failing ggml is reported"
