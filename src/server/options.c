/* options: the option table, its setter, the argv parser and the manual. */
#include "server/options.h"

#include "base/err.h"
#include "base/number.h"

#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TEXT_PROMPT                                                                       \
    "You are a wise and friendly teacher. Answer questions or provide advice in a clear and "    \
    "engaging way."

/* COUNT: N or "auto" (0). ENUM: a string, one of the '|'-separated words of the option's arg, so
 * that a config file's bad value is refused with its file:line before anything loads. */
typedef enum { OPT_STRING, OPT_INT, OPT_INT64, OPT_FLAG, OPT_COUNT, OPT_ENUM } opt_kind;

typedef struct opt_spec {
    const char *name;    /* long name without "--"; also the config-file key */
    const char *arg;     /* placeholder shown in the manual; NULL for flags */
    opt_kind kind;
    size_t offset;       /* of the field in server_options */
    long long min, max;  /* OPT_INT / OPT_INT64 range */
    const char *def;     /* default as text, applied through the setter; NULL: unset */
    const char *group;   /* manual section heading, on the first option of a group */
    const char *help;
} opt_spec;

#define F(field) offsetof(server_options, field)

static const opt_spec g_opts[] = {
    {"weights", "FILE", OPT_STRING, F(weights), 0, 0, NULL, "Model",
     "LM checkpoint: model.safetensors as released (bf16) or converted to NF2, INT4 or NF4 by "
     "personaplex-quantize, a GGUF file or a speech-core ONNX bundle folder. A config.json "
     "beside it, when present, gives the architecture. "
     "Default: the first checkpoint found in --models-dir."},
    {"mimi", "FILE", OPT_STRING, F(mimi), 0, 0, NULL, NULL,
     "Mimi codec weights (safetensors, or a speech-core bundle's mimi_encoder.onnx). Default: "
     "tokenizer-e351c8d8-checkpoint125.safetensors in the directory of --weights (in an ONNX "
     "bundle folder, else its mimi_encoder.onnx)."},
    {"tokenizer", "FILE", OPT_STRING, F(tokenizer), 0, 0, NULL, NULL,
     "SentencePiece text tokenizer. Default: tokenizer_spm_32k_3.model in the directory of "
     "--weights."},
    {"voices-dir", "DIR", OPT_STRING, F(voices_dir), 0, 0, NULL, NULL,
     "Directory holding the voice prompts (NATF0.pt ... VARM4.pt, from voices.tgz). Default: "
     "voices/ in the directory of --weights."},
    {"models-dir", "DIR", OPT_STRING, F(models_dir), 0, 0, NULL, NULL,
     "Where the model files are looked for when --weights is not given: the first of "
     "model-turbo2bit.safetensors, model-nf4.safetensors, model.safetensors and "
     "personaplex-24L-q4_k.gguf (or its first shard, .shard-00) found there "
     "(tools/fetch-weights.sh downloads into the same place). Default: "
     "$XDG_DATA_HOME/personaplex/models (else ~/.local/share/personaplex/models), then "
     "/var/lib/personaplex/models."},
    {"skip-memory-check", NULL, OPT_FLAG, F(skip_memory_check), 0, 1, NULL, NULL,
     "Start even when the weights plus one conversation's KV cache do not fit in the free GPU "
     "memory (or RAM on the CPU backend); the estimate is then only logged. How many "
     "conversations fit is measured once the model is in (--max-sessions)."},
    {"quantize", "nf2|int4|nf4|int8", OPT_ENUM, F(quantize), 0, 0, NULL, NULL,
     "Quantize a BF16/F16/F32 checkpoint while it loads, tensor by tensor: nf2, int4, nf4 or int8 "
     "(bitsandbytes' 8-bit layout, one scale per 128 inputs). The weights come out exactly as "
     "personaplex-quantize would write them, and host memory stays near their quantized size plus one "
     "tensor, so the BF16 release runs on a 16 GB GPU (int8) or smaller (nf4, int4, nf2) without a "
     "separate conversion. nf2, int4 and int8 cover every matrix, nf4 the temporal transformer's "
     "projections as bitsandbytes' 4-bit recipe does. A checkpoint already quantized is refused."},
    {"quantize-group", "N", OPT_INT, F(quantize_group), -1, 4096, "0", NULL,
     "With --quantize: the group (block) of inputs that share a scale; it must divide every row. "
     "0: the format's own (128 for nf2 and int8, 64 for int4 and nf4); -1: int8 with one scale per "
     "row, as bitsandbytes stores it."},
    {"quantize-temporal-only", NULL, OPT_FLAG, F(quantize_temporal_only), 0, 1, NULL, NULL,
     "With --quantize: quantize only the temporal transformer's projections, keeping the depformer "
     "and the embeddings as stored (the bitsandbytes 4-bit recipe's choice, for any format)."},
    {"weights-in-host-memory", NULL, OPT_FLAG, F(weights_in_host_memory), 0, 1, NULL, NULL,
     "CUDA: read the weights in place from the mapped file over the bus instead of copying them "
     "into GPU memory (slow on a discrete GPU: for tests, or when the GPU cannot hold them). An "
     "integrated GPU (Jetson), whose memory is the host's, always does so, so the weights are "
     "held once. Same as PP_WEIGHTS_IN_HOST_MEMORY=1 in the environment."},
    {"demo", NULL, OPT_FLAG, F(demo), 0, 1, NULL, NULL,
     "Run a tiny built-in model generated at start-up (no download): it speaks nonsense but "
     "exercises the whole pipeline in real time on a small CPU. /health reports model \"demo\"."},
    {"demo-size", "tiny|released", OPT_ENUM, F(demo_size), 0, 0, "tiny", NULL,
     "The --demo model's size: tiny, or released: the released model's shapes (32 layers of 4096, the "
     "full Mimi codec) with random NF2 weights, as model-turbo2bit.safetensors, written to "
     "STATE_DIR/demo at start-up (2.6 GB: 2.2 GB of LM, 0.3 GB of codec; about 20 s). It speaks nonsense too, but "
     "costs what the real model costs: the start-up calibration and a load test then say how many "
     "conversations this machine holds before the checkpoint is downloaded. Real time needs a GPU."},
    {"voice", "NAME", OPT_STRING, F(voice), 0, 0, "NATF2", "Conversation defaults",
     "Voice used when a client sends no voice_prompt (with or without the .pt suffix). The server "
     "does not start (exit status 2) when it is not in --voices-dir (with --demo and no --voices-dir: "
     "among the demo model's 18 voices), or that holds no voices; it stops after loading the model "
     "(exit status 1) when the voice's file is no voice of that model (unreadable, truncated, another "
     "model's width)."},
    {"text-prompt", "TEXT", OPT_STRING, F(text_prompt), 0, 0, DEFAULT_TEXT_PROMPT, NULL,
     "Persona used when a client sends no text_prompt. It is wrapped in <system> tags and "
     "tokenized like the reference server does. The server stops after loading the model (exit "
     "status 1) when it is longer than --max-prompt-tokens, or an @NAME the model has no named "
     "prompt for."},
    {"max-prompt-tokens", "N", OPT_INT, F(max_prompt_tokens), 1, 4096, "512", NULL,
     "Longest accepted text prompt in tokens; a longer one gets an 0x05 error and a close."},
    {"seed", "N", OPT_INT64, F(seed), -1, INT64_MAX, "42424242", NULL,
     "Base sampling seed: each conversation draws from its own seed made from N and the "
     "conversation's number, so callers saying the same words hear different answers and a "
     "server run repeats. A client's seed, text_seed or audio_seed query parameter overrides "
     "it for its session. -1 draws a fresh seed per session."},
    {"host", "ADDR", OPT_STRING, F(host), 0, 0, "127.0.0.1", "Network",
     "Address to listen on, and only there: a numeric IPv4 or IPv6 address of this machine, or "
     "localhost (127.0.0.1); other names are refused. Use 0.0.0.0 (IPv4) or :: (IPv6 and IPv4, "
     "whatever net.ipv6.bindv6only says) to accept other machines (browsers then need TLS for the "
     "microphone)."},
    {"port", "N", OPT_INT, F(port), 0, 65535, "8998", NULL,
     "TCP port for HTTP(S) and the WebSocket; 0 picks a free port (logged)."},
    {"cert", "FILE", OPT_STRING, F(cert), 0, 0, NULL, NULL,
     "TLS certificate chain (PEM); one that has expired or expires within 30 days is warned about at "
     "start. Without --cert/--key a self-signed certificate for localhost and 127.0.0.1 is generated "
     "once and kept in --state-dir, and generated anew when it has 30 days or less left."},
    {"key", "FILE", OPT_STRING, F(key), 0, 0, NULL, NULL, "TLS private key (PEM) for --cert."},
    {"no-tls", NULL, OPT_FLAG, F(no_tls), 0, 1, NULL, NULL,
     "Serve plain HTTP and ws://. Browsers allow the microphone on http://localhost only."},
    {"max-sessions", "N|auto", OPT_COUNT, F(max_sessions), 1, 256, "auto", NULL,
     "Conversations served at once. At start-up the server times the model's batched step at a "
     "few batch sizes and the codec, reads the free memory for the KV caches, and logs how many "
     "conversations it can hold in real time and in memory and which limit binds; auto admits "
     "that many (at least 1, at most 256), N caps it further. One more gets an 0x05 \"server "
     "full\" message and a close."},
    {"kv-cache", "auto|f32|bf16|int8", OPT_ENUM, F(kv_cache), 0, 0, "auto", NULL,
     "Storage of each conversation's KV cache: f32 (the reference's numerics), bf16 (half the "
     "memory) or int8 (a quarter, one scale per slot and head; logits stay within 5e-3 of f32). "
     "auto: int8 on every backend. Each frame reads the whole cache, so f32 costs memory "
     "bandwidth as well as room (PersonaPlex-7B: 3.15 GB per conversation in f32, 0.81 GB in "
     "int8)."},
    {"prompt-cache-mb", "MB", OPT_INT, F(prompt_cache_mb), 0, 1048576, "1024", NULL,
     "Host memory for the prompt cache: the model's state after a voice and text prompt is kept "
     "and copied into the next conversation with the same voice and prompt, whose handshake then "
     "comes in milliseconds instead of after the prompt phases. Least recently used states go "
     "first; 0 disables it. At most a quarter of the host memory the process may take (within "
     "its container's or unit's limit) is used."},
    {"behind-proxy", NULL, OPT_FLAG, F(behind_proxy), 0, 1, NULL, NULL,
     "The server sits behind a reverse proxy (nginx, a Kubernetes ingress): log the client "
     "address from X-Real-IP or X-Forwarded-For instead of the proxy's (for logs only), and "
     "refuse a chat upgrade with HTTP 503 rather than an 0x05 message when no conversation can "
     "start now (loading, full, draining), so the proxy retries another instance (nginx: "
     "proxy_next_upstream http_503); an X-Forwarded-Proto of https makes the API-key cookie "
     "Secure. Never set it when clients reach the server directly."},
    {"max-per-ip", "N", OPT_INT, F(max_per_ip), 0, 65536, "64", NULL,
     "Connections one client address (an IPv4 address, an IPv6 /64) may hold open at once; one "
     "more is closed as it is accepted. Without it a single client opening a thousand silent "
     "connections held every descriptor and request slot, and nobody else got an answer. 0: no "
     "limit. Not applied with --behind-proxy, where every connection comes from the proxy (limit "
     "there: nginx limit_conn). A load test from one machine needs it raised."},
    {"allowed-origins", "LIST", OPT_STRING, F(allowed_origins), 0, 0, NULL, NULL,
     "Pages of other sites that may open a conversation: comma-separated origins "
     "(https://app.example.com, http://localhost:5173) or * for any. A browser lets any page open a "
     "WebSocket to any server, with no CORS check, so without it a page of any site its user visits "
     "can talk to an open server (one on localhost or the LAN included) and spend its GPU. The "
     "server's own pages and programs (no Origin header) are always let in; others get 403. "
     "Default: any, as before."},
    {"api-keys", "FILE", OPT_STRING, F(api_keys), 0, 0, NULL, NULL,
     "Require a key on every endpoint but /health and /health/live: FILE holds one key per line "
     "(blank lines and # comments ignored) and is read again on SIGHUP. A client presents one as "
     "`Authorization: Bearer KEY`, or, where it cannot set headers (a browser), as ?token=KEY; a page "
     "opened with ?token= gets a cookie so its assets and its WebSocket carry the key (and is sent to its "
     "address without the key); the cookie counts only on requests from the server's own pages (their "
     "Origin). Requests without a valid key get 401 and are counted in /metrics; keys never appear in "
     "the log."},
    {"static-dir", "DIR", OPT_STRING, F(static_dir), 0, 0, NULL, NULL,
     "Web UI to serve at /. Default: the web/ directory installed with the program (found "
     "beside the executable, then in the source tree it was built from)."},
    {"device", "auto|cpu|cuda", OPT_ENUM, F(device), 0, 0, "auto", "Runtime",
     "Compute backend: cuda, cpu or auto (CUDA when a GPU is present)."},
    {"threads", "N", OPT_INT, F(threads), 0, 1024, "0", NULL,
     "CPU threads of each parallel stage (the CPU backend, the conversations' audio encoding); 0 uses every core "
     "this process may run on (its CPU affinity: taskset, a container's cpuset)."},
    {"state-dir", "DIR", OPT_STRING, F(state_dir), 0, 0, NULL, NULL,
     "Where the generated certificate, its key (mode 0600) and the demo model live. Default: "
     "$XDG_STATE_HOME/personaplex, else ~/.local/state/personaplex."},
    {"log-level", "debug|info|warn|error", OPT_ENUM, F(log_level), 0, 0, "info", NULL, "debug, info, warn or error."},
    {"log-file", "FILE", OPT_STRING, F(log_file), 0, 0, NULL, NULL,
     "Append log lines to FILE instead of standard error. SIGHUP reopens it (log rotation)."},
    {"drain-seconds", "N", OPT_INT, F(drain_seconds), 0, 3600, "10", NULL,
     "On SIGTERM or SIGINT new conversations are refused, each open one gets an 0x05 "
     "\"server shutting down\" message and a close, and the server exits once they are gone "
     "or after N seconds. A second signal exits at once."},
    {"config", "FILE", OPT_STRING, F(config), 0, 0, NULL, NULL,
     "Read settings from FILE first; the command line overrides them. One \"key = value\" per "
     "line, the key being an option's long name without the dashes (port = 8998, no-tls = "
     "true); # starts a comment; a value may be put in double quotes. An unknown key or a bad "
     "value stops the server with the file and line named."},
    {"idle-timeout", "N", OPT_INT, F(idle_timeout), 0, 86400, "60", "Robustness",
     "A client that sends no audio keeps its conversation alive: after a second without audio "
     "the model hears silence, one frame every 80 ms, and keeps talking. After N seconds "
     "without any audio the conversation ends with an 0x05 message and a close. 0: never."},
    {"echo-cancel", "off|auto|on", OPT_ENUM, F(echo_cancel), 0, 0, "auto", NULL,
     "Echo cancellation of the uplink against the audio the server sent (WebRTC's canceller; "
     "for listeners on speakers, whose microphone hears the model). off: never. auto: for "
     "conversations whose query asks for it (echo_cancel=1). on: for all but those whose query "
     "refuses it (echo_cancel=0). Finds echo delays up to about half a second by itself."},
    {"trim-after-ms", "N", OPT_INT, F(trim_after_ms), -1, 3600000, "5000", NULL,
     "N milliseconds after a conversation ends, memory the allocator kept from it goes back to "
     "the system (in the engine's spare time between frames), so the resident size returns to "
     "its level before a crowd came and went. -1: never."},
    {"io-timeout", "N", OPT_INT, F(io_timeout), 1, 3600, "20", NULL,
     "Seconds a connection may take to finish its TLS handshake or HTTP request, and a closing "
     "conversation to drain its output. An idle WebSocket is pinged after N seconds and dropped "
     "after 2N without a pong; TCP keepalive probes a silent peer likewise (half-open "
     "connections). A client that stops reading is dropped once about 2 s of output wait for "
     "it; one that sends audio more than 10 s faster than real time is closed."},
    {"demo-context", "N", OPT_INT, F(demo_context), 0, 3000, "0", NULL,
     "Advanced, for tests: the LM context (KV ring frames) of the --demo model; 0 keeps its "
     "3000. A short context makes a conversation outgrow its attention window within seconds."},
    {"help", NULL, OPT_FLAG, F(help), 0, 1, NULL, "Other", "Print this manual and exit."},
    {"version", NULL, OPT_FLAG, F(version), 0, 1, NULL, NULL,
     "Print the version, the compiled-in backends and CUDA architectures, and exit."},
};

