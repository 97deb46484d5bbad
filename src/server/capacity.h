/* capacity: does the model, with one KV cache per conversation, fit the device?
 *
 * Run once at start-up, after the backend is created and before the weights load, so a
 * machine that is too small is refused with numbers instead of failing mid-load (or, on
 * the CPU, swapping in the middle of conversations). The estimate is the checkpoint and
 * Mimi file sizes (weights stay in their stored format on every backend) plus, per
 * conversation, the temporal transformer's K and V rings in the chosen KV format
 * (pp_lm_ctx_bytes: 2 x layers x context x dim values, int8's scales included), and a
 * fixed allowance for the codec state, activations and the backend's workspace. It is
 * compared with the GPU's free memory (backend mem_info, or the CUDA runtime) or, on the
 * CPU backend, what the host lets the process take (base/hostmem.h: MemAvailable within its
 * cgroup's limit). */
#ifndef PP_SERVER_CAPACITY_H
#define PP_SERVER_CAPACITY_H

#include <stdint.h>

#include "backend/backend.h"
#include "model/lm_catalog.h"

/* Per-conversation allowance beyond the KV rings: Mimi streaming state, depformer caches,
 * activations (each a few MB; 64 MiB covers them with room). */
#define CAPACITY_SESSION_EXTRA (64ull << 20)
/* One-off allowance: backend workspace, cuBLAS handles, the tokenizer; at most the weights' own
 * size, since the workspace scales with the model (the demo's needs a few MB). */
#define CAPACITY_FIXED_EXTRA (512ull << 20)
/* On an integrated GPU (one DRAM for CPU and GPU): what the OS, its services and the server's
 * own host side keep for themselves (a headless JetPack system uses about 1 GiB). */
#define CAPACITY_OS_RESERVE (3ull << 29)

/* The prompt cache's bytes for --prompt-cache-mb mb when the process may still take available
 * bytes: at most a quarter of them, in whole MiB (in a small container the default 1 GiB would
 * leave no room for conversations, or bring the OOM killer as it fills). */
size_t capacity_prompt_cache(int mb, uint64_t available);
/* The one-off allowance beside weights bytes of weights. */
uint64_t capacity_fixed_extra(uint64_t weights);
/* Conversations that fit: (available - weights - fixed) / per_session, clamped at 0. */
int capacity_sessions_fit(uint64_t available, uint64_t weights, uint64_t per_session);

/* Bytes of one conversation's KV rings in format kv for the LM whose checkpoint is `weights` (its
 * config.json beside it, else the PersonaPlex-7B shape); *context gets the ring length. */
int capacity_kv_bytes(const char *weights, pp_kv_format kv, uint64_t *out, int *context, char *err);

/* Logs the device, its memory and the plan. With enforce, PP_EFULL when max_sessions do
 * not fit; err then gives the numbers and what would fit. */
int capacity_check(pp_backend *be, const char *weights, const char *mimi, pp_kv_format kv, int max_sessions,
                   int enforce, char *err);
/* The same for a dense checkpoint quantized while it loads (quantize not NULL): its weights count
 * at their quantized size. */
int capacity_check_quantized(pp_backend *be, const char *weights, const char *mimi, const pp_lm_quantize *quantize,
                             pp_kv_format kv, int max_sessions, int enforce, char *err);

#endif
