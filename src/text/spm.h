/* spm: a C API over libsentencepiece (the project's only C++), plus the PersonaPlex text
 * prompt wrapping (docs/model.md §6.3) and a tiny deterministic tokenizer for --demo mode.
 *
 * Every entry point catches C++ exceptions; none escapes into C. A loaded pp_spm is
 * read-only and may be shared by threads. */
#ifndef PP_TEXT_SPM_H
#define PP_TEXT_SPM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pp_spm pp_spm;

int pp_spm_load_file(pp_spm **out, const char *path, char *err);
/* data: a serialized ModelProto (the bytes of a .model file); copied. */
int pp_spm_load_memory(pp_spm **out, const void *data, size_t len, char *err);
void pp_spm_free(pp_spm *s);

int pp_spm_vocab_size(const pp_spm *s);
/* Encodes UTF-8 text to ids with no BOS/EOS. Writes at most cap ids and sets *n; PP_EFULL
 * (err gives the count) if the text needs more than cap. */
int pp_spm_encode(const pp_spm *s, const char *text, int32_t *ids, size_t cap, size_t *n,
                  char *err);
/* The piece of id as UTF-8 with every U+2581 "▁" turned into a space, NUL-terminated in out;
 * a byte-fallback piece "<0xHH>" gives the one byte HH, so a character the vocabulary lacks
 * arrives over several ids and each of them alone may be part of a character (the server
 * joins them: server/wire.c). PP_EINVAL for an id outside the vocabulary, PP_EFULL if cap is
 * too small. */
int pp_spm_piece(const pp_spm *s, int id, char *out, size_t cap, char *err);

/* The wrapping rule on its own: strip ASCII whitespace; keep the text if it starts and ends
 * with "<system>", else "<system> " + text + " <system>"; an empty result stays empty.
 * *out is malloc'ed (free it). */
int pp_spm_wrap_prompt(const char *prompt, char **out, char *err);
/* Wraps and encodes a text prompt. An empty or all-blank prompt gives *n = 0. More than
 * max_tokens ids is PP_EFULL with the count in err. */
int pp_spm_encode_prompt(const pp_spm *s, const char *prompt, int32_t *ids, size_t max_tokens,
                         size_t *n, char *err);

/* Trains a small unigram model on built-in English text (single-threaded, so the bytes are
 * the same on every run) with exactly vocab_size pieces (PP_SPM_DEMO_MIN_VOCAB..
 * PP_SPM_DEMO_MAX_VOCAB: every printable ASCII character is a piece, and the built-in text
 * supports no more). Ids 0..3 are <unk>, <s>, </s>, <pad> like the real tokenizer's first
 * four slots; "<system>" is one piece. *model is a malloc'ed serialized ModelProto. */
#define PP_SPM_DEMO_MIN_VOCAB 100
#define PP_SPM_DEMO_MAX_VOCAB 256
int pp_spm_make_demo(int vocab_size, void **model, size_t *len, char *err);

#ifdef __cplusplus
}
#endif

#endif