#define N_OPTS (sizeof g_opts / sizeof g_opts[0])

static const opt_spec *opt_find(const char *name, size_t len) {
    for (size_t i = 0; i < N_OPTS; i++)
        if (strlen(g_opts[i].name) == len && strncmp(g_opts[i].name, name, len) == 0) return &g_opts[i];
    return NULL;
}

static int parse_integer(const opt_spec *s, const char *value, long long *out, char *err) {
    if (!value || !*value) return pp_fail(err, PP_EINVAL, "--%s needs a number", s->name);
    long long v;
    if (!pp_parse_integer(value, &v)) return pp_fail(err, PP_EINVAL, "--%s: '%s' is not an integer", s->name, value);
    if (v < s->min || v > s->max)
        return pp_fail(err, PP_EINVAL, "--%s: %lld is outside [%lld, %lld]", s->name, v, s->min, s->max);
    *out = v;
    return PP_OK;
}

/* value is one of the words of s->arg; else PP_EINVAL listing them ("is not a, b or c"). */
static int check_choice(const opt_spec *s, const char *value, char *err) {
    char list[128] = "";
    size_t len = 0;
    for (const char *w = s->arg; *w;) {
        size_t n = strcspn(w, "|");
        if (strlen(value) == n && strncmp(value, w, n) == 0) return PP_OK;
        const char *sep = w == s->arg ? "" : w[n] ? ", " : " or ";
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%.*s", sep, (int)n, w);
        w += n + (w[n] == '|');
    }
    return pp_fail(err, PP_EINVAL, "--%s: '%s' is not %s", s->name, value, list);
}

