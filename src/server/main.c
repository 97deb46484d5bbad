/* personaplex-server: start-up, the lws service loop, and an orderly shutdown.
 *
 * Threads: the main thread runs lws (every socket lives there); the loader thread opens the
 * backend and the model, then starts the engine thread (engine.c); lifecycle.c's signal
 * thread turns SIGINT/SIGTERM into a drain and SIGHUP into a log reopen. /health answers
 * while the model loads. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "server/server.h"

#include "audio/aec.h"
#include "backend/backend.h"
#include "base/hostmem.h"
#include "base/log.h"
#include "base/pool.h"
#include "io/file.h"
#include "io/onnx_bundle.h"
#include "io/onnx_mimi.h"
#include "io/voice.h"
#include "model/mimi.h"
#include "server/capacity.h"
#include "server/cert.h"
#include "server/config_file.h"
#include "server/lifecycle.h"
#include "server/listen.h"
#include "server/memory.h"
#include "server/model_dir.h"
#include "server/tls.h"
#include "server/wire.h"
#include "session/demo.h"
#include "session/plan.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef PP_WEB_DIR
#define PP_WEB_DIR ""
#endif

#define TOKENIZER_FILE "tokenizer_spm_32k_3.model"

static atomic_int g_stop; /* set by the signal and loader threads */

/* Everything main owns besides `server`. */
typedef struct app {
    server srv;
    server_options opt;
    pp_backend *backend;
    pp_kv_format kv; /* --kv-cache as resolved */
    listen_addr listen; /* --host as bound */
    char state_dir[4096];
    char paths[5][4096]; /* weights, mimi, tokenizer, voices dir, system prompts ("" none) as resolved */
    pp_demo_files demo;
    atomic_int loaded; /* the loader thread is done, the model loaded or not */
} app;

/* Engine thread: output is queued for some socket. */
static void wake_service(void *arg) {
    server *s = arg;
    pthread_mutex_lock(&s->lock);
    if (s->ctx_alive) lws_cancel_service(s->ctx);
    pthread_mutex_unlock(&s->lock);
}

static void print_version(void) {
    printf("personaplex-server %s\n", PP_VERSION);
#ifdef PP_HAVE_CUDA
    printf("backends: cpu cuda\n");
#else
    printf("backends: cpu\n");
#endif
    printf("CUDA architectures: %s\n", PP_CUDA_ARCHS_STR);
}

static int is_dir_with_index(const char *dir) {
    char p[PATH_MAX + 128];
    if ((size_t)snprintf(p, sizeof p, "%s/index.html", dir) >= sizeof p) return 0;
    return access(p, R_OK) == 0;
}

/* --static-dir, else web/ installed beside the executable, else the source tree's web/. */
static void find_static_dir(const server_options *o, char *out, size_t cap) {
    char exe[PATH_MAX], cand[5][PATH_MAX + 64];
    int n = 0;
    if (o->static_dir) {
        snprintf(cand[n++], sizeof cand[0], "%s", o->static_dir);
    } else {
        ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (len > 0) {
            exe[len] = '\0';
            char *slash = strrchr(exe, '/');
            if (slash) *slash = '\0';
            snprintf(cand[n++], sizeof cand[0], "%s/../share/personaplex/web", exe);
            snprintf(cand[n++], sizeof cand[0], "%s/web", exe);
            snprintf(cand[n++], sizeof cand[0], "%s/../web", exe);
        }
        if (PP_WEB_DIR[0]) snprintf(cand[n++], sizeof cand[0], "%s", PP_WEB_DIR);
    }
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        char real[PATH_MAX];
        if (is_dir_with_index(cand[i]) && realpath(cand[i], real)) {
            snprintf(out, cap, "%s", real);
            return;
        }
    }
    PP_WARN("server", "no web UI found%s%s; only the API is served", o->static_dir ? " in " : "",
            o->static_dir ? o->static_dir : "");
}

