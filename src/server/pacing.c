/* pacing: silence frames and the idle timeout (see pacing.h). */
#include "server/pacing.h"

void pacing_start(pacing *p, int64_t now) {
    p->start_ns = p->last_frame_ns = now;
    p->silent = 0;
    p->silent_frames = 0;
    p->silent_run = 0;
    p->client_frames = 0;
}

uint64_t pacing_frame(pacing *p, int64_t now) {
    uint64_t gap = p->client_frames ? p->silent_run : 0;
    p->last_frame_ns = now;
    p->silent = 0;
    p->silent_run = 0;
    p->client_frames++;
    return gap;
}

pacing_action pacing_check(pacing *p, int64_t now, int64_t last_input, int idle_timeout_s) {
    /* Idle counts from the later of the client's last audio and the handshake: the prompts may
     * have run for a while before the client could be expected to talk. */
    int64_t heard = last_input > p->start_ns ? last_input : p->start_ns;
    if (idle_timeout_s > 0 && now - heard >= (int64_t)idle_timeout_s * 1000000000) return PACING_IDLE;
    int64_t due = p->last_frame_ns + (p->silent ? PP_FRAME_NS : PACING_GRACE_NS);
    if (now < due) return PACING_WAIT;
    /* On the 80 ms grid while the engine keeps up; a late engine restarts the grid rather than
     * catching up with a burst. */
    p->last_frame_ns = now - due > PP_FRAME_NS ? now : due;
    p->silent = 1;
    p->silent_frames++;
    p->silent_run++;
    return PACING_SILENCE;
}