static int opt_apply(server_options *o, const opt_spec *s, const char *value, char *err) {
    char *field = (char *)o + s->offset;
    long long v;
    int rc;
    switch (s->kind) {
    case OPT_FLAG:
        /* "false" lets a command line switch off a flag that a config file set. */
        if (!value || strcmp(value, "true") == 0 || strcmp(value, "1") == 0) *(int *)field = 1;
        else if (strcmp(value, "false") == 0 || strcmp(value, "0") == 0) *(int *)field = 0;
        else return pp_fail(err, PP_EINVAL, "--%s takes true or false (got '%s')", s->name, value);
        return PP_OK;
    case OPT_COUNT:
    case OPT_INT:
        if (s->kind == OPT_COUNT && value && strcmp(value, "auto") == 0) {
            *(int *)field = 0;
            return PP_OK;
        }
        if ((rc = parse_integer(s, value, &v, err))) return rc;
        *(int *)field = (int)v;
        return PP_OK;
    case OPT_INT64:
        if ((rc = parse_integer(s, value, &v, err))) return rc;
        *(int64_t *)field = v;
        return PP_OK;
    case OPT_ENUM:
    case OPT_STRING: {
        if (!value) return pp_fail(err, PP_EINVAL, "--%s needs a value", s->name);
        if (s->kind == OPT_ENUM && (rc = check_choice(s, value, err))) return rc;
        char *copy = strdup(value);
        if (!copy) return pp_fail(err, PP_ENOMEM, "--%s: out of memory", s->name);
        free(*(char **)field);
        *(char **)field = copy;
        return PP_OK;
    }
    }
    return pp_fail(err, PP_EINVAL, "--%s: bad option kind", s->name);
}