static void find_state_dir(const server_options *o, char *out, size_t cap) {
    const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    if (o->state_dir) snprintf(out, cap, "%s", o->state_dir);
    else if (xdg && *xdg) snprintf(out, cap, "%s/personaplex", xdg);
    else snprintf(out, cap, "%s/.local/state/personaplex", home && *home ? home : ".");
}

/* Fills a->paths from the options: the released file names (and system_prompts.bin when there is
 * one) beside the weights by default, or inside them when they are an ONNX bundle folder. The
 * weights are --weights, else the first checkpoint found in --models-dir (model_dir.h). */
static int resolve_model_paths(app *a, char *err) {
    const server_options *o = &a->opt;
    char found[4096];
    const char *weights = o->weights;
    if (!weights) {
        int rc = model_dir_find_weights(o->models_dir, found, sizeof found, err);
        if (rc) return rc;
        weights = found;
        PP_INFO("server", "no --weights given: using %s", weights);
    }
    const char *slash = strrchr(weights, '/');
    int bundle = pp_onnx_bundle_is(weights);
    int dir = bundle ? (int)strlen(weights) : slash ? (int)(slash - weights) : 1;
    const char *base = bundle || slash ? weights : ".";
    const char *given[4] = {weights, o->mimi, o->tokenizer, o->voices_dir};
    const char *beside[4] = {NULL, PP_MIMI_FILE, TOKENIZER_FILE, "voices"};
    for (int i = 0; i < 4; i++) {
        size_t cap = sizeof a->paths[i];
        int n = given[i] ? snprintf(a->paths[i], cap, "%s", given[i])
                         : snprintf(a->paths[i], cap, "%.*s/%s", dir, base, beside[i]);
        if (n < 0 || (size_t)n >= cap) return pp_fail(err, PP_EINVAL, "path too long beside %s", weights);
    }
    /* named system prompts: a bundle's, or one personaplex-convert wrote beside the checkpoint */
    snprintf(a->paths[4], sizeof a->paths[4], "%.*s/%s", dir, base, PP_ONNX_PROMPTS);
    if (access(a->paths[4], R_OK)) a->paths[4][0] = '\0';
    /* a bundle's codec: the released file when it is there, else its own graphs */
    if (bundle && !o->mimi && access(a->paths[1], R_OK)) {
        snprintf(a->paths[1], sizeof a->paths[1], "%s/%s", weights, PP_ONNX_MIMI_ENCODER);
        if (access(a->paths[1], R_OK))
            return pp_fail(err, PP_ENOTFOUND, "%s: the bundle has neither %s nor %s; pass --mimi FILE", weights,
                           PP_ONNX_MIMI_ENCODER, PP_MIMI_FILE);
    }
    /* the codec and the tokenizer are read after the LM (minutes and its whole size for the 7B):
     * one that is not there stops the start now */
    static const char *const option[3] = {NULL, "--mimi", "--tokenizer"};
    for (int i = 1; i < 3; i++)
        if (access(a->paths[i], R_OK))
            return pp_fail(err, PP_ENOTFOUND, "%s %s: cannot read it: %s%s", option[i], a->paths[i], strerror(errno),
                           given[i] ? "" : " (the default, beside the weights; pass the option to name the file)");
    return PP_OK;
}

/* The voices directory has voices and the default --voice is one of them: else every conversation
 * would fail at its start while /health says ok. */
static int check_voices(const char *dir, const char *voice, char *err) {
    char **names = NULL, path[4200], have[256] = "";
    size_t count = 0, len = 0;
    if (pp_voice_list(dir, &names, &count, err))
        return pp_fail(err, PP_ENOTFOUND, "--voices-dir %s: cannot open it", dir);
    int rc = count ? pp_voice_resolve(dir, voice, path, sizeof path, err) : PP_ENOTFOUND;
    for (size_t i = 0; i < count && i < 8 && len < sizeof have; i++)
        len += (size_t)snprintf(have + len, sizeof have - len, "%s%s", i ? ", " : "", names[i]);
    free(names);
    if (!count) return pp_fail(err, PP_ENOTFOUND, "--voices-dir %s holds no voices (NAME.pt or NAME.bin files)", dir);
    if (rc)
        return pp_fail(err, rc, "--voice '%s' is not in --voices-dir %s (it has %s%s)", voice, dir, have,
                       count > 8 ? ", ..." : "");
    return PP_OK;
}

