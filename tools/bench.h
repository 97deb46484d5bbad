/* bench: the contract between personaplex-bench's driver (bench.c) and its modes.
 *
 * Each mode is a main-like function in its own file, tools/bench_<mode>.c, that parses its own
 * options (argv[0] is the mode name) and prints its figures on stdout; 0 on success. The
 * build adds tools/bench_codec.c, tools/bench_lm.c, tools/bench_frame.c, tools/bench_batch.c and tools/bench_attn.c
 * when they exist and defines PP_BENCH_<MODE> so the driver lists them. */
#ifndef PP_TOOLS_BENCH_H
#define PP_TOOLS_BENCH_H

#include <stdio.h>

int bench_gemv(int argc, char **argv);  /* tools/bench_gemv.c: GEMV per weight format */
int bench_codec(int argc, char **argv); /* tools/bench_codec.c */
int bench_lm(int argc, char **argv);    /* tools/bench_lm.c */
int bench_batch(int argc, char **argv); /* tools/bench_batch.c: sessions advancing together */
int bench_frame(int argc, char **argv); /* tools/bench_frame.c: a whole frame on a backend */
int bench_attn(int argc, char **argv);  /* tools/bench_attn.c: attention over KV rings, one or many rows */

/* Set by the driver when a mode's options include -h or --help. A mode prints its usage text to
 * bench_usage_stream() and returns bench_usage_status(): stdout and 0 for that request, stderr and
 * 2 (a usage error) otherwise. */
extern int bench_help_asked;
FILE *bench_usage_stream(void);
int bench_usage_status(void);
/* Monotonic seconds. */
double bench_now(void);
/* Sorts n samples ascending (for medians and percentiles). */
void bench_sort(double *v, int n);
/* The p quantile (0 < p <= 1) of n >= 1 samples sorted ascending, by nearest rank: the smallest
 * sample with at least p·n of the samples at or below it (p90 of ten samples is the ninth, not the
 * largest). In the header so that tests/test_bench_stats.c checks it without the driver's main. */
static inline double bench_nearest_rank(const double *sorted, int n, double p) {
    int rank = 1;
    while (rank < n && rank < p * n - 1e-9) rank++; /* the least rank >= p·n, tolerant of p·n's rounding */
    return sorted[rank - 1];
}
/* memcpy bandwidth over buffers far larger than any cache, bytes read + written per second
 * (GB/s), best of 5; 0 without memory for the buffers. */
double bench_memcpy_gbps(void);
/* The CPU backend on `threads` threads (0: all) with the machine's memcpy bandwidth measured
 * beside it (*bw, GB/s); NULL after printing why it could not be created. */
struct pp_backend *bench_cpu_backend(int threads, double *bw);
/* A backend's own copy bandwidth (device memory on a GPU), bytes read + written per second
 * (GB/s), best of 5 over 256 MB; 0 without memory for the buffers. */
double bench_backend_copy_gbps(struct pp_backend *be);
/* The backend named `device` ("cpu": bench_cpu_backend) with its copy bandwidth (*bw: memcpy's on
 * the CPU, bench_backend_copy_gbps on a device); NULL after printing why it could not be created. */
struct pp_backend *bench_backend(const char *device, int threads, double *bw);

/* ---- device traffic and the H100 estimate (frame and batch modes) ----
 * Where a backend counts device memory traffic (its device_traffic op: the CUDA emulation), the
 * modes print the bytes and the time an H100 would take by this model (issue 25): each kernel
 * takes max(bytes / 3.0 TB/s, warp instructions / (132 SMs x 4 per clock x 1.755 GHz)), and each
 * node 1.3 us more. The emulation counts no instructions: a GEMV (a kernel whose name starts
 * with pk_gemv) issues the bytes it reads times its weight format's warp instructions per byte
 * at its number of inputs (bench_gemv_instr_per_byte; one that prepares its inputs in every
 * block, more: bench.c's self_prep_instr_per_byte), the tensor-core product of more inputs (pk_gemm_tc) the same at
 * its own rate (bench_gemm_tc_instr_per_byte; the bytes include its inputs', about a fifth more
 * than the weights' at 64 inputs of 4096), the integer tensor-core product of NF2 and INT4
 * (pk_gemm_int) at its tile's (bench_gemm_int_instr_per_byte); every other kernel, copy and fill
 * counts as memory-bound. */
#define BENCH_KERNELS 48
typedef struct bench_kernel {
    const char *name;
    double launches, read, written, s; /* bytes; s: its part of the estimate, seconds */
} bench_kernel;
typedef struct bench_traffic {
    double read, written, s; /* all names together */
    int n;
    bench_kernel k[BENCH_KERNELS]; /* by name; the last also takes every name past the others */
} bench_traffic;
double bench_gemv_instr_per_byte(int fmt, int inputs); /* inputs: 1..8 (the kernel instance's) */
double bench_gemm_tc_instr_per_byte(int fmt); /* fmt: a pp_wformat */
double bench_gemm_int_instr_per_byte(int fmt, int inputs); /* NF2, INT4; inputs: any */
/* Starts counting, in device memory allocated from then on: 1 where be counts traffic, else 0. */
int bench_traffic_start(struct pp_backend *be);
/* Adds the work be ran since the previous call to t (NULL: drops it), GEMVs at format fmt's rate
 * for products of `inputs` inputs. */
void bench_traffic_take(struct pp_backend *be, int fmt, int inputs, bench_traffic *t);
/* out = ka·a + kb·b, totals and names alike (out may be a or b): fits and differences of runs. */
void bench_traffic_mix(bench_traffic *out, const bench_traffic *a, double ka, const bench_traffic *b, double kb);
/* Nodes and device traffic (t, where be counts it) of one codec frame, encode and decode, of n
 * conversations in one batch (tools/bench_codec.c), on random weights of the released Mimi's
 * shapes, after the frames that start the rows and record the calls; *weights: their bytes;
 * *ms: the median ms of `timed` more such frames, encode + decode (0 when timed is 0). */
int bench_codec_count(struct pp_backend *be, int n, int timed, double *nodes, double *ms, bench_traffic *t,
                      double *weights, char *err);
/* One kernel's part of the estimate, seconds: name's rate (fmt, inputs) on its bytes. */
double bench_kernel_s(const char *name, int fmt, int inputs, double read, double written);
/* The estimate in seconds: t's kernels plus 1.3 us per node. */
double bench_estimate_s(const bench_traffic *t, double nodes);
/* A line per name (launches, MB read and written, estimated us), the costliest first. */
void bench_traffic_print(const bench_traffic *t);

#endif
