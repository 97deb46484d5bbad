/* personaplex.h: the engine's public C API, for programs that embed it instead of running
 * personaplex-server. This header is self-contained: it includes only the C library, and every
 * type an embedder holds is opaque (a pointer) except the plain settings structs below.
 *
 * Lifecycle (every call returns 0 or a negative PP_E* code and fills err[PP_ERR_LEN]):
 *
 *     pp_backend *be;   pp_backend_create("auto", 0, &be, err);      // CUDA if present, else CPU
 *     pp_model *m;      pp_model_open(be, &paths, &m, err);          // weights, codec, tokenizer
 *     pp_session_params p;  pp_params_defaults(&p);                  // voice, prompt, sampling
 *     pp_session *s;    pp_session_create(m, &p, max_prompt_tokens, &s, err);
 *     while ((rc = pp_session_prefill(s, err)) == 0) {}              // prompt phases, 32 frames a call
 *     for each 80 ms of microphone audio (PP_FRAME_SAMPLES samples at PP_SAMPLE_RATE):
 *         pp_session_step(s, pcm_in, pcm_out, piece, NULL, err);     // a frame + a text piece out
 *     pp_session_destroy(s); pp_model_close(m); pp_backend_destroy(be);
 *
 * To serve many conversations at once: pp_model_set_prompt_cache(m, bytes, err) before the
 * first session (sessions with the same voice and prompt then start in milliseconds), and per
 * 80 ms tick pp_session_batch_encode all sessions with a frame, one pp_session_batch_step over
 * them (a pp_session_batch from pp_session_batch_create), pp_session_batch_decode.
 * pp_demo_write makes a random model (tiny, or of the released shapes) to try the pipeline, or
 * measure a machine, without downloading weights.
 *
 * The engine's own modules include this header for these declarations (one place for each);
 * their internal headers are not part of the API. */
#ifndef PERSONAPLEX_H
#define PERSONAPLEX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==== errors ==== */
/* A function returns 0 on success or a negative PP_E* code, and on failure writes one line
 * into `char err[PP_ERR_LEN]` naming the file, tensor, key or parameter at fault. The library
 * never exits or aborts on bad input. */
#define PP_ERR_LEN 512

enum {
    PP_OK = 0,
    PP_EINVAL = -1,       /* bad argument or malformed input */
    PP_EIO = -2,          /* open/read/write/mmap failed */
    PP_ENOMEM = -3,       /* allocation failed */
    PP_EFORMAT = -4,      /* file content does not follow its format */
    PP_ENOTFOUND = -5,    /* a named tensor, key, voice or file is missing */
    PP_EUNSUPPORTED = -6, /* valid input we do not handle (dtype, option) */
    PP_EFULL = -7,        /* capacity reached (sessions, queue, prompt length) */
    PP_EDEVICE = -8,      /* accelerator error */
};

/* A short name for a code: "invalid input", "I/O error", ... */
const char *pp_strerror(int code);

/* ==== audio frames ==== */
/* The model's time step: the codec turns PP_FRAME_SAMPLES samples at PP_SAMPLE_RATE (80 ms)
 * into one column of codes, and the LM takes one step per column. */
#define PP_SAMPLE_RATE 24000
#define PP_FRAME_SAMPLES 1920

/* ==== backends ==== */
typedef struct pp_backend pp_backend;
/* CPU backend with n_threads threads (0: one per online CPU). */
int pp_backend_cpu_create(int n_threads, pp_backend **out, char *err);
/* CUDA backend on device `device`; PP_EUNSUPPORTED when built without CUDA or no GPU. */
int pp_backend_cuda_create(int device, pp_backend **out, char *err);
/* Picks by name ("cpu", "cuda", or "auto": CUDA when a GPU is present, else CPU). */
int pp_backend_create(const char *name, int n_threads, pp_backend **out, char *err);
void pp_backend_destroy(pp_backend *be);

/* Storage format of a conversation's KV cache. F32 is the reference; BF16 halves it; INT8 quarters
 * it with one scale per slot and head. */
typedef enum pp_kv_format { PP_KV_F32 = 0, PP_KV_BF16 = 1, PP_KV_INT8 = 2 } pp_kv_format;
/* "f32", "bf16", "int8": the names --kv-cache and the benchmarks use. */
const char *pp_kv_format_name(pp_kv_format kv);
/* The format called name; -1 for any other name. */
int pp_kv_format_parse(const char *name, pp_kv_format *out);