/* --kv-cache (one of the option table's words): auto is int8 on every backend. A frame reads each
 * conversation's whole ring, and f32 quadruples those bytes: on the CPU at context 3000, 3.1 of an
 * NF2 frame's 5.1 GB, so that real time needs about twice the memory bandwidth (docs/model.md
 * §3.4). int8 keeps the logits within 5e-3 of f32 (test_kv_cache); f32 stays for the reference's
 * numerics on request. */
static pp_kv_format kv_format(const char *name) {
    pp_kv_format f = PP_KV_INT8;
    if (strcmp(name, "auto") != 0) pp_kv_format_parse(name, &f);
    return f;
}

/* The prompt cache's bytes for --prompt-cache-mb mb (capacity_prompt_cache). */
static size_t prompt_cache_bytes(int mb) {
    uint64_t total, available;
    if (pp_host_memory(&total, &available)) return (size_t)mb << 20;
    size_t capped = capacity_prompt_cache(mb, available);
    if (capped < (size_t)mb << 20)
        PP_WARN("server",
                "prompt cache: --prompt-cache-mb %d capped to %zu MiB, a quarter of the %.0f MiB this process may "
                "still take",
                mb, capped >> 20, (double)available / (1 << 20));
    return capped;
}

/* KV format, prompt cache, the measured capacity, and the engine sized for it. */
static int start_engine(app *a, pp_model *model, engine **out, int *capacity, char *err) {
    size_t cache_bytes = prompt_cache_bytes(a->opt.prompt_cache_mb);
    int rc = pp_model_set_kv_cache(model, a->kv, err);
    if (!rc) rc = pp_model_set_prompt_cache(model, cache_bytes, err);
    /* Each tick's downlink encoding runs on the engine's host threads, a conversation a task;
     * with --echo-cancel on, so does every conversation's echo cancellation, and under auto any
     * conversation may ask for it: counted for all of them either way, or a full server of
     * clients that ask would not run in real time. A build without the canceller runs none. */
    int host_threads = pp_pool_threads_for(a->opt.threads);
    double encode_ms = 0, echo_ms = 0;
    if (!rc) rc = wire_frame_cost(&encode_ms, err);
    if (!rc && echo_cancel_parse(a->opt.echo_cancel) != ECHO_CANCEL_OFF && pp_aec_available())
        rc = engine_echo_cost(&echo_ms, err);
    pp_plan plan;
    if (!rc)
        rc = pp_plan_capacity(model, a->opt.max_sessions, cache_bytes, (encode_ms + echo_ms) / host_threads, &plan,
                              err);
    if (rc) return rc;
    char echo[64] = "";
    if (echo_ms > 0) snprintf(echo, sizeof echo, " and echo cancellation %.2f ms", echo_ms);
    PP_INFO("server",
            "capacity: %s (one conversation: LM tick %.2f ms, codec %.2f ms, downlink encoding %.2f ms%s per frame "
            "on %d host thread%s; %.1f MiB with its %s KV cache; %.1f GiB free)",
            plan.why, plan.tick1_ms, plan.codec_ms, encode_ms, echo, host_threads, host_threads == 1 ? "" : "s",
            (double)plan.per_session_bytes / (1 << 20), pp_kv_format_name(a->kv), (double)plan.mem_free / (1 << 30));
    if (cache_bytes) PP_INFO("server", "prompt cache: up to %zu MiB of prompt states in host memory", cache_bytes >> 20);
    *capacity = plan.sessions;
    metrics_set_capacity(a->srv.metrics, &(metrics_capacity){.tick1_ms = plan.tick1_ms,
                                                             .codec_ms = plan.codec_ms,
                                                             .host_ms = plan.host_ms,
                                                             .echo_ms = echo_ms,
                                                             .frame_ms = plan.frame_ms,
                                                             .by_time = plan.by_time,
                                                             .by_memory = plan.by_memory,
                                                             .context = plan.context});
    engine_config cfg = {
        .model = model,
        .metrics = a->srv.metrics,
        .max_sessions = plan.sessions,
        .max_prompt_tokens = a->opt.max_prompt_tokens,
        .notify = wake_service,
        .notify_arg = &a->srv,
        .idle_timeout = a->opt.idle_timeout,
        .trim_after_ms = a->opt.trim_after_ms,
        .echo_cancel = (echo_cancel_mode)echo_cancel_parse(a->opt.echo_cancel),
        .host_threads = host_threads,
    };
    return engine_create(&cfg, out, err);
}

