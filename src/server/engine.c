/* engine: the model thread, its deadline-bound passes and the batched tick (see engine.h). */
#include "server/engine.h"

#include "base/clock.h"
#include "base/err.h"
#include "audio/aec.h"
#include "base/log.h"
#include "base/pool.h"
#include "server/memory.h"
#include "server/pacing.h"
#include "server/wire.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POLL_NS 20000000LL  /* while conversations run: how often silence frames are considered */
/* A join that found no slack for this long gets one unit anyway (an overloaded server admits
 * slowly rather than never). */
#define JOIN_MAX_WAIT_NS 3000000000LL
/* Before the first measurement, what a unit of background work is assumed to cost. */
#define FIRST_ESTIMATE_NS 20000000LL

/* Background work, each kind with its own cost estimate. A prompt unit is a pass of the LM
 * (tens of ms on the 7B model) or a restore from the prompt cache (about 1 ms), each its own
 * kind: one estimate for both let a run of cached joins talk it down to a restore's, and the
 * next pass overran the frame it was meant to fit before. */
typedef enum { UNIT_START, UNIT_PREFILL, UNIT_RESTORE, UNIT_TRIM, UNIT_KINDS } unit_kind;

typedef enum { JOB_NEW, JOB_PREFILL, JOB_RUN, JOB_FAILED } job_state;

/* One conversation as the engine sees it. Touched only by the engine thread once admitted. */
typedef struct job {
    struct job *next;
    conn *c;
    job_state state;
    pp_session_params params;
    pp_session *session;
    wire *wire;                          /* its socket's output format */
    pp_aec *aec;                         /* the uplink's echo canceller; NULL when off */
    int64_t t_start;                     /* admission (CLOCK_MONOTONIC ns) */
    int64_t t_open, t_ready;             /* admission or the last restart, handshake */
    int64_t t_frame;                     /* when the frame in this tick became complete */
    int64_t t_expect;                    /* when its next uplink frame should be complete */
    int64_t t_first_work;                /* its first unit of background work; 0 before */
    metrics_conv *conv;                  /* its lateness in /metrics; NULL when untracked */
    double encode_ms;                    /* its echo cancellation (ms); output adds the tick's encode */
    pacing pace;                         /* silence frames and the idle timeout */
    pp_uplink_stats uplink_counted;      /* its uplink's losses already in the metrics */
    uint64_t frames, late, bytes_out;
    int from_client; /* pcm_in came from the client (not silence) */
    float pcm_in[PP_FRAME_SAMPLES], pcm_out[PP_FRAME_SAMPLES];
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
    pp_pool *host; /* the ticks' per-conversation host work (run_tick) */
    pp_session_batch *batch;
    pp_session **tick_sessions; /* [max_sessions] */
    job **tick_jobs;            /* [max_sessions] */
    const float **tick_in;      /* [max_sessions]: the jobs' pcm_in */
    float **tick_out;           /* [max_sessions]: the jobs' pcm_out */
    char (*tick_pieces)[PP_SESSION_PIECE_MAX];
    int n_tick;
    int n_echo;                  /* of those, frames from a client through an echo canceller */
    int64_t unit_ns[UNIT_KINDS]; /* estimated cost of one background unit of each kind */
    int64_t t_trim;              /* when the heap should be trimmed; 0: nothing to trim */
    /* under lock: ticks failed since the last one that ran (engine_failing), the last error */
    int failed_ticks;
    char tick_error[PP_ERR_LEN];
};

static double ms_between(int64_t a, int64_t b) { return (double)(b - a) / 1e6; }

