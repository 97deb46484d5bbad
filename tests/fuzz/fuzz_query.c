/* fuzz_query: the /api/chat query-string parser (form decoding, numbers, bounds, UTF-8) on
 * arbitrary bytes. Every input must parse or fail cleanly, leaving the parameters usable:
 * a NUL-terminated, valid UTF-8 prompt within its limit and sampling values within their
 * clamps. */
#include "base/err.h"
#include "base/log.h"
#include "session/params.h"
#include "text/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet++) pp_log_set_level(PP_LOG_ERROR);
    pp_session_params p;
    char err[PP_ERR_LEN];
    pp_params_defaults(&p);
    pp_params_parse_query(&p, (const char *)data, size, err);
    size_t n = strnlen(p.text_prompt, sizeof p.text_prompt);
    if (n > PP_PARAMS_MAX_PROMPT || !pp_utf8_valid(p.text_prompt, n)) abort();
    if (strnlen(p.voice, sizeof p.voice) == sizeof p.voice) abort();
    if (!(p.text_temperature >= 0 && p.text_temperature <= 2) || !(p.audio_temperature >= 0 && p.audio_temperature <= 2))
        abort();
    if (p.text_topk < 1 || p.text_topk > 32000 || p.audio_topk < 1 || p.audio_topk > 2048) abort();
    return 0;
}
