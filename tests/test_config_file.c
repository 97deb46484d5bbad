/* test_config_file: the server's configuration file, its precedence against the command line,
 * the shipped example (tools/deploy/personaplex.conf names every option), the default model
 * lookup and the start-up memory estimate. */
#define _DEFAULT_SOURCE
#include "test.h"

#include "backend/backend.h"
#include "base/err.h"
#include "server/capacity.h"
#include "server/config_file.h"
#include "server/model_dir.h"
#include "server/options.h"

#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64];

static const char *write_file(const char *name, const char *text) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

/* Loads text as a config file into fresh options; returns the code, err filled. */
static int load(server_options *o, const char *text, char *err) {
    server_options_free(o);
    server_options_init(o, err);
    return config_file_load(o, write_file("t.conf", text), err);
}

static void test_parse(void) {
    char err[PP_ERR_LEN];
    server_options o;
    server_options_init(&o, err);
    TEST_COND("a full file loads",
              load(&o,
                   "# comment\n\n  port = 9100  \nno-tls\ndemo = true\nbehind-proxy = false\n"
                   "text-prompt = \"Be # brief, say \\\"hi\\\"\"\nvoice=NATM1\nmax-sessions = 3\n",
                   err) == PP_OK);
    TEST_COND("values applied", o.port == 9100 && o.no_tls && o.demo && !o.behind_proxy && o.max_sessions == 3 &&
                                    strcmp(o.voice, "NATM1") == 0);
    TEST_COND("quotes undone, # kept inside a value", strcmp(o.text_prompt, "Be # brief, say \"hi\"") == 0);
    TEST_COND("a flag set to false", load(&o, "no-tls = true\nno-tls = false\n", err) == PP_OK && !o.no_tls);

    TEST_COND("unknown key refused", load(&o, "port = 1\n\n# x\nbogus-key = 1\n", err) == PP_EINVAL);
    TEST_COND("... with file:line and the key", strstr(err, "t.conf:4:") && strstr(err, "bogus-key"));
    TEST_COND("bad value refused", load(&o, "port = 12ab\n", err) == PP_EINVAL && strstr(err, "t.conf:1:") &&
                                       strstr(err, "port"));
    TEST_COND("out of range refused", load(&o, "\nmax-sessions = 0\n", err) == PP_EINVAL && strstr(err, ":2:"));
    TEST_COND("flag with a bad value refused", load(&o, "demo = maybe\n", err) == PP_EINVAL && strstr(err, "demo"));
    TEST_COND("unbalanced quotes refused", load(&o, "voice = \"NATF1\n", err) == PP_EINVAL && strstr(err, "voice"));
    TEST_COND("dashed key refused with a hint", load(&o, "--port = 1\n", err) == PP_EINVAL && strstr(err, "'port'"));
    TEST_COND("config inside a config refused", load(&o, "config = x\n", err) == PP_EINVAL && strstr(err, "config"));
    TEST_COND("a line without a key refused", load(&o, "= 3\n", err) == PP_EINVAL && strstr(err, ":1:"));
    /* enumerations are checked as the file is read, not once the model loads */
    TEST_COND("an unknown device refused with file:line",
              load(&o, "port = 1\ndevice = gpu\n", err) == PP_EINVAL && strstr(err, "t.conf:2:") &&
                  strstr(err, "--device: 'gpu' is not auto, cpu or cuda"));
    TEST_COND("an unknown quantize format refused with file:line",
              load(&o, "quantize = nf3\n", err) == PP_EINVAL && strstr(err, "t.conf:1:") &&
                  strstr(err, "'nf3' is not nf2, int4, nf4 or int8"));
    TEST_COND("a known one taken", load(&o, "quantize = int4\ndevice = cpu\n", err) == PP_OK &&
                                       strcmp(o.quantize, "int4") == 0 && strcmp(o.device, "cpu") == 0);
    TEST_COND("a missing file named", config_file_load(&o, "/nonexistent/pp.conf", err) == PP_EIO &&
                                          strstr(err, "/nonexistent/pp.conf"));
    server_options_free(&o);
}