/* Counts what the wire queued. */
static void job_sent(engine *e, job *j, long bytes) {
    if (bytes <= 0) return;
    j->bytes_out += (uint64_t)bytes;
    metrics_bytes(e->cfg.metrics, 0, (size_t)bytes);
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
    if (!j->wire && wire_open(j->c, &j->params, &j->wire, err)) {
        job_fail(e, j, CLOSE_INTERNAL, "cannot open the downlink", err);
        return;
    }
    int echo = e->cfg.echo_cancel == ECHO_CANCEL_ON ? j->params.echo_cancel != 0
               : e->cfg.echo_cancel == ECHO_CANCEL_AUTO ? j->params.echo_cancel == 1
                                                        : 0;
    if (j->params.echo_cancel == 1 && e->cfg.echo_cancel == ECHO_CANCEL_OFF)
        PP_INFO("engine", "session %llu: echo cancellation asked for but off on this server (--echo-cancel)",
                (unsigned long long)conn_id(j->c));
    if (echo && !j->aec && pp_aec_create(&j->aec, err)) /* the conversation goes on without it */
        PP_WARN("engine", "session %llu: %s", (unsigned long long)conn_id(j->c), err);
    PP_INFO("engine", "session %llu: prompts started (voice %s, %d prompt frames%s)", (unsigned long long)conn_id(j->c),
            j->params.voice, pp_session_prompt_frames(j->session), j->aec ? ", echo cancellation" : "");
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
    /* Prompts done: the chat handshake and the stream's two header pages (docs/protocol.md §2.5). */
    long sent = wire_ready(j->wire, err);
    if (sent < 0) {
        job_fail(e, j, CLOSE_INTERNAL, "cannot start the downlink", err);
        return 1;
    }
    job_sent(e, j, sent);
    j->t_ready = pp_now_ns();
    j->t_expect = j->t_ready;
    pacing_start(&j->pace, j->t_ready);
    j->state = JOB_RUN;
    e->cfg.notify(e->cfg.notify_arg);
    int cached = pp_session_prompt_cached(j->session);
    metrics_prompt(e->cfg.metrics, ms_between(j->t_open, j->t_ready), cached);
    PP_INFO("engine", "session %llu: ready after %.0f ms of prompts%s", (unsigned long long)conn_id(j->c),
            ms_between(j->t_open, j->t_ready), cached ? " (from the prompt cache)" : "");
    return 1;
}

/* Whether j's frame in the tick goes through its echo canceller: client audio, canceller on. */
static int job_echoes(const job *j) { return j->from_client && j->aec; }

/* Stage 1 of a frame: j->pcm_in (the client's audio, or silence) joins the tick. */
static void job_encode_frame(engine *e, job *j, int from_client) {
    j->from_client = from_client;
    j->encode_ms = 0;
    e->n_echo += job_echoes(j);
    j->t_expect = j->t_frame + PP_FRAME_NS;
    e->tick_jobs[e->n_tick++] = j;
}

/* Host pool task before the tick: the echo of ours taken out of tick job i's uplink frame. A
 * job whose canceller fails leaves the tick (run_tick). */
static void echo_task(void *arg, int i) {
    engine *e = arg;
    job *j = e->tick_jobs[i];
    if (!job_echoes(j)) return;
    char err[PP_ERR_LEN];
    int64_t t0 = pp_now_ns();
    double before = pp_frame_energy(j->pcm_in);
    if (pp_aec_near(j->aec, j->pcm_in, PP_FRAME_SAMPLES, err)) {
        job_fail(e, j, CLOSE_INTERNAL, "echo cancellation failed", err);
        return;
    }
    metrics_conv_echo(e->cfg.metrics, j->conv, before, pp_frame_energy(j->pcm_in));
    j->encode_ms = ms_between(t0, pp_now_ns());
}

/* No uplink frame waits: a frame of silence once the client has been quiet for a while, or the
 * end of the conversation past the idle timeout (pacing.h). Returns 1 when it did work. */
static int job_quiet(engine *e, job *j) {
    int64_t now = pp_now_ns();
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
    job_encode_frame(e, j, 0);
    return 1;
}

/* The client asked for a fresh start (response.cancel, or a new voice or prompt): the
 * conversation goes back to its prompts, which the prompt cache usually has ready. */
