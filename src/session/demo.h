/* demo: a built-in model for --demo and the end-to-end tests.
 *
 * pp_demo_write generates, deterministically and with no download, everything a pp_model
 * needs into a directory: an LM and a Mimi as safetensors with their config.json files, a small
 * SentencePiece tokenizer trained on built-in text, and the 18 preset voice prompts of the
 * official client (NATF0.pt ... VARM4.pt; the default is NATF2.pt). The tiny size (an LM of
 * dim 64 with 2 layers and a 1-layer depformer, a Mimi of tests/data/golden/mimi-synth's sizes)
 * runs the whole pipeline in real time on a small CPU; the released size has the released
 * model's shapes and NF2 layout, so a GPU can be measured at 64 conversations without the
 * checkpoint. The weights are random with scales chosen so the decoded audio is audible but
 * bounded. It speaks nonsense. */
#ifndef PP_SESSION_DEMO_H
#define PP_SESSION_DEMO_H

#include "personaplex.h" /* pp_demo_files, pp_demo_opts, pp_demo_write */

/* 1 when name (with or without ".pt") is one of the voices pp_demo_write writes (NATF0 ... VARM4),
 * so a server can refuse a --voice the demo lacks before it builds the model. */
int pp_demo_voice_known(const char *name);

#endif
