/* test_server_options: the server's option table, its argv parser and its manual. */
#include "test.h"

#include "base/err.h"
#include "server/options.h"

#include <string.h>

static int parse(server_options *o, int argc, const char **argv, char *err) {
    server_options_free(o);
    if (server_options_init(o, err)) return -100;
    return server_options_parse(o, argc, (char **)argv, err);
}

int main(void) {
    char err[PP_ERR_LEN];
    server_options o;
    TEST_COND("init", server_options_init(&o, err) == PP_OK);
    TEST_COND("defaults", o.port == 8998 && strcmp(o.host, "127.0.0.1") == 0 && strcmp(o.voice, "NATF2") == 0 &&
                              o.max_sessions == 0 /* auto */ && strcmp(o.kv_cache, "auto") == 0 &&
                              o.prompt_cache_mb == 1024 && !o.demo && !o.no_tls && o.seed == 42424242 &&
                              strcmp(o.device, "auto") == 0 && o.weights == NULL);
    TEST_COND("default prompt is the reference's", strstr(o.text_prompt, "wise and friendly teacher") != NULL);

    const char *a1[] = {"x", "--demo", "--port", "9000", "--host=0.0.0.0", "--no-tls", "--text-prompt", "Be brief.",
                        "--seed", "-1", "--max-sessions=8"};
    TEST_COND("argv parses", parse(&o, 11, a1, err) == PP_OK);
    TEST_COND("values set", o.demo && o.port == 9000 && strcmp(o.host, "0.0.0.0") == 0 && o.no_tls &&
                                strcmp(o.text_prompt, "Be brief.") == 0 && o.seed == -1 && o.max_sessions == 8);

    const char *a8[] = {"x", "--max-sessions", "auto", "--kv-cache=int8", "--prompt-cache-mb", "0"};
    TEST_COND("auto, KV format, prompt cache off", parse(&o, 6, a8, err) == PP_OK && o.max_sessions == 0 &&
                                                         strcmp(o.kv_cache, "int8") == 0 && o.prompt_cache_mb == 0);
    const char *a9[] = {"x", "--max-sessions", "automatic"};
    TEST_COND("a count is a number or auto", parse(&o, 3, a9, err) == PP_EINVAL && strstr(err, "--max-sessions"));
    const char *a2[] = {"x", "--bogus"};
    TEST_COND("unknown option", parse(&o, 2, a2, err) == PP_EINVAL && strstr(err, "--bogus"));
    const char *a3[] = {"x", "--port", "70000"};
    TEST_COND("out of range", parse(&o, 3, a3, err) == PP_EINVAL && strstr(err, "--port"));
    const char *a4[] = {"x", "--port"};
    TEST_COND("missing value", parse(&o, 2, a4, err) == PP_EINVAL);
    const char *a5[] = {"x", "--port", "12ab"};
    TEST_COND("not a number", parse(&o, 3, a5, err) == PP_EINVAL);
    const char *a6[] = {"x", "--demo=maybe"};
    TEST_COND("flag with a value", parse(&o, 2, a6, err) == PP_EINVAL);
    const char *a7[] = {"x", "stray"};
    TEST_COND("stray argument", parse(&o, 2, a7, err) == PP_EINVAL);

    /* The config-file path: the same setter by key. */
    TEST_COND("set by key", server_options_set(&o, "voices-dir", "/v", err) == PP_OK && strcmp(o.voices_dir, "/v") == 0);
    TEST_COND("set flag by key", server_options_set(&o, "no-tls", NULL, err) == PP_OK && o.no_tls);
    TEST_COND("set unknown key", server_options_set(&o, "nope", "1", err) == PP_EINVAL);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    server_options_print_help(f, "personaplex-server");
    fclose(f);
    const char *must[] = {"--weights", "--mimi", "--tokenizer", "--voices-dir", "--voice", "--text-prompt", "--host",
                          "--port", "--cert", "--key", "--state-dir", "--no-tls", "--device", "--max-sessions",
                          "--static-dir", "--seed", "--log-level", "--demo", "--help", "--version", "--kv-cache",
                          "--prompt-cache-mb", "SYNOPSIS",
                          "EXIT STATUS"};
    int all = 1;
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) all &= strstr(text, must[i]) != NULL;
    TEST_COND("the manual documents every option", all);
    TEST_COND("... every WebSocket endpoint", strstr(text, "/v1/realtime") && strstr(text, "/v1/twilio"));
    TEST_COND("... and what SIGHUP reloads", strstr(text, "and the --api-keys file"));
    /* The start-up check (main.c) sizes the weights and one conversation; --max-sessions is
     * capped by the measured plan afterwards, not checked before the load. */
    TEST_COND("... and what the memory check counts", strstr(text, "the weights plus one conversation's KV cache") &&
                                                           !strstr(text, "one KV cache per --max-sessions"));
    free(text);
    server_options_free(&o);
    return test_report();
}