static void test_precedence(void) {
    char err[PP_ERR_LEN];
    const char *path = write_file("p.conf", "port = 9100\nhost = 0.0.0.0\nno-tls = true\n");
    const char *argv[] = {"x", "--config", path, "--port=9200", "--no-tls=false"};
    TEST_COND("--config found in argv", config_file_find_arg(5, (char **)argv) == path);
    const char *argv2[] = {"x", "--config=a", "--config=b"};
    TEST_COND("the last --config wins", strcmp(config_file_find_arg(3, (char **)argv2), "b") == 0);
    const char *argv3[] = {"x", "--port", "1"};
    TEST_COND("no --config: NULL", config_file_find_arg(3, (char **)argv3) == NULL);
    server_options o;
    int rc = server_options_init(&o, err) || config_file_load(&o, path, err) ||
             server_options_parse(&o, 5, (char **)argv, err);
    TEST_COND("file then argv", rc == 0);
    TEST_COND("argv overrides the file", o.port == 9200 && !o.no_tls);
    TEST_COND("the file's other settings stay", strcmp(o.host, "0.0.0.0") == 0);
    server_options_free(&o);
}

/* Every option the manual lists has a line ("key =" or "# key =") in the shipped example. */
static void test_example_names_every_option(void) {
    char *help = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&help, &len);
    server_options_print_help(f, "personaplex-server");
    fclose(f);
    char path[512];
    snprintf(path, sizeof path, "%s/../../tools/deploy/personaplex.conf", PP_TEST_DATA);
    FILE *c = fopen(path, "r");
    TEST_COND("the example configuration exists", c != NULL);
    if (!c) {
        free(help);
        return;
    }
    char conf[16384];
    size_t n = fread(conf, 1, sizeof conf - 1, c);
    conf[n] = '\0';
    fclose(c);
    int options = 0, missing = 0;
    for (const char *p = help; (p = strstr(p, "\n    --")); p++) {
        char name[64], line1[80], line2[80];
        if (sscanf(p + 7, "%63[a-z0-9-]", name) != 1) continue;
        if (!strcmp(name, "help") || !strcmp(name, "version") || !strcmp(name, "config")) continue;
        options++;
        snprintf(line1, sizeof line1, "\n%s =", name);
        snprintf(line2, sizeof line2, "\n# %s =", name);
        if (!strstr(conf, line1) && !strstr(conf, line2)) {
            fprintf(stderr, "personaplex.conf lacks '%s'\n", name);
            missing++;
        }
    }
    TEST_COND("the manual lists the options", options >= 20);
    TEST_COND("the example configuration names every option", missing == 0);
    server_options o;
    char err[PP_ERR_LEN];
    server_options_init(&o, err);
    TEST_COND("the example configuration loads", config_file_load(&o, path, err) == PP_OK);
    server_options_free(&o);
    free(help);
}

