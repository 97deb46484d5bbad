/* voice: voice prompts (docs/model.md §6.2): the per-position input embeddings a voice clip
 * produced in the temporal transformer plus the 17x4 token ring it left behind.
 *
 * Two on-disk forms are read:
 *   NAME.pt                  torch.save({"embeddings": BF16/F16/F32 [N,1,1,dim],
 *                                        "cache": I64 [1,17,4]}), the released voices;
 *   NAME.embeddings.bin      raw little-endian f32 [N, dim]
 *   + NAME.cache.json        [[17 x 4 ints]] (or [1,17,4] nesting), the pair other ports ship;
 *                            sts-web's {"num_frames": N, "dim": D, "cache": ...} must match the .bin;
 *   NAME.bin                 speech-core's ONNX bundles: u32 magic 0x50506558, version 1, 17, 4,
 *                            i64 cache[17·4], u32 frames, u32 dim, f32 embeddings (little endian).
 * pp_voice_save_pt writes the .pt form (BF16 embeddings, as the released voices), so a cloned
 * voice is interchangeable with a preset. Voice names are bare file stems: letters, digits,
 * '_', '-' and '.', at most 64 bytes, not starting with '.' nor ending in .pt or .bin (such a
 * name would be read as that suffix and name another file). */
#ifndef PP_IO_VOICE_H
#define PP_IO_VOICE_H

#include <stddef.h>
#include <stdint.h>

#define PP_VOICE_STREAMS 17 /* text + 8 agent + 8 user codebooks */
#define PP_VOICE_RING 4     /* token ring width: max delay + 3 */
#define PP_VOICE_NAME_MAX 64
#define PP_VOICE_MAX_FRAMES 65536

typedef struct pp_voice {
    int64_t frames;      /* N >= 1 */
    int64_t dim;
    float *embeddings;   /* [frames][dim], malloc'd */
    int64_t cache[PP_VOICE_STREAMS][PP_VOICE_RING];
} pp_voice;

/* Loads a voice file by path: "*.pt", or "*.embeddings.bin" with its "*.cache.json"
 * beside it. dim > 0 requires that embedding width (needed by the raw .bin form);
 * dim == 0 accepts the .pt's own. The cache is returned as stored: the LM checks the
 * cells it reads against its vocabulary. On failure *out is left zeroed. */
int pp_voice_load(const char *path, int64_t dim, pp_voice *out, char *err);
/* The .pt form from memory (the fuzzer's entry point). */
int pp_voice_load_pt_memory(const void *buf, size_t len, const char *label, int64_t dim, pp_voice *out, char *err);
/* The raw pair from memory: bin is the f32 data, json the cache document. */
int pp_voice_load_pair_memory(const void *bin, size_t bin_len, const char *json, size_t json_len, const char *label,
                              int64_t dim, pp_voice *out, char *err);
/* speech-core's NAME.bin from memory (the fuzzer's entry point). */
int pp_voice_load_sc_memory(const void *buf, size_t len, const char *label, int64_t dim, pp_voice *out, char *err);
void pp_voice_free(pp_voice *v);

/* Writes v as a .pt (embeddings rounded to BF16 [N,1,1,dim], cache I64 [1,17,4]). Atomic. */
int pp_voice_save_pt(const char *path, const pp_voice *v, char *err);

/* Resolves a voice name ("NATF2", "NATF2.pt", "NATF2.embeddings.bin" or "NATF2.bin") in dir to
 * the path of an existing file: NAME.pt first, then the pair, then NAME.bin. Names that are paths ("a/b",
 * "../x", "/abs"), empty, too long or hold other characters are refused with PP_EINVAL;
 * a valid name with no file gives PP_ENOTFOUND. */
int pp_voice_resolve(const char *dir, const char *name, char *path_out, size_t path_cap, char *err);
/* The pair's second file: for path NAME.embeddings.bin, NAME.cache.json into out (returns 1);
 * 0 for the one-file forms, or when out is too small. */
int pp_voice_pair_json(const char *path, char *out, size_t cap);

/* Whether the n bytes at stem make a voice name (the rules above), the file name of a voice
 * without its suffix: a voice file of another name is neither listed nor resolved. */
int pp_voice_stem_valid(const char *stem, size_t n);

/* Sorted, de-duplicated names of the voices in dir (NAME.pt and NAME.bin files and complete
 * NAME.embeddings.bin + NAME.cache.json pairs with valid names). *names is one malloc'd
 * block (array followed by strings): free it with free(). */
int pp_voice_list(const char *dir, char ***names, size_t *count, char *err);

#endif
