/* personaplex.h: the engine's public C API, for programs that embed it instead of running
 * personaplex-server.
 *
 * Lifecycle (every call returns 0 or a negative PP_E* code and fills err[PP_ERR_LEN]):
 *
 *     pp_backend *be;   pp_backend_create("auto", 0, &be, err);      // CUDA if present, else CPU
 *     pp_model *m;      pp_model_open(be, &paths, &m, err);          // weights, codec, tokenizer
 *     pp_session_params p;  pp_params_defaults(&p);                  // voice, prompt, sampling
 *     pp_session *s;    pp_session_create(m, &p, max_prompt_tokens, &s, err);
 *     while ((rc = pp_session_prefill(s, err)) == 0) {}              // prompt phases, 32 frames a call
 *     for each 80 ms of microphone audio (1920 samples at 24 kHz):
 *         pp_session_step(s, pcm_in, pcm_out, piece, NULL, err);     // 1920 samples + a text piece out
 *     pp_session_destroy(s); pp_model_close(m); pp_backend_destroy(be);
 *
 * A model is shared by any number of sessions; each session is used by one thread at a time.
 * To serve many at once: pp_model_set_prompt_cache(m, bytes, err) before the first session
 * (sessions with the same voice and prompt then start in milliseconds), and per 80 ms tick
 * pp_session_encode each session, one pp_session_batch_step over all of them (a
 * pp_session_batch from pp_session_batch_create), pp_session_decode each.
 * pp_demo_write makes a tiny random model to try the pipeline without downloading weights.
 * The declarations live in the module headers below; this header is the supported surface. */
#ifndef PERSONAPLEX_H
#define PERSONAPLEX_H

#include "backend/backend.h" /* pp_backend_create, pp_backend_destroy */
#include "base/err.h"        /* PP_ERR_LEN, PP_E* codes, pp_strerror */
#include "session/demo.h"    /* pp_demo_write */
#include "session/params.h"  /* pp_session_params, pp_params_defaults, pp_params_parse_query */
#include "session/session.h" /* pp_model_*, pp_session_* */

#endif
