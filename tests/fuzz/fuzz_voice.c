/* fuzz_voice: any byte string is either refused or yields a voice whose every value was read
 * from inside the input: as a .pt (zip + pickle) archive, as a bare zip, and split in two
 * halves as the raw .embeddings.bin + .cache.json pair. ASan reports any stray access. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/err.h"
#include "io/torchpt.h"
#include "io/voice.h"
#include "io/zip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile float sink; /* keeps the reads from being optimised away */

/* Touches every byte so ASan checks the whole range. */
static unsigned touch(const uint8_t *p, size_t n) {
    unsigned s = 0;
    for (size_t i = 0; i < n; i++) s += p[i];
    return s;
}

static void check_voice(int rc, const pp_voice *v) {
    if (rc) {
        if (v->embeddings) abort(); /* a refusal must not hand out data */
        return;
    }
    if (v->frames < 1 || v->dim < 1 || !v->embeddings) abort();
    float s = 0;
    for (int64_t i = 0; i < v->frames * v->dim; i++) s += v->embeddings[i];
    sink = s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[PP_ERR_LEN];
    unsigned bytes = 0;
    zip_archive *z = NULL;
    if (pp_zip_open_memory(data, size, "fuzz", &z, err) == 0) {
        for (size_t i = 0; i < pp_zip_count(z); i++) {
            const zip_entry *e = pp_zip_at(z, i);
            if (pp_zip_find(z, e->name) != e) abort();
            bytes += touch(e->data, e->size);
        }
        pp_zip_close(z);
    }
    pt_file *f = NULL;
    if (pp_pt_open_memory(data, size, "fuzz", &f, err) == 0) {
        for (size_t i = 0; i < pp_pt_count(f); i++) bytes += touch(pp_pt_at(f, i)->data, pp_pt_at(f, i)->nbytes);
        pp_pt_close(f);
    }
    pp_voice v;
    check_voice(pp_voice_load_pt_memory(data, size, "fuzz", 0, &v, err), &v);
    pp_voice_free(&v);
    size_t half = size / 2;
    check_voice(pp_voice_load_pair_memory(data, half, (const char *)data + half, size - half, "fuzz", 4, &v, err), &v);
    pp_voice_free(&v);
    sink = (float)bytes;
    return 0;
}
