/* demo: a tiny built-in model for --demo and the end-to-end tests.
 *
 * pp_demo_write generates, deterministically and with no download, everything a pp_model
 * needs into a directory: an LM (dim 64, 2 layers, a 2-layer depformer) and a Mimi (the
 * sizes of tests/data/golden/mimi-synth) as safetensors with their config.json files, a small
 * SentencePiece tokenizer trained on built-in text, and the 18 preset voice prompts of the
 * official client (NATF0.pt ... VARM4.pt; the default is NATF2.pt). The
 * weights are random with scales chosen so the decoded audio is audible but bounded. It
 * speaks nonsense; it exists so the whole pipeline runs in real time on a small CPU. */
#ifndef PP_SESSION_DEMO_H
#define PP_SESSION_DEMO_H

#include "personaplex.h" /* pp_demo_files, pp_demo_write, pp_demo_write_context */

#endif
