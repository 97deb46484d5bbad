/* fuzz_lm_config: the LM's config.json parser (model/lm_config.h) on arbitrary bytes. Every
 * input is refused or yields a configuration the loader can size tensors from: positive
 * sizes, heads dividing the widths, delays in range, derived FFN widths filled in. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/log.h"
#include "model/lm_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet++) pp_log_set_level(PP_LOG_ERROR);
    pp_lm_config c;
    char err[PP_ERR_LEN];
    if (pp_lm_config_parse((const char *)data, size, "fuzz", &c, err) != PP_OK) return 0;
    if (c.dim <= 0 || c.num_heads <= 0 || c.dim % c.num_heads || c.num_layers <= 0 || c.context < 2) abort();
    if (c.ffn_hidden <= 0 || c.dep_ffn_hidden <= 0 || c.dep_dim <= 0 || c.dep_num_heads <= 0) abort();
    if (c.dep_q < 0 || c.dep_q > PP_LM_MAX_DEP_Q || c.n_q < c.dep_q || c.card <= 0 || c.text_card <= 0) abort();
    int max_delay = pp_lm_config_max_delay(&c);
    for (int k = 0; k < PP_LM_STREAMS; k++)
        if (c.delays[k] < 0 || c.delays[k] > max_delay) abort();
    return 0;
}
