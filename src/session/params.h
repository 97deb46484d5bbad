/* params: the settings of one conversation (persona, voice, sampling, seeds) and how a
 * client's /api/chat query string sets them (docs/protocol.md §1.4).
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

#include "personaplex.h" /* pp_session_params, pp_params_defaults, pp_params_set, pp_params_parse_query */

/* Sets the voice name as the client gave it ("NATF2" or "NATF2.pt"); only its length is
 * checked here, the voices module resolves it (and refuses anything path-like). */
int pp_params_set_voice(pp_session_params *p, const char *name, char *err);

/* The seed of a server's conversation number `conversation` (1, 2, ...) under its base seed: each
 * conversation draws its own tokens, as the reference's do (it seeds once per process), and the same
 * base and conversation give the same seed on every run. */
uint64_t pp_params_conversation_seed(uint64_t base, uint64_t conversation);

#endif
