#!/usr/bin/env bash
# kernel-report: registers, spills and shared memory of every kernel in kernels/, from ptxas,
# for the Jetson Orin (sm_87) and the H100/H200 (sm_90), without a GPU; and, from the PTX, the
# instructions each GEMV kernel's inner loop issues per weight byte.
#   tools/kernel-report.sh [ARCHS]     default "87 90"; NVCC=path overrides the compiler
# Prints one line per kernel and architecture: registers, spill bytes (stores + loads), stack,
# static shared memory, and the resident warps per SM the registers allow (64 at most). Exits 1
# when a GEMV kernel (pk_gemv*) or a tensor-core product (pk_gemm_tc*, pk_gemm_int*) spills: its inner loop
# must keep every accumulator and every load in flight in registers; and when a GEMV instance
# takes more than 128 registers (fewer resident warps than hide its loads' latency: issue #25);
# and when a self-preparing product (pk_gemv_int_self_kernel) declares more static shared memory
# than PK_SELF_STATIC_SMEM (kernels/gemv.cu), which its launches leave beside their dynamic
# shared memory: past 48 KB together a GPU refuses the launch;
# and when the one-input loop of NF2, INT4 or NF4 issues more than 0.25 warp instructions per
# weight byte (below). Exits 77 without nvcc; exits 1 when a file does not compile.
#
# Then, per GEMV instance (pk_gemv_kernel, pk_gemv_int_kernel, pk_gemv_q4k_kernel; not the scalar
# fallback), its inner loop in the PTX nvcc keeps while making the same cubin (PTX, not SASS: this
# toolkit has no cuobjdump or nvdisasm). The loop is the innermost one (a label a later bra jumps
# back to) that loads weights; per thread and iteration:
#   instr  PTX instructions (no labels, comments, directives) on the steady-state path from the
#          loop's label to its back edge: branches on w.fmt follow the template's format, a
#          64-bit division's 32-bit bypass is taken (the shapes fit 32 bits), any other
#          conditional branch is not taken (its block runs: all NB inputs live, not a row's tail,
#          NF4's nested absmax). body: all the loop's instructions, every path.
#   wB     weight bytes: the widths of the loop's loads whose address derives from pk_weight.data
#          (param_0+40, kernels/kernels.h; traced through the 64-bit registers), so activation,
#          plane and scale loads drop out whatever their width, and an unrolled loop counts each
#          copy's loads. Group scales are not counted; Q4_K's block headers (in .data) are.
#   thr/B  instr / wB. warp/B: a warp instruction covers 32 lanes consuming 32 wB, so
#          instr / (32 wB); at most 0.25 for NF2, INT4 and NF4 (issue #25's target, enforced).
#   div    divisions on the path: each is one PTX instruction but ~10-20 in SASS.
# PTX is virtual (ptxas fuses and+shift into lop3, folds address adds, drops movs), so the SASS
# figures differ by some tens of percent; spills are invisible here (see the first table).
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/script-help.sh" # -h/--help: the comment above, exit 0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
archs="${1:-87 90}"
if [ ! -x "$nvcc" ]; then
    echo "kernel-report: no nvcc (set NVCC or install the CUDA toolkit); nothing to report" >&2
    exit 77
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The inner-loop analysis of one PTX file (kept apart so the quoting stays plain awk).
cat >"$tmp/loop.awk" <<'AWK'
# One PTX file in; per GEMV entry out: name, path instructions, body instructions, weight bytes,
# divisions on the path, branches guessed, notes.
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
function has(set, t) { return index(" " set, " " t " ") > 0 } # set: "a b c "
function add(set, t) { return has(set, t) ? set : set t " " }
# bytes a load moves: vector count x the type's bits (ld.global.nc.v4.u32: 16)
function width(op,   v, t) {
    v = op ~ /\.v2\./ ? 2 : op ~ /\.v4\./ ? 4 : op ~ /\.v8\./ ? 8 : 1
    t = op; sub(/.*\./, "", t); gsub(/[^0-9]/, "", t)
    return v * t / 8
}
function cmp(c, x, y) {
    if (c == "eq") return x == y
    if (c == "ne") return x != y
    if (c == "lt" || c == "lo") return x < y
    if (c == "le" || c == "ls") return x <= y
    if (c == "gt" || c == "hi") return x > y
    if (c == "ge" || c == "hs") return x >= y
    return -1
}
# 1 or 0 where the predicate is known, -1 where not: w.fmt against a constant (w.fmt is the
# template's FMT), or the high 32 bits of a 64-bit division's operands against 0 (NVVM's
# bypass of div.s64; the shapes fit 32 bits, so the 32-bit side runs)
function evalp(p,   a, b) {
    if (!(p in pc) || (p in pmulti)) return -1
    a = pa[p]; b = pb[p]
    if (a == fmtreg && fmt >= 0 && b ~ /^-?[0-9]+$/) return cmp(pc[p], fmt, b + 0)
    if ((a in himask) && b == "0") return cmp(pc[p], 0, 0)
    return -1
}
function reset() { n = 0; fmtreg = ""; split("", ins); split("", lab); split("", orig); split("", pc); split("", pa); split("", pb); split("", pmulti); split("", himask) }
function analyze(   i, s, g, op, rest, dst, src, t, k, m, changed, nt, tk, j, h, wb, bh, bj, bw, nest, pos, steps, I, B, dv, unk, e, taken, body, note, nd, dl, x, sp) {
    fmt = -1
    if (match(name, /kernelILi[0-9]+E/)) fmt = substr(name, RSTART + 9, RLENGTH - 10) + 0
    if (name ~ /q4k/) fmt = 8
    # decode every statement: guard, opcode, destination registers, source text
    for (i = 1; i <= n; i++) {
        s = ins[i]; g = ""
        if (s ~ /^@/) { g = s; sub(/[ \t].*/, "", g); sub(/^@[^ \t]+[ \t]+/, "", s) }
        op = s; sub(/[ \t].*/, "", op); rest = trim(substr(s, length(op) + 1))
        G[i] = g; OP[i] = op; dst = ""; src = rest
        if (op !~ /^(st|bra|ret|exit|bar|membar|fence|red|prefetch|call|trap)(\.|$)/) {
            if (rest ~ /^\{/) { m = index(rest, "}"); dst = substr(rest, 2, m - 2); src = substr(rest, m + 1) }
            else { m = index(rest, ","); dst = m ? substr(rest, 1, m - 1) : rest; src = m ? substr(rest, m + 1) : "" }
        }
        gsub(/[ \t|]+/, ",", dst); D[i] = dst; S[i] = src
        WB[i] = 0; ADDR[i] = ""
        if (op ~ /^ld\./ && op !~ /^ld\.(param|shared|local|const)/ && match(src, /\[%rd[0-9]+/)) ADDR[i] = substr(src, RSTART + 1, RLENGTH - 1)
        TGT[i] = ""
        if (op ~ /^bra/) { t = src; gsub(/[ \t;]/, "", t); TGT[i] = t }
        if (op ~ /^setp\./) {
            nt = split(dst, tk, ","); split(op, x, "."); split(src, sp, ",")
            for (k = 1; k <= nt; k++) if (tk[k] != "") {
                if (tk[k] in pc) pmulti[tk[k]] = 1
                pc[tk[k]] = x[2]; pa[tk[k]] = trim(sp[1]); pb[tk[k]] = trim(sp[2])
            }
        }
        if (op ~ /^and\.b64/ && src ~ /-4294967296/) himask[dst] = 1
        if (op ~ /^ld\.param/ && match(src, /_param_[0-9]+(\+[0-9]+)?\]/)) {
            t = substr(src, RSTART + 7, RLENGTH - 8); if (t !~ /\+/) t = t "+0"
            nt = split(dst, tk, ",")
            if (t == "0+0") fmtreg = tk[1]
            for (k = 1; k <= nt; k++) orig[tk[k]] = add(orig[tk[k]], "p" t)
        }
    }
    # which kernel parameter (field) each 64-bit register derives from, over every definition
    # (loop-carried pointers have several): iterate to a fixed point
    do {
        changed = 0
        for (i = 1; i <= n; i++) {
            if (OP[i] ~ /^ld\./ || D[i] !~ /%rd/) continue
            s = S[i]; t = ""
            while (match(s, /%rd[0-9]+/)) { t = t " " orig[substr(s, RSTART, RLENGTH)]; s = substr(s, RSTART + RLENGTH) }
            nt = split(D[i], tk, ",")
            for (k = 1; k <= nt; k++) {
                if (tk[k] !~ /^%rd/) continue
                nd = split(t, dl, " ")
                for (j = 1; j <= nd; j++) if (dl[j] != "" && !has(orig[tk[k]], dl[j])) { orig[tk[k]] = add(orig[tk[k]], dl[j]); changed = 1 }
            }
        }
    } while (changed)
    for (i = 1; i <= n; i++) if (ADDR[i] != "" && has(orig[ADDR[i]], "p0+" dataoff)) WB[i] = width(OP[i])
    # back edges; the loop: the innermost one that loads weights
    bw = 0; bh = 0; bj = 0
    for (j = 1; j <= n; j++) {
        if (TGT[j] == "" || !(TGT[j] in lab) || lab[TGT[j]] > j) continue
        h = lab[TGT[j]]; wb = 0
        for (i = h; i <= j; i++) wb += WB[i]
        if (wb == 0) continue
        if (bj == 0 || (h >= bh && j <= bj) || (!(bh >= h && bj <= j) && wb > bw)) { bh = h; bj = j; bw = wb }
    }
    if (bj == 0) { print name, "-", "-", 0, 0, 0, "no-weight-loop"; return }
    nest = 0
    for (j = bh; j < bj; j++) if (TGT[j] != "" && (TGT[j] in lab) && lab[TGT[j]] >= bh && lab[TGT[j]] <= j) nest++
    # one steady-state iteration: from the loop's label to its back edge, branches decided as above,
    # any other conditional branch not taken (its guarded block runs: inputs live, not a row's tail)
    pos = bh; I = 0; B = 0; dv = 0; unk = 0; note = nest ? "nested-loop" : "-"
    for (steps = 0; steps < 100000; steps++) {
        I++; B += WB[pos]
        if (OP[pos] ~ /^(div|rem)\./) dv++
        if (pos == bj) break
        if (OP[pos] ~ /^(ret|exit)/ || pos >= n) { note = "left-loop"; break }
        if (TGT[pos] != "") {
            taken = 1
            if (G[pos] != "") {
                e = evalp(substr(G[pos], G[pos] ~ /^@!/ ? 3 : 2))
                if (e < 0) { unk++; taken = 0 } else taken = G[pos] ~ /^@!/ ? !e : e
            }
            if (taken) { pos = lab[TGT[pos]]; continue }
        }
        pos++
    }
    body = bj - bh + 1
    print name, I, body, B, dv, unk, note
}
/^[ \t]*(\.visible[ \t]+|\.weak[ \t]+)?\.entry[ \t]/ {
    name = $0; sub(/.*\.entry[ \t]+/, "", name); sub(/[ \t(].*/, "", name); inentry = 1; inbody = 0; reset(); next
}
inentry && /^\{/ { inbody = 1; next }
inentry && /^\}/ { if (name ~ /pk_gemv_(int_|q4k_)?kernel/) analyze(); inentry = 0; inbody = 0; next }
inbody {
    line = $0; sub(/\/\/.*/, "", line); line = trim(line)
    if (line == "") next
    if (line ~ /^[$A-Za-z_][$A-Za-z0-9_]*:$/) { sub(/:$/, "", line); lab[line] = n + 1; next }
    sub(/^\{/, "", line)
    np = split(line, parts, ";")
    for (q = 1; q <= np; q++) {
        p = trim(parts[q])
        while (p ~ /\}$/ && gsub(/\{/, "{", p) < gsub(/\}/, "}", p)) { sub(/\}$/, "", p); p = trim(p) }
        if (p == "" || p ~ /^\./) continue
        ins[++n] = p
    }
}
AWK

# Both architectures compile at once (CI has 2 cores); -keep leaves each file's PTX in the arch's
# directory, the input of the cubin the registers come from, so nothing compiles twice.
compile_arch() {
    local arch="$1" cu log
    mkdir -p "$tmp/$arch"
    for cu in "$root"/kernels/*.cu; do
        log="$tmp/$arch/$(basename "$cu").log"
        if ! "$nvcc" -arch="sm_$arch" -O3 -cubin -Xptxas -v -keep -keep-dir "$tmp/$arch" -I"$root/kernels" \
            -I"$root/src" -I"$root/include" "$cu" -o "$tmp/$arch/out.cubin" >"$log" 2>&1; then
            cat "$log" >&2
            echo "kernel-report: $cu does not compile for sm_$arch" >&2
            return 1
        fi
    done
}
pids=()
for arch in $archs; do
    compile_arch "$arch" &
    pids+=("$!")
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
[ "$failed" -eq 0 ] || exit 1

# what the self-preparing products' launches leave for their own __shared__ variables
self_static="$(sed -n 's/^#define PK_SELF_STATIC_SMEM (\(.*\))$/\1/p' "$root/kernels/gemv.cu")"
self_static=$((self_static))
printf '%-6s %-58s %5s %7s %6s %7s %6s\n' arch kernel regs spill stack smem warps
for arch in $archs; do
    # ptxas prints, per kernel: "Compiling entry function 'NAME'", then its stack and spill
    # line, then "Used N registers, ... N bytes smem".
    awk -v arch="$arch" '
        /Compiling entry function/ { match($0, /'"'"'[^'"'"']+'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2) }
        /bytes stack frame/ { stack = $1; spill = $5 + $9 }
        /Used [0-9]+ registers/ {
            regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
            smem = 0; if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART); sub(/ .*/, "", smem) }
            print arch, name, regs, spill, stack, smem
        }' "$tmp/$arch"/*.log