/* Loader thread: backend, (demo files,) model, engine; publishes the result. */
static void *load_main(void *arg) {
    app *a = arg;
    server *s = &a->srv;
    char err[PP_ERR_LEN];
    pp_model *model = NULL;
    engine *e = NULL;
    int capacity = 0;
    pp_model_paths mp = {.weights = a->paths[0],
                         .mimi = a->paths[1],
                         .tokenizer = a->paths[2],
                         .voices_dir = a->paths[3],
                         .prompts = a->paths[4][0] ? a->paths[4] : NULL,
                         .quantize = a->opt.quantize,
                         .quantize_group = a->opt.quantize_group,
                         .quantize_temporal_only = a->opt.quantize_temporal_only};
    /* the backend reads its one switch from the environment, as PP_CPU_SIMD */
    if (a->opt.weights_in_host_memory) setenv("PP_WEIGHTS_IN_HOST_MEMORY", "1", 1);
    int rc = pp_backend_create(a->opt.device, a->opt.threads, &a->backend, err);
    if (!rc && a->opt.demo) rc = cert_mkdirs(a->state_dir, err);
    if (!rc && a->opt.demo) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/demo", a->state_dir);
        pp_demo_opts demo = {.lm_context = a->opt.demo_context};
        pp_demo_size_parse(a->opt.demo_size, &demo.size); /* checked by the option table */
        rc = pp_demo_write_opts(dir, &demo, &a->demo, err);
        pp_model_paths demo_paths = pp_demo_paths(&a->demo); /* mp's quantize options stay */
        mp.weights = demo_paths.weights;
        mp.mimi = demo_paths.mimi;
        mp.tokenizer = demo_paths.tokenizer;
        mp.voices_dir = a->opt.voices_dir ? a->opt.voices_dir : demo_paths.voices_dir;
        mp.prompts = NULL;
        mp.name = demo_paths.name;
    }
    /* Before the load: the weights and one conversation's KV cache must fit. How many
     * conversations fit, and in real time, is measured once the model is in. */
    pp_lm_quantize q = {.group = mp.quantize_group, .temporal_only = mp.quantize_temporal_only};
    int quantize = mp.quantize && !pp_wformat_parse(mp.quantize, &q.fmt);
    if (!rc)
        rc = capacity_check_quantized(a->backend, mp.weights, mp.mimi, quantize ? &q : NULL, a->kv, 1,
                                      !a->opt.skip_memory_check, err);
    if (!rc) rc = pp_model_open(a->backend, &mp, &model, err);
    /* The defaults a conversation gets, as the loaded model reads them: a truncated or another
     * model's voice file (its name was checked before the load), a named prompt the model lacks
     * or a persona over --max-prompt-tokens would fail every conversation that relies on them
     * while /health said ok. */
    char why[PP_ERR_LEN];
    if (!rc && (rc = pp_model_check_voice(model, a->opt.voice, why)))
        pp_fail(err, rc, "--voice %s: %s", a->opt.voice, why);
    if (!rc && (rc = pp_model_check_text_prompt(model, a->opt.text_prompt, a->opt.max_prompt_tokens, why)))
        pp_fail(err, rc, "--text-prompt: %s", why);
    if (!rc) rc = start_engine(a, model, &e, &capacity, err);
    server_publish(s, model, e, rc ? err : NULL);
    if (rc) {
        PP_ERROR("server", "cannot load the model: %s", err);
        g_stop = 1;
        wake_service(s);
    } else {
        char status[256];
        snprintf(status, sizeof status, "ready: model %s on %s, up to %d conversations", pp_model_name(model),
                 pp_model_backend(model), capacity);
        PP_INFO("server", "%s", status);
        lifecycle_ready(status);
    }
    a->loaded = 1;
    return NULL;
}

