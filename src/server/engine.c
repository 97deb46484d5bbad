/* engine: the model thread, its round-robin over sessions and the batched tick (see engine.h). */
#include "server/engine.h"

#include "base/err.h"
#include "base/log.h"
#include "server/pacing.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FRAME_NS 80000000LL /* one model frame: 1920 samples at 24 kHz */
#define POLL_NS 20000000LL  /* while conversations run: how often silence frames are considered */

typedef enum { JOB_NEW, JOB_PREFILL, JOB_RUN, JOB_FAILED } job_state;

/* One conversation as the engine sees it. Touched only by the engine thread once admitted. */
typedef struct job {
    struct job *next;
    conn *c;
    job_state state;
    pp_session_params params;
    pp_session *session;
    pp_downlink *down;
    int64_t t_open, t_ready;             /* admission, handshake (CLOCK_MONOTONIC ns) */
    int64_t t_frame;                     /* when the frame in this tick became complete */
    double encode_ms;                    /* its encode */
    pacing pace;                         /* silence frames and the idle timeout */
    uint64_t frames, late, bytes_out;
    float pcm_in[PP_AUDIO_FRAME], pcm_out[PP_AUDIO_FRAME];
    uint8_t page[PP_DOWNLINK_MAX_PAGE];
} job;

struct engine {
    engine_config cfg;
    pthread_t thread;
    pthread_mutex_t lock; /* guards the fields below */
    pthread_cond_t cond;
    job *jobs;            /* engine thread's list; links change only under lock */
    job *incoming;        /* admitted, not yet picked up by the thread */
    int count;            /* jobs + incoming */
    int departed;         /* of those, released by the service thread and not yet freed */
    int pending;          /* a wake arrived since the pass began */
    int stop;
    /* engine thread only: the tick being gathered */
    pp_session_batch *batch;
    pp_session **tick_sessions; /* [max_sessions] */
    job **tick_jobs;            /* [max_sessions] */
    int n_tick;
};

static double ms_between(int64_t a, int64_t b) { return (double)(b - a) / 1e6; }

static void job_send(engine *e, job *j, int kind, const void *payload, size_t len) {
    if (conn_queue(j->c, kind, payload, len) == PP_OK) {
        j->bytes_out += len + 1;
        metrics_bytes(e->cfg.metrics, 0, len + 1);
    }
}

static void job_fail(engine *e, job *j, int close_code, const char *what, const char *err) {
    PP_WARN("engine", "session %llu: %s: %s", (unsigned long long)conn_id(j->c), what, err);
    conn_fail(j->c, close_code, "%s: %s", what, err);
    j->state = JOB_FAILED;
    e->cfg.notify(e->cfg.notify_arg);
}

static void job_start(engine *e, job *j) {
    char err[PP_ERR_LEN];
    int rc = pp_session_create(e->cfg.model, &j->params, e->cfg.max_prompt_tokens, &j->session, err);
    if (rc) {
        /* A prompt too long or an unknown voice is the client's to fix; the rest is ours. */
        int client = rc == PP_EFULL || rc == PP_EINVAL || rc == PP_ENOTFOUND;
        job_fail(e, j, client ? CLOSE_POLICY : CLOSE_INTERNAL, "cannot start the conversation", err);
        return;
    }
    if ((rc = pp_downlink_open(&j->down, 0, err))) {
        job_fail(e, j, CLOSE_INTERNAL, "cannot open the Opus encoder", err);
        return;
    }
    PP_INFO("engine", "session %llu: prompts started (voice %s, %d prompt frames)", (unsigned long long)conn_id(j->c),
            j->params.voice, pp_session_prompt_frames(j->session));
    j->state = JOB_PREFILL;
}

/* True while another conversation runs the same prompts as j, which has not begun its own:
 * j waits for that state to land in the prompt cache instead of computing it again (clients
 * that connect together with the same voice and persona). Of several that have not begun,
 * the first in the list leads, so someone always progresses. The list is this thread's. */
