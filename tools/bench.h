/* bench: the contract between personaplex-bench's driver (bench.c) and its modes.
 *
 * Each mode is a main-like function in its own file, tools/bench_<mode>.c, that parses its own
 * options (argv[0] is the mode name) and prints its figures on stdout; 0 on success. The
 * build adds tools/bench_codec.c, tools/bench_lm.c, tools/bench_frame.c, tools/bench_batch.c and tools/bench_attn.c
 * when they exist and defines PP_BENCH_<MODE> so the driver lists them. */
#ifndef PP_TOOLS_BENCH_H
#define PP_TOOLS_BENCH_H

int bench_gemv(int argc, char **argv);  /* tools/bench_gemv.c: GEMV per weight format */
int bench_codec(int argc, char **argv); /* tools/bench_codec.c */
int bench_lm(int argc, char **argv);    /* tools/bench_lm.c */
int bench_batch(int argc, char **argv); /* tools/bench_batch.c: sessions advancing together */
int bench_frame(int argc, char **argv); /* tools/bench_frame.c: a whole frame on a backend */
int bench_attn(int argc, char **argv);  /* tools/bench_attn.c: CPU attention over a KV ring */

/* Monotonic seconds. */
double bench_now(void);
/* Sorts n samples ascending (for medians and percentiles). */
void bench_sort(double *v, int n);
/* memcpy bandwidth over buffers far larger than any cache, bytes read + written per second
 * (GB/s), best of 5; 0 without memory for the buffers. */
double bench_memcpy_gbps(void);
/* The CPU backend on `threads` threads (0: all) with the machine's memcpy bandwidth measured
 * beside it (*bw, GB/s); NULL after printing why it could not be created. */
struct pp_backend *bench_cpu_backend(int threads, double *bw);
/* A backend's own copy bandwidth (device memory on a GPU), bytes read + written per second
 * (GB/s), best of 5 over 256 MB; 0 without memory for the buffers. */
double bench_backend_copy_gbps(struct pp_backend *be);

#endif