/* A load runs to its end (minutes for a large checkpoint from a cold disk), unless a second stop
 * signal comes: then the process ends at once and the load's work is abandoned. */
static void join_loader(app *a, pthread_t loader) {
    if (!a->loaded) PP_INFO("server", "waiting for the model load to end (a second signal stops at once)");
    const struct timespec poll = {0, 20 * 1000000};
    while (!a->loaded) {
        if (lifecycle_stop_requests() >= 2) {
            PP_INFO("server", "stopped during the model load");
            pp_log_open(NULL); /* flushes and closes --log-file */
            _exit(0);
        }
        nanosleep(&poll, NULL);
    }
    pthread_join(loader, NULL);
}

static const struct lws_protocol_vhost_options g_ws_default = {NULL, NULL, "default", ""};
static const struct lws_protocol_vhost_options g_pvo = {NULL, &g_ws_default, "personaplex-chat", ""};

static struct lws_context *create_context(app *a, struct lws_protocols *protocols, char *err) {
    static char cert[4200], key[4200];
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = a->opt.port;
    info.iface = a->listen.host;
    /* with IPv6 on, lws binds an IPv4 literal as [::], every interface */
    if (a->listen.family == AF_INET) info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    /* --host :: serves IPv4 too (mapped addresses), also where net.ipv6.bindv6only=1 would make
     * it IPv6 only: MODIFY without VALUE clears IPV6_V6ONLY on the listening socket */
    else info.options |= LWS_SERVER_OPTION_IPV6_V6ONLY_MODIFY;
    info.protocols = protocols;
    info.pvo = &g_pvo; /* clients send no subprotocol: bind them to the chat protocol */
    info.user = &a->srv;
    info.max_http_header_data = SERVER_MAX_HEADER;
    /* A connection holds one of these from accept until its request is read: a few dozen
     * silent ones held all 32 for lws's default 10 s, and nobody else got an answer. */
    info.max_http_header_pool = SERVER_HEADER_POOL;
    info.timeout_secs_ah_idle = SERVER_HEADER_IDLE_S;
    info.alpn = "http/1.1"; /* WebSockets over HTTP/2 would only add framing */
    /* Bounds every stage a client could stall: the TLS handshake and the HTTP request
     * (timeout_secs), a silent WebSocket (pinged, then dropped without a pong) and a vanished
     * peer (TCP keepalive), so none of them holds a socket and its memory for long. */
    static lws_retry_bo_t idle_policy;
    idle_policy.secs_since_valid_ping = (uint16_t)a->opt.io_timeout;
    idle_policy.secs_since_valid_hangup = (uint16_t)(2 * a->opt.io_timeout);
    info.retry_and_idle_policy = &idle_policy;
    info.timeout_secs = (unsigned)a->opt.io_timeout;
    info.ka_time = a->opt.io_timeout;
    info.ka_interval = a->opt.io_timeout / 3 + 1;
    info.ka_probes = 3;
    if (!a->opt.no_tls) {
        if (a->opt.cert) { /* with --key: checked in main */
            cert_warn_expiry(a->opt.cert);
            snprintf(cert, sizeof cert, "%s", a->opt.cert);
            snprintf(key, sizeof key, "%s", a->opt.key);
        } else if (cert_ensure(a->state_dir, cert, key, sizeof cert, err)) {
            return NULL;
        }
        tls_configure(&info, cert, key);
        a->srv.cert_path = cert;
        a->srv.key_path = key;
    }
    struct lws_context *ctx = lws_create_context(&info);
    if (!ctx) pp_fail(err, PP_EIO, "cannot listen on %s:%d (address in use, bad --host or bad certificate?)",
                      a->listen.host, a->opt.port);
    return ctx;
}

