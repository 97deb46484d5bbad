/* golden_case: where a golden LM case (tests/data/golden/lm-*) keeps its weights, the first of
 * model.gguf, bundle/ (an ONNX bundle) and model.safetensors, and its configuration (the
 * config.json beside those weights, else the case folder's). The golden runner and the tests
 * that replay cases read them through this one function. */
#ifndef PP_TOOLS_GOLDEN_CASE_H
#define PP_TOOLS_GOLDEN_CASE_H

#include <stddef.h>
#include <stdio.h>
#include <unistd.h>

#include "model/lm_config.h"

static inline void golden_case_paths(const char *dir, char *wpath, size_t wcap, char *cpath, size_t ccap) {
    static const char *const weights[] = {"model.gguf", "bundle", "model.safetensors"};
    for (size_t i = 0; i < sizeof weights / sizeof *weights; i++) {
        snprintf(wpath, wcap, "%s/%s", dir, weights[i]);
        if (!access(wpath, F_OK)) break;
    }
    if (!pp_lm_config_beside(wpath, cpath, ccap)) snprintf(cpath, ccap, "%s/config.json", dir);
}

#endif