static int prompt_in_flight(const engine *e, const job *j) {
    if (pp_session_prompt_done(j->session) > 0) return 0;
    int before = 1; /* k precedes j */
    for (const job *k = e->jobs; k; k = k->next) {
        if (k == j) {
            before = 0;
            continue;
        }
        if (k->state == JOB_PREFILL && (before || pp_session_prompt_done(k->session) > 0) &&
            pp_session_shares_prompt(k->session, j->session))
            return 1;
    }
    return 0;
}

/* Returns 1 when it did work. */
static int job_prefill(engine *e, job *j) {
    char err[PP_ERR_LEN];
    if (prompt_in_flight(e, j)) return 0;
    int rc = pp_session_prefill(j->session, err);
    if (rc < 0) {
        job_fail(e, j, CLOSE_INTERNAL, "prompt phase failed", err);
        return 1;
    }
    if (rc == 0) return 1;
    /* Prompts done: the handshake, then the stream's two header pages (spec §2.5 item 6). */
    job_send(e, j, MSG_HANDSHAKE, NULL, 0);
    for (int i = 0; i < 2; i++) {
        size_t len;
        if (pp_downlink_header(j->down, i, j->page, sizeof j->page, &len, err) == PP_OK)
            job_send(e, j, MSG_AUDIO, j->page, len);
    }
    j->t_ready = conn_now_ns();
    pacing_start(&j->pace, j->t_ready);
    j->state = JOB_RUN;
    e->cfg.notify(e->cfg.notify_arg);
    int cached = pp_session_prompt_cached(j->session);
    metrics_prompt(e->cfg.metrics, ms_between(j->t_open, j->t_ready), cached);
    PP_INFO("engine", "session %llu: ready after %.0f ms of prompts%s", (unsigned long long)conn_id(j->c),
            ms_between(j->t_open, j->t_ready), cached ? " (from the prompt cache)" : "");
    return 1;
}

/* Stage 1 of a frame: encodes j->pcm_in and adds j to the tick. */
static void job_encode_frame(engine *e, job *j) {
    char err[PP_ERR_LEN];
    int64_t t0 = conn_now_ns();
    if (pp_session_encode(j->session, j->pcm_in, err)) {
        job_fail(e, j, CLOSE_INTERNAL, "frame failed", err);
        return;
    }
    j->encode_ms = ms_between(t0, conn_now_ns());
    e->tick_sessions[e->n_tick] = j->session;
    e->tick_jobs[e->n_tick++] = j;
}

/* No uplink frame waits: a frame of silence once the client has been quiet for a while, or the
 * end of the conversation past the idle timeout (pacing.h). Returns 1 when it did work. */
static int job_quiet(engine *e, job *j) {
    int64_t now = conn_now_ns();
    char why[96];
    switch (pacing_check(&j->pace, now, conn_last_input_ns(j->c), e->cfg.idle_timeout)) {
    case PACING_WAIT: return 0;
    case PACING_IDLE:
        snprintf(why, sizeof why, "no audio from the client for %d s", e->cfg.idle_timeout);
        job_fail(e, j, CLOSE_NORMAL, "conversation ended", why);
        return 1;
    case PACING_SILENCE: break;
    }
    memset(j->pcm_in, 0, sizeof j->pcm_in);
    j->t_frame = now;
    job_encode_frame(e, j);
    return 1;
}

/* Takes j's next uplink frame (or silence) into the tick. Returns 1 when it did work. */
static int job_encode(engine *e, job *j) {
    if (!conn_take_frame(j->c, j->pcm_in, &j->t_frame)) return job_quiet(e, j);
    pacing_frame(&j->pace, conn_now_ns());
    job_encode_frame(e, j);
    return 1;
}

