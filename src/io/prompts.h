/* prompts: named system prompts stored as token ids, speech-core's system_prompts.bin: u32 magic
 * 0x50506573, u32 version 1, u32 count, then per prompt u32 name length, the name (no NUL),
 * u32 token count, i32 ids; little endian. The ids are the whole prompt as the model reads it,
 * so a session uses them as they are (the tokenizer is not involved). */
#ifndef PP_IO_PROMPTS_H
#define PP_IO_PROMPTS_H

#include <stddef.h>
#include <stdint.h>

#define PP_PROMPT_NAME_MAX 64

typedef struct pp_prompts pp_prompts;

int pp_prompts_load(const char *path, pp_prompts **out, char *err);
/* The same from memory (the fuzzer's entry point). */
int pp_prompts_parse(const void *buf, size_t len, const char *label, pp_prompts **out, char *err);
void pp_prompts_free(pp_prompts *p);

size_t pp_prompts_count(const pp_prompts *p);
const char *pp_prompts_name(const pp_prompts *p, size_t i);
/* The prompt NAME's ids; PP_ENOTFOUND (err lists the names there are) when there is none. */
int pp_prompts_find(const pp_prompts *p, const char *name, const int32_t **ids, size_t *n, char *err);

#endif