/* ==== conversation settings ==== */
/* The web client caps its textarea at 1000 characters; 4 UTF-8 bytes each is the worst case. */
#define PP_PARAMS_MAX_PROMPT 4096
/* A voice name: a stem of up to 64 bytes (what the voices directory lists), its longest suffix
 * (".embeddings.bin") and the NUL. */
#define PP_PARAMS_MAX_VOICE 80

typedef struct pp_session_params {
    char voice[PP_PARAMS_MAX_VOICE];            /* voice name, e.g. "NATF2" or "NATF2.pt" */
    char text_prompt[PP_PARAMS_MAX_PROMPT + 1]; /* UTF-8, not yet <system>-wrapped */
    float text_temperature;                     /* [0, 2]; 0 is greedy */
    int text_topk;                              /* [1, 32000] */
    float audio_temperature;                    /* [0, 2] */
    int audio_topk;                             /* [1, 2048] */
    uint64_t text_seed, audio_seed;
    int echo_cancel; /* echo_cancel=: 1 asks for it, 0 refuses it, -1 unset */
} pp_session_params;

/* The reference sampling (text 0.7 / top-25, audio 0.8 / top-250), voice "NATF2", an empty
 * prompt, the reference seed 42424242 for both streams, echo cancellation as the server says. */
void pp_params_defaults(pp_session_params *p);

/* Applies one decoded key=value pair (value already free of %XX and '+' escapes). Returns 0
 * when the pair was used, clamped or ignored (each logged), or PP_EFULL / PP_EINVAL with err
 * set when text_prompt or voice_prompt is unusable. */
int pp_params_set(pp_session_params *p, const char *key, const char *value, char *err);

/* Parses a raw application/x-www-form-urlencoded query ("a=1&b=x+y%21", no leading '?') of
 * len bytes and applies each pair with pp_params_set. Malformed escapes are errors only
 * inside text_prompt/voice_prompt; elsewhere the pair is logged and skipped. */
int pp_params_parse_query(pp_session_params *p, const char *query, size_t len, char *err);

/* ==== models and sessions ==== */
/* A pp_model holds what every conversation shares: the backend, the LM and Mimi weights, the
 * tokenizer, the voices directory, the KV format of new sessions, and optionally a prompt
 * cache. A pp_session holds one conversation's state: its LM state (KV caches, token ring,
 * sampling seed), its streaming Mimi state and its prompt schedule (voice prompt, 0.5 s of
 * silence, the <system>-wrapped text prompt, 0.5 s of silence: docs/model.md).
 *
 * Prompts: each pp_session_prefill call runs the next PP_SESSION_PREFILL_ROWS prompt frames as
 * one batched pass of the LM (so a scheduler can interleave them with other sessions' frames).
 * With a prompt cache (pp_model_set_prompt_cache) the first call looks for a conversation that
 * ran the same prompts (same model, KV format, voice file and prompt tokens) and copies its
 * state instead: the handshake then takes milliseconds. A session that ran its prompts stores
 * its state there for the next ones.
 *
 * Frames: pp_session_step turns 1920 input samples into 1920 output samples and at most one
 * text piece. It is three stages, which a server runs separately to batch sessions:
 * pp_session_encode (the session's Mimi), one pp_session_batch_step over every session with an
 * encoded frame (one LM tick, each weight read once for all), pp_session_decode. pp_session_step
 * is the one-session case; a batch gives each session exactly what stepping it alone gives (bit
 * for bit on the CPU backend). Sessions are independent: any number may exist, each used by
 * one thread at a time; nothing is allocated per frame. */

#define PP_SESSION_PIECE_MAX 64    /* bytes of one text piece, NUL included */
#define PP_SESSION_PREFILL_ROWS 32 /* prompt frames per pp_session_prefill call (one LM pass) */

typedef struct pp_model pp_model;
typedef struct pp_session pp_session;