done | sort -u -k2,2 -k1,1 | while read -r arch name regs spill stack smem; do
    short="$(c++filt "$name" 2>/dev/null || echo "$name")"
    short="${short%%(*}"
    # 64K registers per SM, allocated per warp in units of 256 (8 per thread)
    per_thread=$(((regs + 7) / 8 * 8))
    warps=$((65536 / (per_thread * 32)))
    [ "$warps" -gt 64 ] && warps=64
    flag=""
    if [[ "$name" == *pk_gemv* || "$name" == *pk_gemm_* ]] && [ "$spill" -gt 0 ]; then
        flag="  <- spills"
        echo "$arch $short" >>"$tmp/bad"
    elif [[ "$name" == *pk_gemv* ]] && [ "$regs" -gt 128 ]; then
        flag="  <- > 128 registers"
        echo "$arch $short" >>"$tmp/bad"
    elif [[ "$name" == *pk_gemv_int_self_kernel* ]] && [ "$smem" -gt "$self_static" ]; then
        flag="  <- static smem > PK_SELF_STATIC_SMEM ($self_static)"
        echo "$arch $short" >>"$tmp/bad"
    fi
    printf 'sm_%-3s %-58.58s %5s %7s %6s %7s %6s%s\n' "$arch" "$short" "$regs" "$spill" "$stack" "$smem" "$warps" "$flag"
