/* model_internal: what the session layer's own modules (plan.c) see of a pp_model beyond the
 * public session.h: its LM and codec. Not part of the public API. */
#ifndef PP_SESSION_MODEL_INTERNAL_H
#define PP_SESSION_MODEL_INTERNAL_H

#include "model/lm.h"
#include "model/mimi.h"
#include "session/session.h"

const pp_lm *pp_model_lm(const pp_model *m);
const mimi_model *pp_model_mimi(const pp_model *m);

#endif
