/* options: the server's settings, one table row per option.
 *
 * Every option has a long name, a kind, a default and a help paragraph in one static table
 * (options.c). The command line and, later, a config file go through the same setter
 * (server_options_set), so a config key is just the long name without its dashes. --help is
 * printed from the same table, so the manual can never drift from the parser. */
#ifndef PP_SERVER_OPTIONS_H
#define PP_SERVER_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

/* Strings are heap copies owned by the struct (server_options_free releases them); NULL means
 * "not given" where the help text describes a derived default. */
typedef struct server_options {
    char *weights;      /* LM checkpoint (any supported format) */
    char *mimi;         /* Mimi codec weights */
    char *tokenizer;    /* SentencePiece model */
    char *voices_dir;   /* directory of the voice prompt files */
    char *voice;        /* default voice name */
    char *text_prompt;  /* default text prompt */
    char *host;         /* address to bind */
    int port;
    char *cert, *key;   /* PEM files; NULL: self-signed pair in state_dir */
    char *state_dir;
    int no_tls;
    char *device;       /* "auto", "cpu", "cuda" */
    int threads;        /* CPU threads of each parallel stage (0: all cores) */
    int max_sessions;   /* 0: "auto", the measured capacity (session/plan.h) */
    char *kv_cache;     /* "auto", "f32", "bf16", "int8" */
    int prompt_cache_mb; /* host memory for prompt states; 0 disables the prompt cache */
    int max_prompt_tokens;
    char *static_dir;
    int64_t seed;
    char *log_level;
    char *log_file;
    int demo;
    char *config;       /* configuration file read before the command line */
    char *models_dir;   /* where --weights is looked for when not given */
    int behind_proxy;   /* log X-Forwarded-For / X-Real-IP as the client address */
    int max_per_ip;     /* open connections one client address may hold (0: no limit) */
    char *allowed_origins; /* pages of other sites that may open a conversation (apikeys.h); NULL: any */
    char *api_keys;     /* file of keys every endpoint but /health requires (apikeys.h); NULL: open */
    int drain_seconds;  /* SIGTERM: how long open conversations may take to close */
    int idle_timeout;   /* seconds without client audio before a conversation ends (0: never) */
    int io_timeout;     /* seconds for a TLS handshake, an HTTP request, a close to drain */
    int trim_after_ms;  /* ms after a conversation ends before freed memory is returned (-1: never) */
    char *echo_cancel;  /* "off", "auto", "on" (engine.h) */
    int demo_context;   /* LM context of the --demo model (0: its default) */
    char *demo_size;    /* "tiny" or "released" (pp_demo_size_parse) */
    int skip_memory_check;
    int weights_in_host_memory; /* CUDA reads the weights from the mapped file (backend.h host_map) */
    char *quantize;             /* NULL, or the layout a dense checkpoint is quantized to while loading */
    int quantize_group;         /* 0: the format's default; -1: int8 per row */
    int quantize_temporal_only;
    int help;
    int version;
} server_options;

/* Fills every option with its table default. 0 or PP_ENOMEM. */
int server_options_init(server_options *o, char *err);
void server_options_free(server_options *o);

/* Sets option `name` (long name without dashes, e.g. "max-sessions") from text; value is
 * NULL for a flag. Checks kind and range; err names the option and the bad value. */
int server_options_set(server_options *o, const char *name, const char *value, char *err);

/* Parses argv (--name VALUE, --name=VALUE, --flag). Fills err on an unknown option, a missing
 * value or a bad value. */
int server_options_parse(server_options *o, int argc, char **argv, char *err);

/* The manual page (--help), generated from the table. */
void server_options_print_help(FILE *out, const char *argv0);

#endif