int server_options_set(server_options *o, const char *name, const char *value, char *err) {
    const opt_spec *s = opt_find(name, strlen(name));
    if (!s) return pp_fail(err, PP_EINVAL, "unknown option '%s' (see --help)", name);
    return opt_apply(o, s, value, err);
}

int server_options_init(server_options *o, char *err) {
    memset(o, 0, sizeof *o);
    for (size_t i = 0; i < N_OPTS; i++) {
        if (!g_opts[i].def) continue;
        int rc = opt_apply(o, &g_opts[i], g_opts[i].def, err);
        if (rc) {
            server_options_free(o);
            return rc;
        }
    }
    return PP_OK;
}

void server_options_free(server_options *o) {
    for (size_t i = 0; i < N_OPTS; i++) {
        if (g_opts[i].kind != OPT_STRING && g_opts[i].kind != OPT_ENUM) continue;
        char **field = (char **)((char *)o + g_opts[i].offset);
        free(*field);
        *field = NULL;
    }
}

int server_options_parse(server_options *o, int argc, char **argv, char *err) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || !a[2])
            return pp_fail(err, PP_EINVAL, "unexpected argument '%s' (options start with --; see --help)", a);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const opt_spec *s = opt_find(name, len);
        if (!s) return pp_fail(err, PP_EINVAL, "unknown option '%s' (see --help)", a);
        const char *value = eq ? eq + 1 : NULL;
        if (!eq && s->kind != OPT_FLAG) {
            if (i + 1 >= argc) return pp_fail(err, PP_EINVAL, "--%s needs a value", s->name);
            value = argv[++i];
        }
        int rc = opt_apply(o, s, value, err);
        if (rc) return rc;
    }
    return PP_OK;
}