static void job_restart(engine *e, job *j, const pp_session_params *params) {
    if (j->state == JOB_FAILED) return;
    PP_INFO("engine", "session %llu: restarting from the prompts (voice %s)", (unsigned long long)conn_id(j->c),
            params->voice);
    if (j->wire) job_sent(e, j, wire_restart(j->wire, params));
    pp_session_destroy(j->session);
    j->session = NULL;
    j->params = *params;
    j->state = JOB_NEW;
    j->t_open = pp_now_ns();
    j->t_first_work = 0;
    e->cfg.notify(e->cfg.notify_arg);
}

/* Adds to the metrics the silent frames the model heard before this frame of the client's (its
 * audio was that late), and what j's uplink dropped or concealed since the last count: a load
 * test reads there whether the model heard every client's audio as it was sent. */
static void job_count_uplink_loss(engine *e, job *j, uint64_t silent_frames) {
    pp_uplink_stats up = conn_uplink_stats(j->c);
    uint64_t dropped = up.dropped - j->uplink_counted.dropped, concealed = up.concealed - j->uplink_counted.concealed;
    if (silent_frames || dropped || concealed) metrics_uplink_loss(e->cfg.metrics, silent_frames, dropped, concealed);
    j->uplink_counted = up;
}

/* Takes j's next uplink frame (or silence) into the tick. Returns 1 when it did work. */
static int job_encode(engine *e, job *j) {
    /* Its frames wait in the uplink (at most ws_input's 10 s ahead) until the client has read
     * what it was sent; conn_stalled drops one that stopped reading. */
    if (conn_backed_up(j->c)) return 0;
    if (!conn_take_frame(j->c, j->pcm_in, &j->t_frame)) return job_quiet(e, j);
    job_count_uplink_loss(e, j, pacing_frame(&j->pace, pp_now_ns()));
    job_encode_frame(e, j, 1);
    return 1;
}

/* What a tick hands to its output tasks. */
typedef struct tick_result {
    engine *e;
    double encode_ms, lm_ms, decode_ms;
} tick_result;

/* The batched calls of a tick, in order. */
typedef enum { TICK_ENCODE, TICK_STEP, TICK_DECODE } tick_stage;
static const char *const tick_stage_name[] = {"codec encode", "LM step", "codec decode"};

/* One stage for the tick's rows [first, first + n). */
static int stage_call(engine *e, tick_stage stage, int first, int n, char *err) {
    pp_session **ss = e->tick_sessions + first;
    switch (stage) {
    case TICK_ENCODE: return pp_session_batch_encode(e->batch, ss, n, e->tick_in + first, err);
    case TICK_STEP: return pp_session_batch_step(e->batch, ss, n, err);
    default: return pp_session_batch_decode(e->batch, ss, n, e->tick_out + first, e->tick_pieces + first, err);
    }
}

/* One stage of the tick over its *n rows. When the batched call fails, each row runs the stage
 * again alone (a failed call leaves its sessions where they were; session.h): a conversation
 * whose frame fails alone too ends with its error, and the others carry on, so one
 * conversation at fault does not end every conversation of the tick. Failed rows leave the
 * tick (*n shrinks). Returns the batched call's error only when no row ran (a device that lost
 * its context fails them all): the tick failed. */
