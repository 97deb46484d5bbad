/* session: one conversation, from the prompt phases to the per-frame step (session.c), and
 * the shared model it runs on. The API is declared in include/personaplex.h, which says how a
 * model, its sessions and a batch of them are used. */
#ifndef PP_SESSION_SESSION_H
#define PP_SESSION_SESSION_H

#include "personaplex.h"

#endif
