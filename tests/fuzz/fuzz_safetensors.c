/* fuzz_safetensors: any byte string either is refused by pp_st_open_memory or yields tensors
 * that all lie in bounds: every tensor is found by name, passes pp_st_expect with its own shape
 * and is read completely with pp_st_load_f32 / pp_st_load_i64. ASan reports any stray access. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/err.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads the tensor in chunks; unsupported dtypes are expected to be refused cleanly. */
static void read_all(const st_file *f, const st_tensor *t) {
    enum { CHUNK = 256 };
    float fv[CHUNK];
    int64_t iv[CHUNK];
    char err[PP_ERR_LEN];
    for (int64_t at = 0; at < t->numel; at += CHUNK) {
        int64_t n = t->numel - at < CHUNK ? t->numel - at : CHUNK;
        int rf = pp_st_load_f32(f, t, at, n, fv, err), ri = pp_st_load_i64(f, t, at, n, iv, err);
        if (rf && ri) return; /* neither a float nor an integer dtype */
    }
    /* a range past the end must be refused, never read */
    if (pp_st_load_f32(f, t, t->numel, 1, fv, err) == 0 || pp_st_load_i64(f, t, 0, t->numel + 1, iv, err) == 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_file *f = NULL;
    char err[PP_ERR_LEN];
    if (pp_st_open_memory(data, size, "fuzz", &f, err)) {
        if (f) abort(); /* a refusal must not hand out a file */
        return 0;
    }
    for (size_t i = 0; i < pp_st_count(f); i++) {
        const st_tensor *t = pp_st_at(f, i), *same;
        if (pp_st_find(f, t->name) != t) abort();
        if (pp_st_expect(f, t->name, t->ndim, t->shape, &same, err) || same != t) abort();
        if (t->nbytes && (t->data < data || t->data + t->nbytes > data + size)) abort();
        read_all(f, t);
    }
    (void)pp_st_metadata(f, "format");
    pp_st_close(f);
    return 0;
}