static int run_stage(engine *e, tick_stage stage, int *n, char *err) {
    int rc = stage_call(e, stage, 0, *n, err);
    if (!rc) return PP_OK;
    if (*n > 1)
        PP_WARN("engine", "the %s of %d conversations failed (%s): running each alone", tick_stage_name[stage], *n,
                err);
    char one_err[PP_ERR_LEN];
    int kept = 0;
    for (int i = 0; i < *n; i++) {
        /* a lone row's own call failed already: its error is err */
        if (*n == 1 || stage_call(e, stage, i, 1, one_err)) {
            job_fail(e, e->tick_jobs[i], CLOSE_INTERNAL, "frame failed", *n == 1 ? err : one_err);
            continue;
        }
        e->tick_jobs[kept] = e->tick_jobs[i];
        e->tick_sessions[kept] = e->tick_sessions[i];
        e->tick_in[kept] = e->tick_in[i];
        e->tick_out[kept] = e->tick_out[i];
        memcpy(e->tick_pieces[kept], e->tick_pieces[i], sizeof e->tick_pieces[i]);
        kept++;
    }
    *n = kept;
    return kept ? PP_OK : rc;
}

/* Host pool task after the tick, for tick job i: its wire's messages (the Opus or μ-law
 * encoding of the decoded pcm_out and its text piece), the far end of its echo canceller,
 * metrics. */
static void output_task(void *arg, int i) {
    tick_result *t = arg;
    engine *e = t->e;
    job *j = e->tick_jobs[i];
    char err[PP_ERR_LEN];
    int rc = PP_OK;
    long sent = wire_frame(j->wire, j->pcm_in, j->from_client, j->pcm_out, e->tick_pieces[i], err);
    if (sent < 0) rc = (int)sent;
    if (!rc && j->aec) rc = pp_aec_far(j->aec, j->pcm_out, PP_FRAME_SAMPLES, err); /* what will come back */
    if (rc) {
        job_fail(e, j, CLOSE_INTERNAL, "frame failed", err);
        return;
    }
    job_sent(e, j, sent);
    /* Audio that arrived during the prompts waited for them; time it from the handshake. */
    int64_t done = pp_now_ns(), start = j->t_frame > j->t_ready ? j->t_frame : j->t_ready;
    int late = done - start > PP_FRAME_NS;
    double ms[METRICS_STAGES] = {j->encode_ms + t->encode_ms, t->lm_ms, t->decode_ms, ms_between(start, done)};
    metrics_frame(e->cfg.metrics, ms, late);
    metrics_conv_frame(e->cfg.metrics, j->conv, ms[METRICS_FRAME]);
    j->frames++;
    j->late += (uint64_t)late;
}

/* The pass's tick: echo cancellation, one codec encode, one LM step and one codec decode for
 * every job in it, then each one's output. The per-conversation host work around the batched
 * calls (echo cancellation; Opus encoding, 0.2-0.5 ms a frame on one core) runs on the host
 * pool, a task a conversation: on the engine thread alone, 64 conversations would add 15-30 ms
 * to every tick. */
static void run_tick(engine *e) {
    if (e->n_tick == 0) return;
    int64_t t_echo = pp_now_ns();
    if (e->n_echo) pp_pool_run(e->host, e->n_tick, echo_task, e);
    double echo_ms = ms_between(t_echo, pp_now_ns());
    int n = 0;
    for (int i = 0; i < e->n_tick; i++) {
        job *j = e->tick_jobs[i];
        if (j->state == JOB_FAILED) continue;
        e->tick_jobs[n] = j;
        e->tick_sessions[n] = j->session;
        e->tick_in[n] = j->pcm_in;
        e->tick_out[n++] = j->pcm_out;
    }
    e->n_tick = e->n_echo = 0;
    if (n == 0) return;
    tick_result t = {.e = e};
    char err[PP_ERR_LEN];
    int64_t t0 = pp_now_ns();
    int rc = run_stage(e, TICK_ENCODE, &n, err);
    int64_t t1 = pp_now_ns();
    if (!rc) rc = run_stage(e, TICK_STEP, &n, err);
    int64_t t2 = pp_now_ns();
    if (!rc) rc = run_stage(e, TICK_DECODE, &n, err);
    int64_t t3 = pp_now_ns();
    t.encode_ms = ms_between(t0, t1);
    t.lm_ms = ms_between(t1, t2);
    t.decode_ms = ms_between(t2, t3);
    pthread_mutex_lock(&e->lock);
    e->failed_ticks = rc ? e->failed_ticks + 1 : 0;
    if (rc) snprintf(e->tick_error, sizeof e->tick_error, "%s", err);
    pthread_mutex_unlock(&e->lock);
    if (n) {
        pp_pool_run(e->host, n, output_task, &t);
        metrics_tick(e->cfg.metrics, t.lm_ms, echo_ms + ms_between(t3, pp_now_ns()), n);
    }
    e->cfg.notify(e->cfg.notify_arg);
}

