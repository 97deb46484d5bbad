/* params: the settings of one conversation (persona, voice, sampling, seeds) and how a
 * client's /api/chat query string sets them (spec/protocol.md §1.4, §2.5 item 3).
 *
 * Every parameter is optional; the server fills the defaults first. Sampling values out of
 * range are clamped and logged, malformed numbers and unknown keys are logged and ignored,
 * so a client with odd settings still gets a conversation. Only a prompt or voice that cannot
 * be used (too long, not UTF-8, a name that could escape the voices directory) is an error:
 * the session cannot start with it. */
#ifndef PP_SESSION_PARAMS_H
#define PP_SESSION_PARAMS_H

#include <stddef.h>
#include <stdint.h>

/* The web client caps its textarea at 1000 characters; 4 UTF-8 bytes each is the worst case. */
#define PP_PARAMS_MAX_PROMPT 4096
#define PP_PARAMS_MAX_VOICE 64

typedef struct pp_session_params {
    char voice[PP_PARAMS_MAX_VOICE];          /* voice name, e.g. "NATF2" or "NATF2.pt" */
    char text_prompt[PP_PARAMS_MAX_PROMPT + 1]; /* UTF-8, not yet <system>-wrapped */
    float text_temperature;                   /* [0, 2]; 0 is greedy */
    int text_topk;                            /* [1, 32000] */
    float audio_temperature;                  /* [0, 2] */
    int audio_topk;                           /* [1, 2048] */
    uint64_t text_seed, audio_seed;
    int echo_cancel;                          /* echo_cancel=: 1 asks for it, 0 refuses it, -1 unset */
} pp_session_params;

/* The reference sampling (text 0.7 / top-25, audio 0.8 / top-250), voice "NATF2", an empty
 * prompt, the reference seed 42424242 for both streams, echo cancellation as the server says. */
void pp_params_defaults(pp_session_params *p);

/* Applies one decoded key=value pair (value already free of %XX and '+' escapes). Returns 0
 * when the pair was used, clamped or ignored (each logged), or PP_EFULL / PP_EINVAL with err
 * set when text_prompt or voice_prompt is unusable. */
int pp_params_set(pp_session_params *p, const char *key, const char *value, char *err);

/* Parses a raw application/x-www-form-urlencoded query ("a=1&b=x+y%21", no leading '?') of
 * len bytes and applies each pair with pp_params_set. Malformed escapes are errors only
 * inside text_prompt/voice_prompt; elsewhere the pair is logged and skipped. */
int pp_params_parse_query(pp_session_params *p, const char *query, size_t len, char *err);

/* Sets the voice name as the client gave it ("NATF2" or "NATF2.pt"); only its length is
 * checked here, the voices module resolves it (and refuses anything path-like). */
int pp_params_set_voice(pp_session_params *p, const char *name, char *err);

/* True when the len bytes at s are well-formed UTF-8 (no overlongs, surrogates or > U+10FFFF). */
int pp_utf8_valid(const char *s, size_t len);

#endif