done

# ---- GEMV inner loops: instructions per weight byte ----
for arch in $archs; do
    for ptx in "$tmp/$arch"/*.ptx; do
        awk -v dataoff=40 -f "$tmp/loop.awk" "$ptx" | sed "s/^/$arch /"
    done
done | sort -u -k2,2 -k1,1 >"$tmp/loops"
echo
echo "GEMV inner loops (PTX, one thread, one iteration; warp/B = instr / (32 x wB); target <= 0.25 for NF2, INT4, NF4)"
# Short names: the format's name for the template's first argument. Q4_K's consumed bytes come
# from the source, not the loads: 8 lanes load the same block header, and an iteration's four
# blocks (its unroll) are 4 x 144 bytes of the file over 32 lanes, 18 a lane.
awk '
    BEGIN {
        split("F32 F16 BF16 NF2 INT4 NF4 Q4_0 Q8_0 Q4K INT8", f, " "); for (i in f) fname[i - 1] = f[i]
        printf "%-6s %-30s %6s %6s %4s %7s %7s %4s  %s\n", "arch", "kernel", "instr", "body", "wB", "thr/B", "warp/B", "div", "notes"
    }
    {
        arch = $1; m = $2; kern = m; sub(/^_Z[0-9]+/, "", kern); sub(/I.*/, "", kern)
        args = ""; t = m; sub(/^_Z[0-9]+[a-z_0-9]*I/, "", t)
        while (match(t, /^Li-?[0-9]+E/)) { a = substr(t, 3, RLENGTH - 3); t = substr(t, RLENGTH + 1); args = args (args == "" ? "" : ",") a }
        if (kern != "pk_gemv_q4k_kernel") { split(args, av, ","); sub(/^[0-9]+/, fname[av[1]], args) }
        short = kern "<" args ">"
        instr = $3; body = $4; wb = $5; div = $6; note = $8 # $7: branches the walk could not decide
        if (note == "-") note = ""
        mark = ""; if (kern == "pk_gemv_q4k_kernel") { note = "* loads " wb " B, 18 of them its own" (note == "" ? "" : "; " note); wb = 18; mark = "*" }
        if (instr == "-" || wb == 0) {
            printf "sm_%-3s %-30s %6s %6s %4s %7s %7s %4s  %s\n", arch, short, "-", "-", "-", "-", "-", "-", "no weight loop found"
            print "kernel-report: no loop of " short " (sm_" arch ") loads through pk_weight.data (param_0+40): has kernels.h changed?" >"/dev/stderr"
            next
        }
        if (note != "") note = "  " note
        printf "sm_%-3s %-30s %6d %6d %3d%1s %7.2f %7.3f %4d%s\n", arch, short, instr, body, wb, mark, instr / wb, instr / (32 * wb), div, note
    }' "$tmp/loops" | tee "$tmp/loop-table"