/* Stage 3 of a frame: decode, Opus page, text piece, metrics. */
static void job_output(engine *e, job *j, double lm_ms) {
    char err[PP_ERR_LEN], piece[PP_SESSION_PIECE_MAX];
    int64_t t0 = conn_now_ns();
    size_t len = 0;
    int rc = pp_session_decode(j->session, j->pcm_out, piece, err);
    double decode_ms = ms_between(t0, conn_now_ns());
    if (!rc) rc = pp_downlink_encode(j->down, j->pcm_out, j->page, sizeof j->page, &len, err);
    if (rc) {
        job_fail(e, j, CLOSE_INTERNAL, "frame failed", err);
        return;
    }
    /* Text first: the reference sends a frame's piece just before its audio page. */
    if (piece[0]) job_send(e, j, MSG_TEXT, piece, strlen(piece));
    job_send(e, j, MSG_AUDIO, j->page, len);
    /* Audio that arrived during the prompts waited for them; time it from the handshake. */
    int64_t done = conn_now_ns(), start = j->t_frame > j->t_ready ? j->t_frame : j->t_ready;
    int late = done - start > FRAME_NS;
    double ms[METRICS_STAGES] = {j->encode_ms, lm_ms, decode_ms, ms_between(start, done)};
    metrics_frame(e->cfg.metrics, ms, late);
    j->frames++;
    j->late += (uint64_t)late;
}

/* The pass's tick: one LM step for every session encoded in it, then each one's output. */
static void run_tick(engine *e) {
    int n = e->n_tick;
    e->n_tick = 0;
    if (n == 0) return;
    char err[PP_ERR_LEN];
    int64_t t0 = conn_now_ns();
    int rc = pp_session_batch_step(e->batch, e->tick_sessions, n, err);
    double lm_ms = ms_between(t0, conn_now_ns());
    metrics_tick(e->cfg.metrics, lm_ms, n);
    for (int i = 0; i < n; i++) {
        if (rc) job_fail(e, e->tick_jobs[i], CLOSE_INTERNAL, "frame failed", err);
        else job_output(e, e->tick_jobs[i], lm_ms);
    }
    e->cfg.notify(e->cfg.notify_arg);
}

/* Gives j one unit of work; returns 1 when it did something. */
static int job_step(engine *e, job *j) {
    switch (j->state) {
    case JOB_NEW: job_start(e, j); return 1;
    case JOB_PREFILL: return job_prefill(e, j);
    case JOB_RUN: return job_encode(e, j);
    case JOB_FAILED: return 0;
    }
    return 0;
}

static void job_free(engine *e, job *j) {
    pp_uplink_stats up = conn_uplink_stats(j->c);
    PP_INFO("engine",
            "session %llu ended: %.1f s, %llu frames (%llu silent), %llu late, %llu bytes out, %llu dropped, "
            "%llu uplink packets (%llu concealed), %d bad pages",
            (unsigned long long)conn_id(j->c), ms_between(j->t_open, conn_now_ns()) / 1000.0,
            (unsigned long long)j->frames, (unsigned long long)j->pace.silent_frames, (unsigned long long)j->late,
            (unsigned long long)j->bytes_out,
            (unsigned long long)conn_dropped(j->c), (unsigned long long)up.packets,
            (unsigned long long)up.concealed, up.ogg.errors);
    pp_session_destroy(j->session);
    pp_downlink_close(j->down);
    conn_destroy(j->c);
    metrics_session_ended(e->cfg.metrics);
    free(j);
}