/* Prints text word-wrapped to width 80 with every line indented by `indent` spaces. */
static void print_wrapped(FILE *out, const char *text, int indent) {
    const int width = 80;
    int col = 0;
    const char *p = text;
    while (*p) {
        while (*p == ' ') p++;
        size_t w = strcspn(p, " ");
        if (!w) break;
        if (col && col + 1 + (int)w > width) {
            fputc('\n', out);
            col = 0;
        }
        if (!col) col = fprintf(out, "%*s", indent, "");
        else col += fprintf(out, " ");
        col += fprintf(out, "%.*s", (int)w, p);
        p += w;
    }
    fputc('\n', out);
}

void server_options_print_help(FILE *out, const char *argv0) {
    fprintf(out, "NAME\n    personaplex-server - real-time speech-to-speech server for PersonaPlex-7B\n\n");
    fprintf(out, "SYNOPSIS\n    %s [--config FILE] [--weights FILE] [OPTION]...\n    %s --demo [OPTION]...\n\n", argv0,
            argv0);
    fprintf(out, "DESCRIPTION\n");
    print_wrapped(out,
                  "Serves the PersonaPlex web UI and its WebSocket at /api/chat, wire-compatible "
                  "with the official PersonaPlex client and Kyutai's Moshi clients: Ogg Opus at "
                  "24 kHz both ways, one output page per 80 ms frame, text pieces as they are "
                  "sampled. Each conversation first runs its voice prompt and <system>-wrapped "
                  "text prompt through the model, then sends the 0x00 handshake. Several "
                  "conversations run at once, each with its own codec state and KV cache.",
                  4);
    for (size_t i = 0; i < N_OPTS; i++) {
        const opt_spec *s = &g_opts[i];
        if (s->group) fprintf(out, "%s  %s\n", i == 0 ? "\nOPTIONS\n" : "\n", s->group);
        fprintf(out, "    --%s%s%s\n", s->name, s->arg ? " " : "", s->arg ? s->arg : "");
        print_wrapped(out, s->help, 12);
        if (s->def && s->kind != OPT_FLAG) {
            char line[256];
            snprintf(line, sizeof line, "Default: %s", s->def);
            print_wrapped(out, line, 12);
        }
    }
    fprintf(out, "\nENDPOINTS\n");
    print_wrapped(out,
                  "GET / and static files of the web UI; GET /api/chat (WebSocket; query "
                  "parameters text_prompt, voice_prompt, text_temperature, text_topk, "
                  "audio_temperature, audio_topk, seed, text_seed, audio_seed, echo_cancel, all "
                  "optional); "
                  "GET /v1/realtime (WebSocket, OpenAI Realtime-style JSON events); GET /v1/twilio "
                  "(WebSocket, Twilio Media Streams); "
                  "GET /api/voices (JSON list of voices); GET /health (JSON readiness: 200 "
                  "when a new conversation would be accepted, 503 while loading, full or "
                  "draining, for load balancers and readiness probes); GET /health/live (200 "
                  "while the process serves, for liveness probes); both 503 with status "
                  "\"failing\" after a failed tick until one runs again; GET /metrics (Prometheus "
                  "text format).",
                  4);
    fprintf(out, "\nFILES\n");
    print_wrapped(out,
                  "STATE_DIR/cert.pem, STATE_DIR/key.pem: the generated self-signed certificate "
                  "and key. STATE_DIR/demo/: the generated demo model. "
                  "/etc/personaplex/personaplex.conf: the configuration the systemd unit "
                  "passes with --config. MODELS_DIR/*.safetensors, tokenizer_spm_32k_3.model, "
                  "voices/: the model files tools/fetch-weights.sh downloads.",
                  4);
    fprintf(out, "\nSIGNALS\n");
    print_wrapped(out,
                  "SIGTERM, SIGINT: drain (see --drain-seconds), then exit; a second one exits "
                  "at once, also while the model loads. SIGHUP: reopen --log-file, reload the TLS certificate and "
                  "key from their files (a bad pair is logged and the old one kept) and the --api-keys file "
                  "(likewise). Under systemd (Type=notify) the server "
                  "reports READY=1 once the model is loaded, STOPPING=1 when draining, and "
                  "pings the watchdog (WatchdogSec=) from its serving loop.",
                  4);
    fprintf(out, "\nENVIRONMENT\n");
    print_wrapped(out,
                  "XDG_STATE_HOME, XDG_DATA_HOME, HOME: locate the default state and model "
                  "directories. NOTIFY_SOCKET, WATCHDOG_USEC: set by systemd. "
                  "PP_WEIGHTS_IN_HOST_MEMORY=1: as --weights-in-host-memory. "
                  "PP_CPU_SIMD=portable|avx2|avx2-int16|avx512-vnni (aarch64: portable|neon): caps the CPU "
                  "backend's loops at that variant; with any other value the CPU backend, and so the start, "
                  "fails. PP_CUDA_*: the CUDA kernels' choices, for timing them (docs/backend.md).",
                  4);
    fprintf(out, "\nEXAMPLES\n");
    fprintf(out, "    %s --demo\n", argv0);
    fprintf(out, "    %s --weights model-turbo2bit.safetensors --voices-dir voices --host 0.0.0.0\n", argv0);
    fprintf(out, "\nEXIT STATUS\n");
    print_wrapped(out,
                  "0 after a clean shutdown (SIGINT or SIGTERM), 1 when start-up fails (the "
                  "model cannot be loaded or does not fit), 2 on a command-line or "
                  "configuration-file error.",
                  4);
}
