/* session: PROVISIONAL loopback until the Mimi codec lands (replaced by the real pipeline). */
#include "session/session.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

struct pp_model {
    pp_backend *be;
    char voices_dir[4096];
};

struct pp_session {
    int prompt_frames, done;
    uint64_t n;
};

int pp_model_open(pp_backend *be, const pp_model_paths *paths, pp_model **out, char *err) {
    pp_model *m = calloc(1, sizeof *m);
    if (!m) return pp_fail(err, PP_ENOMEM, "model: out of memory");
    m->be = be;
    snprintf(m->voices_dir, sizeof m->voices_dir, "%s", paths->voices_dir ? paths->voices_dir : "");
    *out = m;
    return PP_OK;
}
void pp_model_close(pp_model *m) { free(m); }
const char *pp_model_name(const pp_model *m) { (void)m; return "demo"; }
const char *pp_model_backend(const pp_model *m) { return m->be->ops->name; }
const char *pp_model_voices_dir(const pp_model *m) { return m->voices_dir[0] ? m->voices_dir : NULL; }

int pp_session_create(pp_model *m, const pp_session_params *p, int max_prompt_tokens, pp_session **out, char *err) {
    (void)m;
    if ((int)strlen(p->text_prompt) / 4 > max_prompt_tokens) return pp_fail(err, PP_EFULL, "text prompt too long");
    pp_session *s = calloc(1, sizeof *s);
    if (!s) return pp_fail(err, PP_ENOMEM, "session: out of memory");
    s->prompt_frames = 12 + (int)strlen(p->text_prompt) / 4;
    *out = s;
    return PP_OK;
}
void pp_session_destroy(pp_session *s) { free(s); }
int pp_session_prefill(pp_session *s, char *err) {
    (void)err;
    return ++s->done >= s->prompt_frames;
}
int pp_session_prompt_frames(const pp_session *s) { return s->prompt_frames; }
int pp_session_prompt_done(const pp_session *s) { return s->done; }
int pp_session_step(pp_session *s, const float *pcm_in, float *pcm_out, char piece[PP_SESSION_PIECE_MAX],
                    pp_step_times *times, char *err) {
    (void)err;
    for (int i = 0; i < PP_SESSION_FRAME; i++) pcm_out[i] = 0.5f * pcm_in[i];
    piece[0] = '\0';
    if (++s->n % 5 == 0) strcpy(piece, " hi");
    if (times) memset(times, 0, sizeof *times);
    return PP_OK;
}