/* Engine thread. */
static void *engine_main(void *arg) {
    engine *e = arg;
    pthread_mutex_lock(&e->lock);
    while (!e->stop) {
        e->pending = 0;
        while (e->incoming) { /* newest first is fine: each gets a turn this pass */
            job *j = e->incoming;
            e->incoming = j->next;
            j->next = e->jobs;
            e->jobs = j;
        }
        int worked = 0, running = 0;
        job **link = &e->jobs;
        while (*link) {
            job *j = *link;
            pthread_mutex_unlock(&e->lock);
            int gone = conn_is_gone(j->c);
            if (!gone) worked |= job_step(e, j);
            running |= j->state == JOB_RUN;
            pthread_mutex_lock(&e->lock);
            if (gone) {
                *link = j->next;
                e->count--;
                e->departed--;
                pthread_mutex_unlock(&e->lock);
                job_free(e, j);
                pthread_mutex_lock(&e->lock);
            } else {
                link = &j->next;
            }
        }
        /* Jobs in the tick stay listed: only this thread unlinks and frees them. */
        pthread_mutex_unlock(&e->lock);
        run_tick(e);
        pthread_mutex_lock(&e->lock);
        if (!worked && !e->pending && !e->stop) {
            if (running) { /* a quiet client's silence frames are due without any wake */
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                ts.tv_nsec += POLL_NS;
                ts.tv_sec += ts.tv_nsec / 1000000000;
                ts.tv_nsec %= 1000000000;
                pthread_cond_timedwait(&e->cond, &e->lock, &ts);
            } else {
                pthread_cond_wait(&e->cond, &e->lock);
            }
        }
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

static void engine_free(engine *e) {
    pp_session_batch_destroy(e->batch);
    free(e->tick_sessions);
    free(e->tick_jobs);
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

int engine_create(const engine_config *cfg, engine **out, char *err) {
    engine *e = calloc(1, sizeof *e);
    if (!e) return pp_fail(err, PP_ENOMEM, "engine: out of memory");
    e->cfg = *cfg;
    pthread_mutex_init(&e->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the timed wait's clock */
    pthread_cond_init(&e->cond, &ca);
    pthread_condattr_destroy(&ca);
    size_t n = (size_t)(cfg->max_sessions > 0 ? cfg->max_sessions : 1);
    e->tick_sessions = calloc(n, sizeof *e->tick_sessions);
    e->tick_jobs = calloc(n, sizeof *e->tick_jobs);
    int rc = e->tick_sessions && e->tick_jobs ? PP_OK : pp_fail(err, PP_ENOMEM, "engine: out of memory");
    if (!rc) rc = pp_session_batch_create(cfg->model, (int)n, &e->batch, err);
    if (!rc && pthread_create(&e->thread, NULL, engine_main, e) != 0)
        rc = pp_fail(err, PP_ENOMEM, "engine: cannot start the engine thread");
    if (rc) {
        engine_free(e);
        return rc;
    }
    *out = e;
    return PP_OK;
}

void engine_destroy(engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    e->stop = 1;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
    for (job **list = &e->jobs; list; list = list == &e->jobs ? &e->incoming : NULL)
        while (*list) {
            job *j = *list;
            *list = j->next;
            job_free(e, j);
        }
    engine_free(e);
}

int engine_admit(engine *e, conn *c, const pp_session_params *params, char *err) {
    job *j = calloc(1, sizeof *j);
    if (!j) return pp_fail(err, PP_ENOMEM, "out of memory for a new conversation");
    j->c = c;
    j->params = *params;
    j->t_open = conn_now_ns();
    pthread_mutex_lock(&e->lock);
    if (e->count - e->departed >= e->cfg.max_sessions) {
        pthread_mutex_unlock(&e->lock);
        free(j);
        return pp_fail(err, PP_EFULL, "server full: %d conversations running, try again later", e->cfg.max_sessions);
    }
    j->next = e->incoming;
    e->incoming = j;
    e->count++;
    e->pending = 1;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->lock);
    metrics_session_started(e->cfg.metrics);
    return PP_OK;
}

int engine_capacity(const engine *e) { return e->cfg.max_sessions; }

void engine_release(engine *e, conn *c) {
    pthread_mutex_lock(&e->lock);
    /* Under the lock: a pass that sees c gone frees it only after departed counts it. */
    conn_mark_gone(c);
    e->departed++;
    e->pending = 1;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->lock);
}

int engine_has_room(engine *e) {
    pthread_mutex_lock(&e->lock);
    int room = e->count - e->departed < e->cfg.max_sessions;
    pthread_mutex_unlock(&e->lock);
    return room;
}

int engine_active(engine *e) {
    pthread_mutex_lock(&e->lock);
    int n = e->count;
    pthread_mutex_unlock(&e->lock);
    return n;
}

void engine_wake(engine *e) {
    pthread_mutex_lock(&e->lock);
    e->pending = 1;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->lock);
}