# One line per format: the one-input instance of the kernel the launcher takes (NF2, INT4 and NF4:
# the integer kernel; the float template is their fallback for other group sizes). The targeted
# formats come last so that tools/test.sh's tail of "^kernel-report" lines shows them.
echo "kernel-report: 1-input GEMV loops, warp instructions per weight byte (per thread in brackets), PTX;" \
    "target <= 0.25 for NF2, INT4, NF4 (issue #25)"
awk -v archs="$archs" '
    $2 ~ /<[A-Z0-9_]+,1,[0-9]+>$|^pk_gemv_q4k_kernel<1>$/ {
        k = $2; sub(/,.*/, "", k); sub(/>$/, "", k); wpb[$1, k] = $7; tpb[$1, k] = $6; full[$1, k] = $2
    }
    END {
        na = split(archs, a, " "); nf = split("F32 F16 BF16 INT8 Q4K NF4 INT4 NF2", f, " ")
        for (i = 1; i <= nf; i++) {
            kern = f[i] == "Q4K" ? "pk_gemv_q4k_kernel<1" : (f[i] ~ /^(NF2|INT4|NF4)$/ ? "pk_gemv_int_kernel<" : "pk_gemv_kernel<") f[i]
            line = ""; over = 0; known = 0; name = "-"
            for (j = 1; j <= na; j++) {
                key = "sm_" a[j] SUBSEP kern
                if (!(key in wpb)) { line = line sprintf("  sm_%s      -        ", a[j]); continue }
                line = line sprintf("  sm_%s %6.3f (%5.2f)", a[j], wpb[key], tpb[key]); name = full[key]; known = 1
                if (wpb[key] > 0.25) over = 1
            }
            target = f[i] ~ /^(NF2|INT4|NF4)$/ && known ? (over ? "  above target" : "  meets target") : ""
            fb = ""
            key = "sm_" a[na] SUBSEP "pk_gemv_kernel<" f[i]
            if (f[i] ~ /^(NF2|INT4|NF4)$/ && (key in wpb)) fb = sprintf("  (float template: %.3f)", wpb[key])
            printf "kernel-report: %-5s %-28s%s%s%s\n", f[i], name, line, target, fb
        }
    }' "$tmp/loop-table" | tee "$tmp/targets"

bad=0
if [ -s "$tmp/bad" ]; then
    echo "kernel-report: $(wc -l <"$tmp/bad") GEMV kernel instance(s) spill, pass 128 registers or pass" \
        "PK_SELF_STATIC_SMEM" >&2
    bad=1
else
    echo "kernel-report: no GEMV or tensor-core product kernel spills; every GEMV within 128 registers," \
        "self-preparing ones within ${self_static} bytes of static shared memory (sm_${archs// /, sm_})"
fi
if grep -q "above target" "$tmp/targets"; then
    echo "kernel-report: a one-input NF2, INT4 or NF4 loop issues more than 0.25 warp instructions per weight byte" >&2
    bad=1
fi
exit $bad
