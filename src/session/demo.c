/* demo: PROVISIONAL paths only until the Mimi codec lands. */
#include "session/demo.h"

#include "base/err.h"

#include <stdio.h>

int pp_demo_write(const char *dir, pp_demo_files *out, char *err) {
    (void)err;
    snprintf(out->weights, sizeof out->weights, "%s/lm.safetensors", dir);
    snprintf(out->mimi, sizeof out->mimi, "%s/mimi/mimi.safetensors", dir);
    snprintf(out->tokenizer, sizeof out->tokenizer, "%s/tokenizer.model", dir);
    snprintf(out->voices_dir, sizeof out->voices_dir, "%s/voices", dir);
    return PP_OK;
}
