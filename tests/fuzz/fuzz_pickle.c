/* fuzz_pickle: the input is a torch.save archive's data.pkl. The target wraps it in a valid zip
 * (correct CRCs) beside two storages of 384 and 544 bytes, so mutations reach the pickle
 * machine instead of failing the zip checks; whatever the pickle says, every tensor handed out
 * must lie inside those storages. ASan reports any stray access. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/err.h"
#include "io/torchpt.h"
#include "io/voice.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile float sink; /* keeps the reads from being optimised away */

static uint8_t *put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); return p + 2; }
static uint8_t *put32(uint8_t *p, uint32_t v) { return put16(put16(p, v & 0xFFFF), v >> 16); }

/* One STORED entry's local header + data at p; records its central entry at *cd. */
static uint8_t *add(uint8_t *base, uint8_t *p, uint8_t **cd, const char *name, const uint8_t *d, uint32_t n) {
    uint32_t crc = (uint32_t)crc32(0, d, n), nl = (uint32_t)strlen(name), off = (uint32_t)(p - base);
    uint8_t *c = *cd;
    p = put32(p, 0x04034b50), p = put16(p, 20), p = put16(p, 0), p = put16(p, 0), p = put32(p, 0);
    p = put32(p, crc), p = put32(p, n), p = put32(p, n), p = put16(p, nl), p = put16(p, 0);
    memcpy(p, name, nl), p += nl;
    memcpy(p, d, n), p += n;
    c = put32(c, 0x02014b50), c = put16(c, 20), c = put16(c, 20), c = put16(c, 0), c = put16(c, 0), c = put32(c, 0);
    c = put32(c, crc), c = put32(c, n), c = put32(c, n), c = put16(c, nl), c = put16(c, 0), c = put16(c, 0);
    c = put16(c, 0), c = put16(c, 0), c = put32(c, 0), c = put32(c, off);
    memcpy(c, name, nl);
    *cd = c + nl;
    return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const uint8_t storage[544] = {1, 2, 3};
    if (size > (1 << 16)) return 0;
    uint8_t *zip = malloc(size + 4096), cdir[512], *cd = cdir;
    uint8_t *p = add(zip, zip, &cd, "a/data.pkl", data, (uint32_t)size);
    p = add(zip, p, &cd, "a/data/0", storage, 384);
    p = add(zip, p, &cd, "a/data/1", storage, 544);
    uint32_t cd_off = (uint32_t)(p - zip), cd_len = (uint32_t)(cd - cdir);
    memcpy(p, cdir, cd_len), p += cd_len;
    p = put32(p, 0x06054b50), p = put32(p, 0), p = put16(p, 3), p = put16(p, 3), p = put32(p, cd_len);
    p = put32(p, cd_off), p = put16(p, 0);
    size_t len = (size_t)(p - zip);
    char err[PP_ERR_LEN];
    pt_file *f = NULL;
    if (pp_pt_open_memory(zip, len, "fuzz", &f, err) == 0) {
        float s = 0;
        for (size_t i = 0; i < pp_pt_count(f); i++) {
            const pt_tensor *t = pp_pt_at(f, i);
            if (t->nbytes && (t->data < zip || t->data + t->nbytes > zip + len)) abort();
            for (size_t k = 0; k < t->nbytes; k++) s += t->data[k];
        }
        sink = s;
        pp_pt_close(f);
    } else if (f) {
        abort();
    }
    pp_voice v;
    if (pp_voice_load_pt_memory(zip, len, "fuzz", 0, &v, err) == 0) sink = v.embeddings[v.frames * v.dim - 1];
    pp_voice_free(&v);
    free(zip);
    return 0;
}