static void lws_log_bridge(int level, const char *line) {
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n') n--;
    if (level & LLL_ERR) PP_ERROR("lws", "%.*s", (int)n, line);
    else if (level & LLL_WARN) PP_WARN("lws", "%.*s", (int)n, line);
    else PP_DEBUG("lws", "%.*s", (int)n, line);
}

static int run(app *a) {
    char err[PP_ERR_LEN];
    server *s = &a->srv;
    const server_options *o = &a->opt;
    find_state_dir(o, a->state_dir, sizeof a->state_dir);
    find_static_dir(o, s->static_dir, sizeof s->static_dir);
    /* the demo model writes its own voices while it loads; a --voices-dir given with it is checked */
    const char *voices = o->demo ? o->voices_dir : a->paths[3];
    if ((!o->demo && resolve_model_paths(a, err)) || (voices && check_voices(voices, o->voice, err))) {
        fprintf(stderr, "personaplex-server: %s\n", err);
        return 2;
    }
    /* a wrong --host stops the start here, not after the model has loaded */
    if (listen_addr_parse(o->host, &a->listen, err) || listen_addr_available(&a->listen, err)) {
        fprintf(stderr, "personaplex-server: %s\n", err);
        return 2;
    }
    if (o->allowed_origins && apikeys_origins_check(o->allowed_origins, err)) {
        fprintf(stderr, "personaplex-server: %s\n", err);
        return 2;
    }
    if (o->api_keys && apikeys_load(o->api_keys, &s->keys, err)) {
        fprintf(stderr, "personaplex-server: %s\n", err);
        return 2;
    }
    if (metrics_create(&s->metrics, err)) {
        apikeys_free(s->keys);
        return 1;
    }
    /* behind a proxy every connection comes from the proxy's address */
    if (o->max_per_ip > 0 && !o->behind_proxy && !(s->peers = peer_table_create(o->max_per_ip))) {
        fprintf(stderr, "personaplex-server: --max-per-ip: out of memory for the connection table\n");
        metrics_destroy(s->metrics);
        apikeys_free(s->keys);
        return 1;
    }
    s->opt = o;
    pthread_mutex_init(&s->lock, NULL);

    struct lws_protocols protocols[] = {
        {"http", http_callback, http_pss_size(), 0, 0, NULL, 0},
        {"personaplex-chat", ws_callback, ws_pss_size(), 4096, 0, NULL, 0},
        {NULL, NULL, 0, 0, 0, NULL, 0},
    };
    lws_set_log_level(LLL_ERR | LLL_WARN | (pp_log_get_level() == PP_LOG_DEBUG ? LLL_NOTICE : 0), lws_log_bridge);
    s->ctx = create_context(a, protocols, err);
    int port = s->ctx ? lws_get_vhost_listen_port(lws_get_vhost_by_name(s->ctx, "default")) : 0;
    if (!s->ctx || listen_verify(&a->listen, port, err)) {
        PP_ERROR("server", "%s", err);
        if (s->ctx) lws_context_destroy(s->ctx);
        metrics_destroy(s->metrics);
        apikeys_free(s->keys);
        peer_table_free(s->peers);
        return 1;
    }
    s->ctx_alive = 1;
    int v6 = a->listen.family == AF_INET6;
    PP_INFO("server", "listening on %s://%s%s%s:%d/ (web UI: %s)", o->no_tls ? "http" : "https", v6 ? "[" : "",
            a->listen.host, v6 ? "]" : "", port, s->static_dir[0] ? s->static_dir : "none");

    pthread_t loader;
    if (lifecycle_start(s, wake_service, s, err)) {
        PP_ERROR("server", "%s", err);
        g_stop = 1;
    }
    int have_loader = !g_stop && pthread_create(&loader, NULL, load_main, a) == 0;
    if (!have_loader) {
        PP_ERROR("server", "cannot start the loader thread");
        g_stop = 1;
    }
    while (!g_stop && !lifecycle_poll(s))
        if (lws_service(s->ctx, 0) < 0) break;
    lifecycle_stop();

    /* Closing the context closes every socket (conns become gone) before the engine stops. */
    pthread_mutex_lock(&s->lock);
    s->ctx_alive = 0;
    pthread_mutex_unlock(&s->lock);
    lws_context_destroy(s->ctx);
    if (have_loader) join_loader(a, loader);
    lifecycle_join();
    engine_destroy(s->engine);
    pp_model_close(s->model);
    pp_backend_destroy(a->backend);
    metrics_destroy(s->metrics);
    apikeys_free(s->keys);
    peer_table_free(s->peers);
    int failed = s->failed;
    pthread_mutex_destroy(&s->lock);
    PP_INFO("server", "stopped");
    return failed ? 1 : 0;
}

