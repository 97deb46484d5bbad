/* session: one conversation, from the prompt phases to the per-frame step (session.c), and
 * the shared model it runs on. The API is declared in include/personaplex.h, which says how a
 * model, its sessions and a batch of them are used. */
#ifndef PP_SESSION_SESSION_H
#define PP_SESSION_SESSION_H

#include "personaplex.h"

#include <stddef.h>

/* Host and backend memory a batch takes (its LM scratch, codec buffers and row arrays): a
 * server's batch of max_sessions rows is part of what its conversations need. */
size_t pp_session_batch_bytes(const pp_session_batch *b);

#endif