static void test_model_dir(void) {
    char dir[128], out[256], err[PP_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/models", g_dir);
    mkdir(dir, 0755);
    TEST_COND("empty: not found, places named",
              model_dir_find_weights(dir, out, sizeof out, err) == PP_ENOTFOUND && strstr(err, dir) &&
                  strstr(err, "fetch-weights"));
    write_file("models/model.safetensors", "x");
    write_file("models/model-nf4.safetensors", "x");
    TEST_COND("the smaller checkpoint first", model_dir_find_weights(dir, out, sizeof out, err) == PP_OK &&
                                                  strstr(out, "/model-nf4.safetensors"));
    setenv("XDG_DATA_HOME", g_dir, 1);
    char xdg[160], moved[200];
    snprintf(xdg, sizeof xdg, "%s/personaplex", g_dir);
    snprintf(moved, sizeof moved, "%s/models", xdg);
    mkdir(xdg, 0755);
    rename(dir, moved);
    TEST_COND("default: $XDG_DATA_HOME/personaplex/models",
              model_dir_find_weights(NULL, out, sizeof out, err) == PP_OK && strstr(out, moved));
}

static void test_capacity(void) {
    const uint64_t G = 1ull << 30;
    /* (available - weights - fixed allowance) / per conversation, rounded down. */
    TEST_COND("fit: 2", capacity_sessions_fit(10 * G, 2 * G, 3 * G) == 2);
    TEST_COND("fit: exact edge", capacity_sessions_fit(2 * G + CAPACITY_FIXED_EXTRA + 3 * G, 2 * G, 3 * G) == 1);
    TEST_COND("fit: one byte short", capacity_sessions_fit(2 * G + CAPACITY_FIXED_EXTRA + 3 * G - 1, 2 * G, 3 * G) == 0);
    TEST_COND("fit: weights alone too big", capacity_sessions_fit(G, 2 * G, 1) == 0);
    TEST_COND("the prompt cache: at most a quarter of what the process may take, in whole MiB",
              capacity_prompt_cache(1024, 501ull << 20) == 125u << 20 && capacity_prompt_cache(1024, 23 * G) == 1024u << 20 &&
                  capacity_prompt_cache(0, 23 * G) == 0);
    TEST_COND("a small model's workspace is at most its weights' size (the demo in a 512 MiB container)",
              capacity_fixed_extra(10 << 20) == 10 << 20 && capacity_sessions_fit(G / 2, 10 << 20, 64 << 20) == 7);

    uint64_t kv = 0;
    int context = 0;
    char err[PP_ERR_LEN];
    TEST_COND("KV of the PersonaPlex-7B shape",
              capacity_kv_bytes("/nonexistent/model.safetensors", PP_KV_F32, &kv, &context, err) == 0 &&
                  kv == 2ull * 32 * 3000 * 4096 * 4 && context == 3000);
    /* int8: a byte per value, and a float scale per slot and head for K and for V */
    TEST_COND("int8 KV of the PersonaPlex-7B shape",
              capacity_kv_bytes("/nonexistent/model.safetensors", PP_KV_INT8, &kv, &context, err) == 0 &&
                  kv == 2ull * 32 * 3000 * (4096 + 32 * 4));
    char small[128];
    snprintf(small, sizeof small, "%s/small", g_dir);
    mkdir(small, 0755);
    write_file("small/config.json", "{\"dim\": 256, \"num_heads\": 4, \"num_layers\": 3, \"context\": 100}");
    char w[160];
    snprintf(w, sizeof w, "%s/small/lm.safetensors", g_dir);
    TEST_COND("KV from config.json beside the weights", capacity_kv_bytes(w, PP_KV_F32, &kv, &context, err) == 0 &&
                                                            kv == 2ull * 3 * 100 * 256 * 4 && context == 100);
    TEST_COND("bf16 KV from config.json",
              capacity_kv_bytes(w, PP_KV_BF16, &kv, &context, err) == 0 && kv == 2ull * 3 * 100 * 256 * 2);

    /* A model whose one conversation needs 2 x 32 x 2^20 x 8192 x 4 bytes = 2 TiB: no machine
     * running this test has that much free, so the check must refuse, and saying so. */
    write_file("small/config.json", "{\"dim\": 8192, \"num_heads\": 64, \"context\": 1048576}");
    pp_backend *be = NULL;
    TEST_COND("cpu backend", pp_backend_cpu_create(1, &be, err) == 0);
    if (!be) return;
    int rc = capacity_check(be, w, NULL, PP_KV_F32, 1, 1, err);
    TEST_COND("a model that cannot fit is refused", rc == PP_EFULL && strstr(err, "does not fit") &&
                                                        strstr(err, "--skip-memory-check"));
    TEST_COND("--skip-memory-check lets it start", capacity_check(be, w, NULL, PP_KV_F32, 1, 0, err) == PP_OK);
    write_file("small/config.json", "{\"dim\": 256, \"num_heads\": 4, \"num_layers\": 3, \"context\": 100}");
    TEST_COND("a small model with 4 conversations fits", capacity_check(be, w, NULL, PP_KV_INT8, 4, 1, err) == PP_OK);
    pp_backend_destroy(be);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/pp-config-XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    test_parse();
    test_precedence();
    test_example_names_every_option();
    test_model_dir();
    test_capacity();
    test_remove_dir(g_dir);
    return test_report();
}