int main(int argc, char **argv) {
    static app a; /* large; zero-initialised */
    char err[PP_ERR_LEN];
    /* The configuration file first, so the command line overrides it. */
    const char *config = config_file_find_arg(argc, argv);
    if (server_options_init(&a.opt, err) || (config && config_file_load(&a.opt, config, err)) ||
        server_options_parse(&a.opt, argc, argv, err)) {
        fprintf(stderr, "personaplex-server: %s\n", err);
        server_options_free(&a.opt);
        return 2;
    }
    if (a.opt.help || a.opt.version) {
        if (a.opt.help) server_options_print_help(stdout, "personaplex-server");
        else print_version();
        server_options_free(&a.opt);
        return 0;
    }
    /* the option table has checked the words of --log-level, --demo-size, --echo-cancel, --kv-cache,
     * --device and --quantize; what is left are the pairings and this build's abilities */
    pp_log_set_level((pp_log_level)pp_log_parse_level(a.opt.log_level));
    pp_demo_size demo_size;
    pp_demo_size_parse(a.opt.demo_size, &demo_size);
    a.kv = kv_format(a.opt.kv_cache);
    err[0] = '\0';
    if (demo_size != PP_DEMO_TINY && !a.opt.demo) /* a size asked for, and a checkpoint would run */
        snprintf(err, sizeof err, "--demo-size %s describes the --demo model; add --demo", a.opt.demo_size);
    else if (a.opt.demo && a.opt.weights) /* serving the demo in place of the file asked for would mislead */
        snprintf(err, sizeof err, "--demo runs the built-in model, so --weights %s would not be used: give one of them",
                 a.opt.weights);
    else if (a.opt.demo && !a.opt.voices_dir && !pp_demo_voice_known(a.opt.voice)) /* else known only after the build */
        snprintf(err, sizeof err, "--voice '%s' is not a voice of the --demo model (NATF0-3, NATM0-3, VARF0-4, VARM0-4)",
                 a.opt.voice);
    else if (!a.opt.no_tls && !a.opt.cert != !a.opt.key)
        snprintf(err, sizeof err, "--cert and --key go together (%s given alone)", a.opt.cert ? "--cert" : "--key");
    else if (echo_cancel_parse(a.opt.echo_cancel) == ECHO_CANCEL_ON && !pp_aec_available())
        snprintf(err, sizeof err, "--echo-cancel on: this build has no echo canceller "
                                  "(libwebrtc-audio-processing-dev was missing)");
#ifndef PP_HAVE_CUDA
    else if (strcmp(a.opt.device, "cuda") == 0)
        snprintf(err, sizeof err, "--device cuda: this build has no CUDA backend (built with PP_CUDA=OFF)");
#endif
    if (err[0]) {
        fprintf(stderr, "personaplex-server: %s\n", err);
        server_options_free(&a.opt);
        return 2;
    }
    memory_configure(); /* before the threads start allocating */
    if (a.opt.log_file && pp_log_open(a.opt.log_file) != PP_OK) {
        fprintf(stderr, "personaplex-server: cannot open --log-file %s\n", a.opt.log_file);
        server_options_free(&a.opt);
        return 2;
    }
    /* Block the stop signals and SIGHUP in every thread; the signal thread waits for them. A
     * peer that vanishes must not kill the process through SIGPIPE. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    pp_file_explain_sigbus(); /* a checkpoint rewritten in place while mapped: say which one */
    int rc = run(&a);
    server_options_free(&a.opt);
    pp_log_open(NULL);
    return rc;
}