typedef struct pp_model_paths {
    const char *weights;    /* LM checkpoint; a config.json beside it sets the architecture */
    const char *mimi;       /* Mimi weights; a mimi config.json may sit beside them */
    const char *tokenizer;  /* SentencePiece model */
    const char *voices_dir; /* NULL: only the built-in silence voice is available */
    const char *prompts;    /* NULL, or a system_prompts.bin: a text prompt "@NAME" selects its prompt NAME */
    const char *name;       /* reported by pp_model_name (e.g. "demo"); NULL: the weights' file name */
    /* NULL: the weights as stored. "nf2", "int4", "nf4" or "int8": a BF16/F16/F32 checkpoint is
     * quantized while it loads, tensor by tensor, exactly as personaplex-quantize would write it
     * (host memory stays near the quantized size plus one tensor); a quantized file is refused. */
    const char *quantize;
    int quantize_group; /* 0: the format's default (128 for nf2 and int8, 64 for int4 and nf4); -1: int8 per row */
    int quantize_temporal_only; /* only the temporal transformer's projections (bitsandbytes' 4-bit recipe) */
} pp_model_paths;

/* Loads the shared weights onto be (which must outlive the model). */
int pp_model_open(pp_backend *be, const pp_model_paths *paths, pp_model **out, char *err);
void pp_model_close(pp_model *m);
const char *pp_model_name(const pp_model *m);
const char *pp_model_backend(const pp_model *m);
pp_backend *pp_model_get_backend(const pp_model *m);
const char *pp_model_voices_dir(const pp_model *m);
/* Whether voice `name` of the voices directory is one a session can start with: found, readable,
 * of the LM's width, its token ring in the LM's vocabulary (PP_OK without a voices directory). A
 * server checks its default voice so at start, not at every conversation. */
int pp_model_check_voice(const pp_model *m, const char *name, char *err);
/* Whether text prompt text (a persona, or "@NAME" of the named prompts) is one a session can start
 * with: at most max_prompt_tokens tokens, a named prompt that exists. */
int pp_model_check_text_prompt(const pp_model *m, const char *text, int max_prompt_tokens, char *err);
/* The named system prompts ("@NAME" text prompts): how many, and the i-th name (NULL past the end). */
size_t pp_model_prompt_count(const pp_model *m);
const char *pp_model_prompt_name(const pp_model *m, size_t i);
/* KV ring format of the sessions created from now on (default f32, the reference). bf16 and
 * int8 need a backend with attn_step_kv (PP_EUNSUPPORTED otherwise). */
int pp_model_set_kv_cache(pp_model *m, pp_kv_format kv, char *err);
pp_kv_format pp_model_kv_cache(const pp_model *m);
/* Keeps up to `bytes` of prompt states in host memory (0, the default: none). Call before any
 * session exists. */
int pp_model_set_prompt_cache(pp_model *m, size_t bytes, char *err);
/* Prompt cache counters (all zero without a cache). */
typedef struct pp_prompt_cache_counts {
    uint64_t hits, misses, evictions;
    int entries;
    size_t bytes, budget;
} pp_prompt_cache_counts;
void pp_model_prompt_cache_counts(const pp_model *m, pp_prompt_cache_counts *out);

/* Wall time of the three stages of the last step, in milliseconds. */
typedef struct pp_step_times {
    double encode_ms, lm_ms, decode_ms;
} pp_step_times;

/* Creates a conversation: resolves the voice, tokenizes the prompt (more than
 * max_prompt_tokens is PP_EFULL with a message fit for the client), allocates the state.
 * Heavy model work waits for pp_session_prefill. */
int pp_session_create(pp_model *m, const pp_session_params *p, int max_prompt_tokens, pp_session **out, char *err);
void pp_session_destroy(pp_session *s);

/* Runs the next PP_SESSION_PREFILL_ROWS prompt frames, or all of them at once from the prompt
 * cache. Returns 1 once every prompt frame has run (the client may get its handshake), 0
 * while frames remain, or a negative code. */
int pp_session_prefill(pp_session *s, char *err);
/* Prompt frames in total (voice + silence + text + silence) and done so far. */
int pp_session_prompt_frames(const pp_session *s);
int pp_session_prompt_done(const pp_session *s);
/* 1 when the prompts came from the prompt cache. */
int pp_session_prompt_cached(const pp_session *s);
/* 1 when no prompt frame has run and the prompt cache holds this session's prompts now, so its
 * next pp_session_prefill is likely a restore rather than a pass of the model. */
int pp_session_prompt_restorable(const pp_session *s);
/* 1 when a and b run the same prompts (voice, text, KV format) on one model that has a prompt
 * cache: once either has run them, the other can start from the cache. */
int pp_session_shares_prompt(const pp_session *a, const pp_session *b);