/* The kind of background unit j needs next, or -1 when it needs none. */
static int job_unit(const job *j) {
    if (j->state == JOB_PREFILL) return pp_session_prompt_restorable(j->session) ? UNIT_RESTORE : UNIT_PREFILL;
    return j->state == JOB_NEW ? UNIT_START : -1;
}

/* Measured cost of a unit: the estimate follows a slower unit at once and a faster one
 * slowly, so one quick run does not let the next slow one overrun a deadline. */
static void unit_measured(engine *e, unit_kind kind, int64_t ns) {
    int64_t *est = &e->unit_ns[kind];
    *est = ns > *est ? ns : (*est * 7 + ns) / 8;
}

/* When background work must be done by: the earliest time a live conversation's next frame is
 * due. A client that fell silent or skipped frames is due at its next slot
 * rather than in the past. INT64_MAX when no conversation runs. */
static int64_t background_deadline(const engine *e, int64_t now) {
    int64_t due = INT64_MAX;
    for (const job *j = e->jobs; j; j = j->next) {
        if (j->state != JOB_RUN) continue;
        int64_t t = j->t_expect;
        if (t < now - PP_FRAME_NS / 4) t += ((now - t) / PP_FRAME_NS + 1) * PP_FRAME_NS;
        if (t < due) due = t;
    }
    return due;
}

/* Runs joins' work (session creation, prompt runs, handshakes, cache restores) and the heap
 * trim in arrival order while each unit's estimated cost fits before the deadline, so a live
 * frame is not held up by someone else joining. Returns 1 when it did work; *deferred is set
 * when work remains that did not fit. */
static int run_background(engine *e, int *deferred) {
    int worked = 0;
    int64_t now = pp_now_ns(), deadline = background_deadline(e, now);
    for (job *j = e->jobs; j; j = j->next) {
        int kind;
        while (!conn_is_gone(j->c) && (kind = job_unit(j)) >= 0) {
            int starved = now - j->t_open > JOIN_MAX_WAIT_NS && !worked;
            if (now + e->unit_ns[kind] > deadline && !starved) {
                *deferred = 1;
                return worked;
            }
            if (!j->t_first_work) {
                j->t_first_work = now;
                metrics_join_wait(e->cfg.metrics, ms_between(j->t_open, now));
            }
            int did = kind == UNIT_START ? (job_start(e, j), 1) : job_prefill(e, j);
            int64_t after = pp_now_ns();
            if (!did) break; /* waiting for another join's prompt */
            /* measured as what it turned out to be (a restore may miss: evicted meanwhile) */
            if (kind != UNIT_START) kind = pp_session_prompt_cached(j->session) ? UNIT_RESTORE : UNIT_PREFILL;
            unit_measured(e, (unit_kind)kind, after - now);
            metrics_join_work(e->cfg.metrics, ms_between(now, after));
            now = after;
            worked = 1;
        }
    }
    if (e->t_trim && now >= e->t_trim) {
        if (now + e->unit_ns[UNIT_TRIM] > deadline) {
            *deferred = 1;
            return worked;
        }
        memory_trim();
        unit_measured(e, UNIT_TRIM, pp_now_ns() - now);
        e->t_trim = 0;
        worked = 1;
    }
    return worked;
}

