/* model_dir: the default --weights lookup. */
#include "server/model_dir.h"

#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The published checkpoints that fetch-weights.sh downloads, the default (2-bit) first, then
 * by size; sts-web's pruned GGUF, whole or as its first shard, last. */
static const char *const g_names[] = {"model-turbo2bit.safetensors", "model-nf4.safetensors", "model.safetensors",
                                      "personaplex-24L-q4_k.gguf", "personaplex-24L-q4_k.gguf.shard-00"};
#define N_NAMES (sizeof g_names / sizeof g_names[0])

int model_dir_find_weights(const char *models_dir, char *out, size_t cap, char *err) {
    char dirs[2][4096];
    int n = 0;
    if (models_dir) {
        snprintf(dirs[n++], sizeof dirs[0], "%s", models_dir);
    } else {
        const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
        if (xdg && *xdg) snprintf(dirs[n++], sizeof dirs[0], "%s/personaplex/models", xdg);
        else if (home && *home) snprintf(dirs[n++], sizeof dirs[0], "%s/.local/share/personaplex/models", home);
        snprintf(dirs[n++], sizeof dirs[0], "%s", MODEL_DIR_SYSTEM);
    }
    for (int d = 0; d < n; d++)
        for (size_t i = 0; i < N_NAMES; i++) {
            if ((size_t)snprintf(out, cap, "%s/%s", dirs[d], g_names[i]) >= cap) continue;
            if (access(out, R_OK) == 0) return PP_OK;
        }
    out[0] = '\0';
    return pp_fail(err, PP_ENOTFOUND,
                   "no --weights given and no model-turbo2bit, model-nf4 or model .safetensors nor personaplex-24L-q4_k.gguf in %s%s%s; run "
                   "tools/fetch-weights.sh, or pass --weights FILE (or --demo for the built-in model)",
                   dirs[0], n > 1 ? " or " : "", n > 1 ? dirs[1] : "");
}
