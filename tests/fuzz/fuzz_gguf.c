/* fuzz_gguf: any byte string starting "GGUF" is refused by pp_st_open_memory or yields tensors in
 * bounds; every tensor whose dtype is a weight format loads as a [rows, row length] weight and
 * decodes completely (ggml blocks included). ASan reports any stray access. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "io/safetensors.h"
#include "io/weight.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void decode_all(const st_file *f, const st_tensor *t) {
    int64_t cols = t->shape[t->ndim - 1];
    if (cols <= 0 || cols > 4096 || t->numel > (1 << 20)) return; /* keep each input fast */
    pp_weight w;
    char err[PP_ERR_LEN];
    if (pp_weight_load(f, t->name, t->numel / cols, cols, &w, err)) return;
    float *row = malloc((size_t)cols * sizeof *row);
    if (!row) return;
    for (int64_t r = 0; r < w.rows; r++)
        if (pp_weight_decode_rows(&w, r, 1, row, err)) abort();
    free(row);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4 || memcmp(data, "GGUF", 4)) return 0; /* the safetensors target covers the rest */
    st_file *f = NULL;
    char err[PP_ERR_LEN];
    if (pp_st_open_memory(data, size, "fuzz.gguf", &f, err)) {
        if (f) abort();
        return 0;
    }
    for (size_t i = 0; i < pp_st_count(f); i++) {
        const st_tensor *t = pp_st_at(f, i);
        if (pp_st_find(f, t->name) != t) abort();
        if (t->nbytes && (t->data < data || t->data + t->nbytes > data + size)) abort();
        decode_all(f, t);
    }
    (void)pp_st_metadata(f, "general.architecture");
    pp_st_close(f);
    return 0;
}
