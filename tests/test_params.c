/* test_params: session parameters from /api/chat query strings as real clients send them. */
#include "test.h"

#include "base/err.h"
#include "base/log.h"
#include "base/number.h"
#include "session/params.h"
#include "text/utf8.h"

#include <string.h>

static int parse(pp_session_params *p, const char *q, char *err) {
    pp_params_defaults(p);
    return pp_params_parse_query(p, q, strlen(q), err);
}

int main(void) {
    char err[PP_ERR_LEN];
    pp_session_params p;
    pp_log_set_level(PP_LOG_ERROR); /* the clamping warnings are expected here */

    pp_params_defaults(&p);
    TEST_COND("default voice", strcmp(p.voice, "NATF2") == 0);
    TEST_COND("default sampling is the reference's", p.text_temperature == 0.7f && p.text_topk == 25 &&
                                                         p.audio_temperature == 0.8f && p.audio_topk == 250);
    TEST_COND("default seed", p.text_seed == 42424242u && p.audio_seed == 42424242u);

    /* What the official web client's URLSearchParams produces. */
    const char *web = "text_temperature=0.6&text_topk=30&audio_temperature=0.9&audio_topk=200&pad_mult=0"
                      "&text_seed=123&audio_seed=456&repetition_penalty_context=64&repetition_penalty=1"
                      "&text_prompt=You+are+a+wise+%26+friendly+teacher%2E+Caf%C3%A9%21&voice_prompt=NATM1.pt";
    TEST_COND("web client query parses", parse(&p, web, err) == PP_OK);
    TEST_COND("prompt decoded (+, %26, UTF-8)", strcmp(p.text_prompt, "You are a wise & friendly teacher. Café!") == 0);
    TEST_COND("voice kept as sent", strcmp(p.voice, "NATM1.pt") == 0);
    TEST_COND("sampling honoured", p.text_temperature == 0.6f && p.text_topk == 30 && p.audio_temperature == 0.9f &&
                                       p.audio_topk == 200);
    TEST_COND("seeds honoured", p.text_seed == 123 && p.audio_seed == 456);

    TEST_COND("out-of-range values are clamped",
              parse(&p, "text_temperature=5&audio_temperature=-1&text_topk=0&audio_topk=99999", err) == PP_OK &&
                  p.text_temperature == 2.0f && p.audio_temperature == 0.0f && p.text_topk == 1 && p.audio_topk == 2048);
    TEST_COND("junk numbers keep the defaults",
              parse(&p, "text_temperature=abc&text_topk=1e9x&audio_temperature=nan&audio_topk=", err) == PP_OK &&
                  p.text_temperature == 0.7f && p.text_topk == 25 && p.audio_temperature == 0.8f && p.audio_topk == 250);
    TEST_COND("seeds span 64 bits unsigned",
              parse(&p, "seed=18446744073709551615&audio_seed=9223372036854775808", err) == PP_OK &&
                  p.text_seed == UINT64_MAX && p.audio_seed == 9223372036854775808u);
    TEST_COND("a seed past 64 bits, negative or junk keeps the default",
              parse(&p, "text_seed=18446744073709551616&audio_seed=-5&seed=7x", err) == PP_OK &&
                  p.text_seed == 42424242u && p.audio_seed == 42424242u && parse(&p, "seed=%20-3", err) == PP_OK &&
                  p.text_seed == 42424242u);
    long long n = 7;
    TEST_COND("pp_parse_integer: whole strings only",
              pp_parse_integer("-12", &n) && n == -12 && !pp_parse_integer("12abc", &n) && !pp_parse_integer("", &n) &&
                  !pp_parse_integer("99999999999999999999", &n) && !pp_parse_integer("-", &n) && n == -12);
    int distinct = 1;
    uint64_t seen[1000];
    for (int k = 0; k < 1000; k++) {
        seen[k] = pp_params_conversation_seed(42424242u, (uint64_t)k + 1);
        for (int j = 0; j < k; j++) distinct &= seen[j] != seen[k];
    }
    TEST_COND("a server's conversations 1..1000 each get their own seed", distinct);
    TEST_COND("... the same on every run, another under another base",
              pp_params_conversation_seed(42424242u, 5) == seen[4] && pp_params_conversation_seed(7, 5) != seen[4]);
    TEST_COND("seed sets both; -1 keeps the server's",
              parse(&p, "seed=7", err) == PP_OK && p.text_seed == 7 && p.audio_seed == 7 &&
                  parse(&p, "seed=-1", err) == PP_OK && p.text_seed == 42424242u);
    TEST_COND("echo_cancel: unset by default, 1/0, true/false, on/off; junk keeps it",
              parse(&p, "", err) == PP_OK && p.echo_cancel == -1 && parse(&p, "echo_cancel=on", err) == PP_OK &&
                  p.echo_cancel == 1 && parse(&p, "echo_cancel=0", err) == PP_OK && p.echo_cancel == 0 &&
                  parse(&p, "echo_cancel=true", err) == PP_OK && p.echo_cancel == 1 &&
                  parse(&p, "echo_cancel=maybe", err) == PP_OK && p.echo_cancel == -1);
    TEST_COND("empty pairs, bare keys and unknown keys are ignored",
              parse(&p, "&&=&x&=y&foo=bar&text_prompt", err) == PP_OK && p.text_prompt[0] == '\0');
    TEST_COND("empty query", parse(&p, "", err) == PP_OK);
    TEST_COND("a bad escape elsewhere is skipped", parse(&p, "text_topk=%zz&audio_topk=%4", err) == PP_OK &&
                                                       p.text_topk == 25 && p.audio_topk == 250);

    TEST_COND("bad escape in the prompt is an error", parse(&p, "text_prompt=ab%4", err) == PP_EINVAL);
    TEST_COND("escaped NUL in the prompt is an error", parse(&p, "text_prompt=a%00b", err) == PP_EINVAL);
    TEST_COND("non-UTF-8 prompt is an error", parse(&p, "text_prompt=%FF%FE", err) == PP_EINVAL);
    TEST_COND("lines and tabs in the prompt", parse(&p, "text_prompt=a%0Ab%09c%0D", err) == PP_OK &&
                                                  strcmp(p.text_prompt, "a\nb\tc\r") == 0);
    TEST_COND("other control characters are an error",
              parse(&p, "text_prompt=a%01b", err) == PP_EINVAL && strstr(err, "0x01") &&
                  parse(&p, "text_prompt=a%7F", err) == PP_EINVAL);
    TEST_COND("empty voice is an error", parse(&p, "voice_prompt=", err) == PP_EINVAL);
    static char big[PP_PARAMS_MAX_PROMPT + 64];
    strcpy(big, "text_prompt=");
    memset(big + 12, 'a', PP_PARAMS_MAX_PROMPT + 1);
    TEST_COND("prompt over the byte limit is PP_EFULL", parse(&p, big, err) == PP_EFULL && strstr(err, "limit"));
    big[12 + PP_PARAMS_MAX_PROMPT] = '\0';
    TEST_COND("prompt at the byte limit is accepted", parse(&p, big, err) == PP_OK &&
                                                          strlen(p.text_prompt) == PP_PARAMS_MAX_PROMPT);
    TEST_COND("pp_params_set takes decoded pairs", pp_params_set(&p, "text_prompt", "a+b %41", err) == PP_OK &&
                                                       strcmp(p.text_prompt, "a+b %41") == 0);

    /* UTF-8 validation: the rules of RFC 3629. */
    TEST_COND("ascii", pp_utf8_valid("hello", 5));
    TEST_COND("2, 3 and 4-byte sequences", pp_utf8_valid("\xc3\xa9\xe2\x80\x94\xf0\x9f\x98\x80", 9));
    TEST_COND("truncated", !pp_utf8_valid("\xe2\x80", 2));
    TEST_COND("overlong", !pp_utf8_valid("\xc0\xaf", 2) && !pp_utf8_valid("\xe0\x80\xaf", 3));
    TEST_COND("surrogate", !pp_utf8_valid("\xed\xa0\x80", 3));
    TEST_COND("beyond U+10FFFF", !pp_utf8_valid("\xf4\x90\x80\x80", 4));
    TEST_COND("stray continuation", !pp_utf8_valid("\x80", 1));
    return test_report();
}
