/* fuzz_onnx: the readers of an ONNX bundle's files. The first byte picks one:
 *   0  a pair of graphs (u32 little-endian length of temporal_step.onnx, its bytes, then
 *      depformer_step.onnx): parsed (io/protobuf, io/onnx), mapped by structure and converted
 *      (io/onnx_bundle), every tensor of every graph walked;
 *   1  a voices/NAME.bin;   2  a system_prompts.bin;
 *   3  a codec: u32 length of a Mimi config.json and its text, u32 length of mimi_encoder.onnx and
 *      its bytes, then mimi_decoder.onnx: the config parsed, the codec's tensor list made from it
 *      (model/mimi.h), both graphs mapped onto it and converted (io/onnx_mimi).
 * Each input is refused with a message or read within its bounds; ASan reports any stray access. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "io/onnx.h"
#include "io/onnx_bundle.h"
#include "io/onnx_mimi.h"
#include "io/prompts.h"
#include "io/voice.h"
#include "model/mimi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The first length-prefixed part of p[0, n): its bytes and length, the rest in *rest, *rest_len. */
static int split(const uint8_t *p, size_t n, const uint8_t **rest, size_t *rest_len, size_t *first) {
    if (n < 4) return 0;
    *first = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
    if (*first > n - 4) return 0;
    *rest = p + 4 + *first, *rest_len = n - 4 - *first;
    return 1;
}

/* Every converted tensor lies within the buffer handed out with it. */
static void check_within(const st_tensor *tensors, size_t count, const void *base, size_t bytes) {
    for (size_t i = 0; i < count; i++)
        if ((const uint8_t *)tensors[i].data + tensors[i].nbytes > (const uint8_t *)base + bytes) abort();
}

static void walk(const uint8_t *buf, size_t len) {
    pp_onnx_model *m;
    char err[PP_ERR_LEN];
    if (pp_onnx_parse(buf, len, "fuzz.onnx", &m, err)) return;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < pp_onnx_node_count(m); i++) {
        const pp_onnx_node *n = pp_onnx_node_at(m, i);
        for (int k = 0; k < n->n_in; k++) {
            const pp_onnx_tensor *t = pp_onnx_constant(m, n->in[k]);
            if (t && t->data && t->nbytes) sink ^= t->data[0] ^ t->data[t->nbytes - 1];
        }
    }
    (void)sink;
    pp_onnx_close(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char err[PP_ERR_LEN];
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    switch (data[0]) {
    case 0: {
        const uint8_t *second;
        size_t first, second_len;
        if (!split(p, n, &second, &second_len, &first)) return 0;
        walk(p + 4, first);
        walk(second, second_len);
        st_tensor *tensors;
        size_t count, bytes;
        const void *base;
        onnx_bundle *b;
        if (pp_onnx_bundle_open_memory(p + 4, first, second, second_len, &tensors, &count, &base, &bytes, &b, err))
            return 0;
        check_within(tensors, count, base, bytes);
        free(tensors);
        pp_onnx_bundle_free(b);
        return 0;
    }
    case 3: {
        const uint8_t *graphs, *dec;
        size_t config_len, graphs_len, enc_len, dec_len;
        if (!split(p, n, &graphs, &graphs_len, &config_len) || !split(graphs, graphs_len, &dec, &dec_len, &enc_len))
            return 0;
        mimi_config cfg;
        pp_mimi_config_default(&cfg);
        pp_tensor_list want;
        if (pp_mimi_config_parse((const char *)p + 4, config_len, "fuzz config.json", &cfg, err) ||
            pp_mimi_catalog_list(&cfg, &want, err))
            return 0;
        st_tensor *tensors;
        size_t count, bytes;
        const void *base;
        onnx_bundle *b;
        if (!pp_onnx_mimi_open_memory(graphs + 4, enc_len, dec, dec_len, &want, &tensors, &count, &base, &bytes, &b,
                                      err)) {
            check_within(tensors, count, base, bytes);
            free(tensors);
            pp_onnx_bundle_free(b);
        }
        pp_tensor_list_free(&want);
        return 0;
    }
    case 1: {
        pp_voice v;
        if (!pp_voice_load_sc_memory(p, n, "fuzz.bin", 0, &v, err)) pp_voice_free(&v);
        return 0;
    }
    case 2: {
        pp_prompts *ps;
        if (pp_prompts_parse(p, n, "fuzz_prompts.bin", &ps, err)) return 0;
        const int32_t *ids;
        size_t count;
        for (size_t i = 0; i < pp_prompts_count(ps); i++)
            if (pp_prompts_find(ps, pp_prompts_name(ps, i), &ids, &count, err)) abort();
        pp_prompts_free(ps);
        return 0;
    }
    default: return 0;
    }
}