static void job_free(engine *e, job *j) {
    job_count_uplink_loss(e, j, 0);
    pp_uplink_stats up = conn_uplink_stats(j->c);
    PP_INFO("engine",
            "session %llu ended: %.1f s, %llu frames (%llu silent), %llu late, %llu bytes out, %llu dropped, "
            "%llu uplink packets (%llu concealed), %d bad pages",
            (unsigned long long)conn_id(j->c), ms_between(j->t_start, pp_now_ns()) / 1000.0,
            (unsigned long long)j->frames, (unsigned long long)j->pace.silent_frames, (unsigned long long)j->late,
            (unsigned long long)j->bytes_out, (unsigned long long)conn_dropped(j->c), (unsigned long long)up.packets,
            (unsigned long long)up.concealed, up.ogg.errors);
    pp_session_destroy(j->session);
    wire_close(j->wire);
    pp_aec_destroy(j->aec);
    conn_destroy(j->c);
    metrics_conv_close(e->cfg.metrics, j->conv);
    metrics_session_ended(e->cfg.metrics);
    free(j);
    /* What the conversation held goes back to the system once the server has been quiet. */
    if (e->cfg.trim_after_ms >= 0) e->t_trim = pp_now_ns() + (int64_t)e->cfg.trim_after_ms * 1000000;
}

/* Sleeps until a wake, at most POLL_NS when timed (conversations run, or work waits for
 * slack) and no later than a pending heap trim. Called with the lock held. */
static void engine_sleep(engine *e, int timed) {
    int64_t until = timed ? pp_now_ns() + POLL_NS : INT64_MAX;
    if (e->t_trim && e->t_trim < until) until = e->t_trim;
    if (until == INT64_MAX) {
        pthread_cond_wait(&e->cond, &e->lock);
        return;
    }
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000000), .tv_nsec = (long)(until % 1000000000)};
    pthread_cond_timedwait(&e->cond, &e->lock, &ts);
}

/* Engine thread. Each pass: every live conversation's waiting frame into one tick, the tick,
 * then background work in the slack before the next frame is due, then the departed freed. */
