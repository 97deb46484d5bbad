/* test_voice_torch: interchange with real PyTorch. torch.load must read a .pt our writer made
 * (dtypes, shapes and every value), and our reader must read what torch.save writes.
 * Skipped (77) when no python3 with the torch module is installed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "io/safetensors.h"
#include "io/voice.h"
#include "test.h"

#define FRAMES 5
#define DIM 48

/* Reads the .pt in argv[2] and prints dtype/shape lines then every value; with argv[1] ==
 * "save", instead builds the voice from the text file argv[3] and torch.saves it to argv[2]. */
static const char script[] =
    "import sys, torch\n"
    "mode, path = sys.argv[1], sys.argv[2]\n"
    "if mode == 'load':\n"
    "    d = torch.load(path)\n"
    "    e, c = d['embeddings'], d['cache']\n"
    "    print(sorted(d.keys()), e.dtype, tuple(e.shape), c.dtype, tuple(c.shape))\n"
    "    print(' '.join(repr(float(x)) for x in e.float().flatten()))\n"
    "    print(' '.join(str(int(x)) for x in c.flatten()))\n"
    "else:\n"
    "    vals = open(sys.argv[3]).read().split()\n"
    "    n = %d * %d\n"
    "    e = torch.tensor([float(x) for x in vals[:n]]).view(%d, 1, 1, %d).to(torch.bfloat16)\n"
    "    c = torch.tensor([int(x) for x in vals[n:]], dtype=torch.int64).view(1, 17, 4)\n"
    "    torch.save({'embeddings': e, 'cache': c}, path)\n";

static char tmpdir[] = "/tmp/test_voice_torch.XXXXXX";
static const char *python;

static void make_voice(pp_voice *v) {
    v->frames = FRAMES;
    v->dim = DIM;
    v->embeddings = malloc(FRAMES * DIM * sizeof(float));
    for (int i = 0; i < FRAMES * DIM; i++) v->embeddings[i] = pp_bf16_to_f32(pp_f32_to_bf16(sinf(0.37f * i) * (1 + i % 7)));
    for (int k = 0; k < PP_VOICE_STREAMS; k++)
        for (int c = 0; c < PP_VOICE_RING; c++) v->cache[k][c] = k == 0 ? 32000 - 7 * c : (k * 131 + c * 17) % 2049 - 2 * (c == 3);
}

static int run(const char *args) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s/s.py %s", python, tmpdir, args);
    return system(cmd);
}

static void torch_reads_ours(const pp_voice *v) {
    char err[PP_ERR_LEN], path[256], args[600];
    snprintf(path, sizeof path, "%s/ours.pt", tmpdir);
    TEST_COND("save", pp_voice_save_pt(path, v, err) == 0);
    snprintf(args, sizeof args, "load %s > %s/out.txt", path, tmpdir);
    TEST_COND("torch.load accepts our .pt", run(args) == 0);
    snprintf(path, sizeof path, "%s/out.txt", tmpdir);
    FILE *f = fopen(path, "r");
    char line[256];
    TEST_COND("output", f && fgets(line, sizeof line, f));
    TEST_COND("keys, dtypes and shapes",
              strstr(line, "['cache', 'embeddings'] torch.bfloat16 (5, 1, 1, 48) torch.int64 (1, 17, 4)") != NULL);
    int bad = 0;
    for (int i = 0; f && i < FRAMES * DIM; i++) {
        double x;
        if (fscanf(f, "%lf", &x) != 1 || (float)x != v->embeddings[i]) bad++;
    }
    for (int i = 0; f && i < PP_VOICE_STREAMS * PP_VOICE_RING; i++) {
        long long x;
        if (fscanf(f, "%lld", &x) != 1 || x != v->cache[i / PP_VOICE_RING][i % PP_VOICE_RING]) bad++;
    }
    TEST_COND("torch sees every embedding and cache value exactly", f && bad == 0);
    if (f) fclose(f);
}

static void we_read_torch(const pp_voice *v) {
    char err[PP_ERR_LEN], path[256], args[600];
    snprintf(path, sizeof path, "%s/vals.txt", tmpdir);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < FRAMES * DIM; i++) fprintf(f, "%.9g\n", v->embeddings[i]);
    for (int i = 0; i < PP_VOICE_STREAMS * PP_VOICE_RING; i++) fprintf(f, "%lld\n", (long long)v->cache[i / 4][i % 4]);
    fclose(f);
    snprintf(args, sizeof args, "save %s/theirs.pt %s", tmpdir, path);
    TEST_COND("torch.save", run(args) == 0);
    snprintf(path, sizeof path, "%s/theirs.pt", tmpdir);
    pp_voice got = {0};
    int rc = pp_voice_load(path, DIM, &got, err);
    if (rc) fprintf(stderr, "%s\n", err);
    TEST_COND("we read torch.save's .pt", rc == 0);
    TEST_COND("values equal", rc == 0 && memcmp(got.embeddings, v->embeddings, FRAMES * DIM * sizeof(float)) == 0 &&
                                  memcmp(got.cache, v->cache, sizeof v->cache) == 0);
    pp_voice_free(&got);
}

int main(void) {
    const char *candidates[] = {"python3", "/usr/bin/python3"};
    for (size_t i = 0; i < 2 && !python; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s -c 'import torch' > /dev/null 2>&1", candidates[i]);
        if (system(cmd) == 0) python = candidates[i];
    }
    if (!python) TEST_SKIP("no python3 with torch");
    if (!mkdtemp(tmpdir)) TEST_SKIP("cannot create a temporary directory");
    char path[256];
    snprintf(path, sizeof path, "%s/s.py", tmpdir);
    FILE *f = fopen(path, "w");
    fprintf(f, script, FRAMES, DIM, FRAMES, DIM);
    fclose(f);
    pp_voice v = {0};
    make_voice(&v);
    torch_reads_ours(&v);
    we_read_torch(&v);
    pp_voice_free(&v);
    test_remove_dir(tmpdir);
    return test_report();
}
