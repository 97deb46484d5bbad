/* fuzz_mimi_config: the Mimi codec's config.json parser (model/mimi.h) on arbitrary bytes.
 * Every input is refused or yields a configuration that pp_mimi_catalog can list tensors for
 * without overflow (the checks keep every size product inside an int). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/log.h"
#include "model/mimi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void count(void *ctx, const char *name, int ndim, const int64_t *shape) {
    (void)name;
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0) abort(); /* a tensor of a valid config has a positive size */
    ++*(int *)ctx;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet++) pp_log_set_level(PP_LOG_ERROR);
    mimi_config c;
    char err[PP_ERR_LEN];
    pp_mimi_config_default(&c);
    if (pp_mimi_config_parse((const char *)data, size, "fuzz", &c, err) != PP_OK) return 0;
    if (c.sample_rate <= 0 || c.frame_size <= 0) abort();
    int n = 0;
    if (pp_mimi_catalog(&c, count, &n, err) == PP_OK && n == 0) abort();
    return 0;
}