static void *engine_main(void *arg) {
    engine *e = arg;
    pthread_mutex_lock(&e->lock);
    while (!e->stop) {
        e->pending = 0;
        job **tail = &e->jobs;
        while (*tail) tail = &(*tail)->next;
        *tail = e->incoming; /* joins keep their arrival order: the oldest is served first */
        e->incoming = NULL;
        pthread_mutex_unlock(&e->lock);
        int worked = 0, running = 0, deferred = 0;
        for (job *j = e->jobs; j; j = j->next) {
            pp_session_params restart;
            if (!conn_is_gone(j->c) && conn_take_restart(j->c, &restart)) {
                job_restart(e, j, &restart);
                worked = 1;
            }
            if (j->state != JOB_RUN || conn_is_gone(j->c)) continue;
            worked |= job_encode(e, j);
            running = 1;
        }
        run_tick(e); /* jobs in the tick stay listed: only this thread unlinks and frees them */
        worked |= run_background(e, &deferred);
        pthread_mutex_lock(&e->lock);
        job **link = &e->jobs;
        while (*link) {
            job *j = *link;
            if (!conn_is_gone(j->c)) {
                link = &j->next;
                continue;
            }
            *link = j->next;
            e->count--;
            e->departed--;
            pthread_mutex_unlock(&e->lock);
            job_free(e, j);
            pthread_mutex_lock(&e->lock);
        }
        if (!worked && !e->pending && !e->stop) engine_sleep(e, running || deferred);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

static void engine_free(engine *e) {
    pp_session_batch_destroy(e->batch);
    pp_pool_destroy(e->host);
    free(e->tick_sessions);
    free(e->tick_jobs);
    free(e->tick_in);
    free(e->tick_out);
    free(e->tick_pieces);
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

int engine_create(const engine_config *cfg, engine **out, char *err) {
    engine *e = calloc(1, sizeof *e);
    if (!e) return pp_fail(err, PP_ENOMEM, "engine: out of memory");
    e->cfg = *cfg;
    for (int k = 0; k < UNIT_KINDS; k++) e->unit_ns[k] = FIRST_ESTIMATE_NS;
    pthread_mutex_init(&e->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the timed wait's clock */
    pthread_cond_init(&e->cond, &ca);
    pthread_condattr_destroy(&ca);
    size_t n = (size_t)(cfg->max_sessions > 0 ? cfg->max_sessions : 1);
    e->tick_sessions = calloc(n, sizeof *e->tick_sessions);
    e->tick_jobs = calloc(n, sizeof *e->tick_jobs);
    e->tick_in = calloc(n, sizeof *e->tick_in);
    e->tick_out = calloc(n, sizeof *e->tick_out);
    e->tick_pieces = calloc(n, sizeof *e->tick_pieces);
    int rc = e->tick_sessions && e->tick_jobs && e->tick_in && e->tick_out && e->tick_pieces
                 ? PP_OK
                 : pp_fail(err, PP_ENOMEM, "engine: out of memory");
    if (!rc) rc = pp_session_batch_create(cfg->model, (int)n, &e->batch, err);
    int host_threads = pp_pool_threads_for(cfg->host_threads);
    if (host_threads > (int)n) host_threads = (int)n; /* a task is a conversation */
    if (!rc && host_threads > 1) rc = pp_pool_create(host_threads, &e->host, err);
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
    j->t_open = j->t_start = pp_now_ns();
    j->conv = metrics_conv_open(e->cfg.metrics, conn_id(c));
    pthread_mutex_lock(&e->lock);
    if (e->count - e->departed >= e->cfg.max_sessions) {
        pthread_mutex_unlock(&e->lock);
        metrics_conv_close(e->cfg.metrics, j->conv);
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

int echo_cancel_parse(const char *s) {
    return strcmp(s, "off") == 0 ? ECHO_CANCEL_OFF : strcmp(s, "auto") == 0 ? ECHO_CANCEL_AUTO
                                               : strcmp(s, "on") == 0      ? ECHO_CANCEL_ON
                                                                           : -1;
}

/* engine_echo_cost's frames: a warm-up as long as wire_frame_cost's, then the timed ones. */
#define ECHO_WARM_FRAMES 25
#define ECHO_COST_FRAMES 10

int engine_echo_cost(double *ms, char *err) {
    *ms = 0;
    pp_aec *aec;
    int rc = pp_aec_create(&aec, err);
    if (rc) return rc;
    float far[PP_FRAME_SAMPLES], near[PP_FRAME_SAMPLES];
    double t0 = 0;
    for (int f = 0; f < ECHO_WARM_FRAMES + ECHO_COST_FRAMES && !rc; f++) {
        /* a voiced downlink, and an uplink that hears it a few dB down over a little noise */
        for (int i = 0; i < PP_FRAME_SAMPLES; i++) {
            int t = f * PP_FRAME_SAMPLES + i;
            far[i] = 0.2f * sinf(0.037f * (float)t) + 0.1f * sinf(0.11f * (float)t);
            near[i] = 0.5f * far[i] + 0.01f * sinf(1.3f * (float)t);
        }
        if (f == ECHO_WARM_FRAMES) t0 = pp_now_ms();
        rc = pp_aec_far(aec, far, PP_FRAME_SAMPLES, err);
        if (!rc) rc = pp_aec_near(aec, near, PP_FRAME_SAMPLES, err);
    }
    if (!rc) *ms = (pp_now_ms() - t0) / ECHO_COST_FRAMES;
    pp_aec_destroy(aec);
    return rc;
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

int engine_failing(engine *e, char *why, size_t cap) {
    pthread_mutex_lock(&e->lock);
    int n = e->failed_ticks;
    if (n && cap) snprintf(why, cap, "%s", e->tick_error);
    pthread_mutex_unlock(&e->lock);
    return n;
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