/* One conversation frame: pcm_in (1920 samples) -> pcm_out (1920 samples). piece receives the
 * frame's text piece as UTF-8 ("" for the padding ids 0 and 3, "▁" already turned into a
 * space; a character the tokenizer spells in byte-fallback ids comes whole with its last byte,
 * "" before). times (may be NULL) receives the stage timings. */
int pp_session_step(pp_session *s, const float *pcm_in, float *pcm_out, char piece[PP_SESSION_PIECE_MAX],
                    pp_step_times *times, char *err);

/* ---- the three stages of a frame, for batching sessions ---- */
typedef struct pp_session_batch pp_session_batch;

/* Scratch for LM ticks of up to capacity sessions of m. */
int pp_session_batch_create(pp_model *m, int capacity, pp_session_batch **out, char *err);
void pp_session_batch_destroy(pp_session_batch *b);
/* Stage 1: pcm_in (1920 samples) through the session's Mimi encoder into its user codes. */
int pp_session_encode(pp_session *s, const float *pcm_in, char *err);
/* Stage 2: one LM tick for ss[0..n) (distinct sessions of b's model, each encoded once since its
 * last decode, n <= capacity). Checked before any session changes. */
int pp_session_batch_step(pp_session_batch *b, pp_session *const *ss, int n, char *err);
/* Stage 3: the tick's agent codes through the Mimi decoder into pcm_out, and the text piece. */
int pp_session_decode(pp_session *s, float *pcm_out, char piece[PP_SESSION_PIECE_MAX], char *err);
/* Stages 1 and 3 for ss[0..n) at once (distinct sessions of b's model, n <= capacity): one
 * codec call for all of them, each codec weight read once; each session gets exactly what
 * pp_session_encode / pp_session_decode give it alone. pcm_in[i] (1920 samples) is ss[i]'s
 * input; pcm_out[i] and pieces[i] its output. A failed call leaves every session at the stage
 * it was: the call may be retried (with fewer sessions: a server runs each alone to find the
 * one at fault), or the sessions start again from stage 1. */
int pp_session_batch_encode(pp_session_batch *b, pp_session *const *ss, int n, const float *const *pcm_in, char *err);
int pp_session_batch_decode(pp_session_batch *b, pp_session *const *ss, int n, float *const *pcm_out,
                            char (*pieces)[PP_SESSION_PIECE_MAX], char *err);

/* ==== the demo model ==== */
#define PP_DEMO_PATH_MAX 4096

typedef struct pp_demo_files {
    char weights[PP_DEMO_PATH_MAX];    /* dir/lm.safetensors (config.json beside it) */
    char mimi[PP_DEMO_PATH_MAX];       /* dir/mimi/mimi.safetensors (config.json beside it) */
    char tokenizer[PP_DEMO_PATH_MAX];  /* dir/tokenizer.model */
    char voices_dir[PP_DEMO_PATH_MAX]; /* dir/voices */
} pp_demo_files;

/* The demo's shapes. TINY: dim 64, 2 layers, a small codec; real time on a small CPU. RELEASED:
 * PersonaPlex-7B's and Mimi's released shapes (32 layers of 4096, 2.6 GB written), to
 * measure what a machine holds before the checkpoint is downloaded; real time needs a GPU. */
typedef enum pp_demo_size { PP_DEMO_TINY, PP_DEMO_RELEASED } pp_demo_size;

typedef struct pp_demo_opts {
    pp_demo_size size;
    int lm_context; /* the LM's context (KV ring frames); 0: 3000, the released model's */
    int lm_nf2;     /* the LM's matrices in NF2 (random codes), as model-turbo2bit.safetensors;
                       else BF16. The released size is always NF2 (15 GB of BF16 would take minutes) */
} pp_demo_opts;

/* Writes the demo model into dir (created if missing; existing files are replaced) and fills
 * out with the paths. pp_demo_write: the tiny size, BF16, context 3000. */
int pp_demo_write(const char *dir, pp_demo_files *out, char *err);
int pp_demo_write_opts(const char *dir, const pp_demo_opts *opts, pp_demo_files *out, char *err);
/* "tiny" or "released" to its size: 0, or -1 for anything else. */
int pp_demo_size_parse(const char *name, pp_demo_size *out);
/* What pp_model_open takes for the demo in files (which must outlive the paths), named "demo";
 * the other fields are left for the caller to set. */
pp_model_paths pp_demo_paths(const pp_demo_files *files);

#ifdef __cplusplus
}
#endif

#endif
