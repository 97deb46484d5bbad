/* session: the shared model, one conversation's prompt schedule and its frame stages.
 *
 * One conversation frame (docs/protocol.md §1.5, docs/model.md §5-6):
 *   user pcm [1920] --Mimi encode--> user codes [8] --LM step--> text token + agent codes [8]
 *   agent codes --Mimi decode--> model pcm [1920];  text token --SentencePiece--> piece
 * The prompt schedule (voice embeddings, 6 silence frames, one frame per prompt token, 6
 * silence frames) is handed to pp_lmgen_prefill in runs of PP_SESSION_PREFILL_ROWS frames on
 * the model's prefill scratch, which sessions share under a lock (one pass at a time). */
#include "session/session.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "io/prompts.h"
#include "io/voice.h"
#include "model/lmgen.h"
#include "model/mimi.h"
#include "model/prompt_cache.h"
#include "session/model_internal.h"
#include "text/spm.h"
#include "text/utf8.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define IDENTITY_MAX 8800 /* two paths (a pair voice's files) plus their inodes, sizes and times */

struct pp_model {
    pp_backend *be;
    pp_lm *lm;
    mimi_model *mimi;
    pp_spm *spm;
    pp_prompts *prompts; /* named token prompts ("@NAME"), NULL when none */
    char name[256];
    char voices_dir[4096]; /* "" when none */
    char identity[IDENTITY_MAX]; /* the LM weights file: prompt cache entries are tied to it */
    pp_kv_format kv;
    pp_prompt_cache *cache;      /* NULL: no prompt cache */
    pthread_mutex_t prefill_lock; /* guards prefill */
    pp_lmbatch *prefill;         /* made by the first prefill */
};

/* Where a session is within a frame: the stages run in order. */
typedef enum { STAGE_IDLE, STAGE_ENCODED, STAGE_STEPPED } frame_stage;

struct pp_session {
    pp_model *m;
    pp_lmgen *gen;
    mimi_state *mimi;
    pp_voice voice;      /* until the prompts have run; frames == 0 without a voices directory */
    char voice_id[IDENTITY_MAX]; /* "" without a voice */
    int32_t *prompt;     /* [n_prompt] token ids of the <system>-wrapped text prompt */
    int n_prompt;
    pp_lmgen_prompt schedule;
    pp_kv_format kv;     /* the model's format when the session was made */
    int done, ready, cached;
    frame_stage stage;
    int32_t user[PP_LM_AUDIO_CODEBOOKS];
    pp_lmgen_out out;
    pp_utf8_carry text_carry; /* the start of a character whose other bytes come in later frames */
};

struct pp_session_batch {
    pp_model *m;
    pp_lmbatch *lm;
    mimi_batch *codec;
    mimi_state **states;   /* [cap]: a codec call's states */
    int32_t **user_codes;  /* [cap]: an encode call's outputs */
    const int32_t **codes; /* [cap]: a decode call's codes */
    float **pcm;           /* [cap]: a decode call's outputs */
    int cap;
    pp_lmgen **gens;
    int32_t (*user)[PP_LM_AUDIO_CODEBOOKS];
    pp_lmgen_out *outs;
};

/* ---- model ---------------------------------------------------------------------------------- */

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* path|device:inode|size|mtime|ctime: changes when the file is replaced or rewritten. Size and
 * mtime alone do not: voices of one length have one size, and cp -p, rsync -a or tar keep the
 * mtime; the kernel sets ctime at every write, rename or mtime change. */
static void file_identity(const char *path, char *out, size_t cap) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(out, cap, "%s", path);
        return;
    }
    snprintf(out, cap, "%s|%llu:%llu|%lld|%lld.%09ld|%lld.%09ld", path, (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino, (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
             (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
}

/* A voice's identity: its file's, and for a pair the .cache.json's too (its token ring). */
static void voice_identity(const char *path, char *out, size_t cap) {
    char json[4200];
    file_identity(path, out, cap);
    size_t used = strlen(out);
    if (pp_voice_pair_json(path, json, sizeof json) && used + 1 < cap) {
        out[used++] = '|';
        file_identity(json, out + used, cap - used);
    }
}

void pp_model_close(pp_model *m) {
    if (!m) return;
    pp_prompt_cache_destroy(m->cache);
    pp_lmbatch_destroy(m->prefill);
    pthread_mutex_destroy(&m->prefill_lock);
    pp_lm_close(m->lm);
    pp_mimi_close(m->mimi);
    pp_spm_free(m->spm);
    pp_prompts_free(m->prompts);
    free(m);
}

/* What a conversation needs of the LM, the codec and the tokenizer together. */
static int check_pairing(const pp_model *m, const pp_model_paths *paths, char *err) {
    const mimi_config *mc = pp_mimi_get_config(m->mimi);
    const pp_lm_config *lc = pp_lm_get_config(m->lm);
    if (mc->frame_size != PP_FRAME_SAMPLES)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: frame size %d; the protocol needs %d", paths->mimi, mc->frame_size,
                       PP_FRAME_SAMPLES);
    if (mc->sample_rate != PP_SAMPLE_RATE)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: sample rate %d; the protocol needs %d", paths->mimi, mc->sample_rate,
                       PP_SAMPLE_RATE);
    /* a conversation's frame holds the LM's codebooks; a codec config may ask Mimi for up to 32 */
    if (mc->quantizer.num_codebooks != PP_LM_AUDIO_CODEBOOKS)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: %d codebooks per frame; the LM reads and writes %d", paths->mimi,
                       mc->quantizer.num_codebooks, PP_LM_AUDIO_CODEBOOKS);
    /* the LM draws the agent's codes from its card, Mimi decodes its bins */
    if (mc->quantizer.bins != lc->card)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: %d codes per codebook; the LM's card is %d", paths->mimi,
                       mc->quantizer.bins, lc->card);
    if (pp_spm_vocab_size(m->spm) > lc->text_card)
        return pp_fail(err, PP_EINVAL, "%s has %d pieces but the LM's text_card is %d", paths->tokenizer,
                       pp_spm_vocab_size(m->spm), lc->text_card);
    return PP_OK;
}

int pp_model_open(pp_backend *be, const pp_model_paths *paths, pp_model **out, char *err) {
    pp_model *m = calloc(1, sizeof *m);
    if (!m) return pp_fail(err, PP_ENOMEM, "model: out of memory");
    m->be = be;
    pthread_mutex_init(&m->prefill_lock, NULL);
    snprintf(m->name, sizeof m->name, "%s", paths->name ? paths->name : base_name(paths->weights));
    if (paths->voices_dir) snprintf(m->voices_dir, sizeof m->voices_dir, "%s", paths->voices_dir);
    file_identity(paths->weights, m->identity, sizeof m->identity);
    /* The LM's architecture comes from a config.json beside its weights, if there is one. */
    char config[4200];
    pp_lm_quantize q = {.group = paths->quantize_group, .temporal_only = paths->quantize_temporal_only};
    int rc = paths->quantize && pp_wformat_parse(paths->quantize, &q.fmt)
                 ? pp_fail(err, PP_EINVAL, "quantize: '%s' is not nf2, int4, nf4 or int8", paths->quantize)
                 : PP_OK;
    if (!rc)
        rc = pp_lm_open_quantized(be, paths->weights, pp_lm_config_beside(paths->weights, config, sizeof config),
                                  paths->quantize ? &q : NULL, &m->lm, err);
    if (!rc) rc = pp_mimi_open(be, paths->mimi, NULL, &m->mimi, err);
    if (!rc) rc = pp_spm_load_file(&m->spm, paths->tokenizer, err);
    if (!rc && paths->prompts) rc = pp_prompts_load(paths->prompts, &m->prompts, err);
    if (!rc) rc = check_pairing(m, paths, err);
    if (rc) {
        pp_model_close(m);
        return rc;
    }
    *out = m;
    return PP_OK;
}

const char *pp_model_name(const pp_model *m) { return m->name; }
const char *pp_model_backend(const pp_model *m) { return m->be->ops->name; }
pp_backend *pp_model_get_backend(const pp_model *m) { return m->be; }
const char *pp_model_voices_dir(const pp_model *m) { return m->voices_dir[0] ? m->voices_dir : NULL; }
size_t pp_model_prompt_count(const pp_model *m) { return pp_prompts_count(m->prompts); }
const char *pp_model_prompt_name(const pp_model *m, size_t i) { return pp_prompts_name(m->prompts, i); }
const pp_lm *pp_model_lm(const pp_model *m) { return m->lm; }
const mimi_model *pp_model_mimi(const pp_model *m) { return m->mimi; }
pp_kv_format pp_model_kv_cache(const pp_model *m) { return m->kv; }

int pp_model_set_kv_cache(pp_model *m, pp_kv_format kv, char *err) {
    if (kv != PP_KV_F32 && kv != PP_KV_BF16 && kv != PP_KV_INT8)
        return pp_fail(err, PP_EINVAL, "model: unknown KV cache format %d", (int)kv);
    m->kv = kv;
    return PP_OK;
}

int pp_model_set_prompt_cache(pp_model *m, size_t bytes, char *err) {
    pp_prompt_cache *c = NULL;
    if (bytes) {
        int rc = pp_prompt_cache_create(bytes, &c, err);
        if (rc) return rc;
    }
    pp_prompt_cache_destroy(m->cache);
    m->cache = c;
    return PP_OK;
}

void pp_model_prompt_cache_counts(const pp_model *m, pp_prompt_cache_counts *out) {
    memset(out, 0, sizeof *out);
    if (!m->cache) return;
    pp_prompt_cache_stats st;
    pp_prompt_cache_stats_get(m->cache, &st);
    *out = (pp_prompt_cache_counts){.hits = st.hits,
                                    .misses = st.misses,
                                    .evictions = st.evictions,
                                    .entries = st.entries,
                                    .bytes = st.bytes,
                                    .budget = st.budget};
}

/* ---- session: creation and prompts ---------------------------------------------------------- */

void pp_session_destroy(pp_session *s) {
    if (!s) return;
    pp_lmgen_destroy(s->gen);
    pp_mimi_state_destroy(s->mimi);
    pp_voice_free(&s->voice);
    free(s->prompt);
    free(s);
}

/* Reads the voice file at path into v: embeddings of the LM's width, a token ring it reads. */
static int read_voice(const pp_model *m, const char *path, pp_voice *v, char *err) {
    int rc = pp_voice_load(path, pp_lm_get_config(m->lm)->dim, v, err);
    /* Here, not at the prompt: the message names the file, and no conversation starts on it. The
     * file is at fault, not the caller (EFORMAT, as a voice of another model's width). */
    if (!rc && pp_lmgen_check_voice_tokens(pp_lm_get_config(m->lm), &v->cache[0][0], path, err)) {
        pp_voice_free(v);
        rc = PP_EFORMAT;
    }
    return rc;
}

int pp_model_check_voice(const pp_model *m, const char *name, char *err) {
    if (!m->voices_dir[0]) return PP_OK;
    char path[4200];
    pp_voice v = {0};
    int rc = pp_voice_resolve(m->voices_dir, name, path, sizeof path, err);
    if (!rc) rc = read_voice(m, path, &v, err);
    pp_voice_free(&v);
    return rc;
}

static int load_voice(pp_session *s, const char *name, char *err) {
    const pp_model *m = s->m;
    if (!m->voices_dir[0]) {
        PP_WARN("session", "no voices directory: voice '%s' ignored, no voice prompt", name);
        return PP_OK;
    }
    char path[4200];
    int rc = pp_voice_resolve(m->voices_dir, name, path, sizeof path, err);
    /* The identity before the bytes: a file replaced in between leaves an entry under the old
     * identity, which no later session asks for, rather than old bytes under the new one. */
    if (!rc) voice_identity(path, s->voice_id, sizeof s->voice_id);
    return rc ? rc : read_voice(m, path, &s->voice, err);
}

/* The token ids of text prompt text (at most max of them) into ids: a named prompt ("@NAME") as
 * stored, else the text <system>-wrapped and tokenized. */
static int text_prompt_tokens(const pp_model *m, const char *text, int max, int32_t *ids, size_t *n, char *err) {
    *n = 0;
    if (text[0] != '@') {
        int rc = pp_spm_encode_prompt(m->spm, text, ids, (size_t)max, n, err);
        if (rc == PP_EFULL) pp_fail(err, PP_EFULL, "the text prompt is too long: the limit is %d tokens", max);
        return rc;
    }
    const int32_t *named;
    const int text_card = pp_lm_get_config(m->lm)->text_card;
    int rc = pp_prompts_find(m->prompts, text + 1, &named, n, err);
    if (!rc && *n > (size_t)max)
        rc = pp_fail(err, PP_EFULL, "system prompt '%s' has %zu tokens: the limit is %d", text + 1, *n, max);
    /* The server's prompts file is at fault, not the caller (EFORMAT, as a voice's bad token). */
    for (size_t i = 0; !rc && i < *n; i++)
        if (named[i] >= text_card)
            rc = pp_fail(err, PP_EFORMAT, "system prompt '%s': token %d is past the text vocabulary (%d)", text + 1,
                         named[i], text_card);
    if (!rc) memcpy(ids, named, *n * sizeof *ids);
    return rc;
}

int pp_model_check_text_prompt(const pp_model *m, const char *text, int max_prompt_tokens, char *err) {
    size_t n;
    int32_t *ids = malloc((size_t)max_prompt_tokens * sizeof *ids);
    int rc = ids ? text_prompt_tokens(m, text, max_prompt_tokens, ids, &n, err)
                 : pp_fail(err, PP_ENOMEM, "text prompt: out of memory");
    free(ids);
    return rc;
}

int pp_session_create(pp_model *m, const pp_session_params *p, int max_prompt_tokens, pp_session **out, char *err) {
    pp_session *s = calloc(1, sizeof *s);
    if (!s) return pp_fail(err, PP_ENOMEM, "session: out of memory");
    s->m = m;
    size_t n = 0;
    int rc = load_voice(s, p->voice, err);
    if (!rc && !(s->prompt = malloc((size_t)max_prompt_tokens * sizeof *s->prompt)))
        rc = pp_fail(err, PP_ENOMEM, "session: out of memory");
    if (!rc) rc = text_prompt_tokens(m, p->text_prompt, max_prompt_tokens, s->prompt, &n, err);
    s->n_prompt = (int)n;
    pp_lmgen_params lp;
    pp_lmgen_params_default(&lp);
    lp.text_temp = p->text_temperature;
    lp.text_top_k = p->text_topk;
    lp.audio_temp = p->audio_temperature;
    lp.audio_top_k = p->audio_topk;
    lp.kv_cache = s->kv = m->kv;
    lp.text_seed = p->text_seed;
    lp.audio_seed = p->audio_seed;
    if (!rc) rc = pp_lmgen_create(m->lm, &lp, &s->gen, err);
    if (!rc) rc = pp_mimi_state_create(m->mimi, &s->mimi, err);
    if (rc) {
        pp_session_destroy(s);
        return rc;
    }
    s->schedule = (pp_lmgen_prompt){
        .voice_emb = s->voice.embeddings,
        .voice_cache = s->voice.frames ? &s->voice.cache[0][0] : NULL,
        .n_voice = (int)s->voice.frames,
        .silence = PP_LMGEN_SILENCE_FRAMES,
        .text = s->prompt,
        .n_text = s->n_prompt,
    };
    *out = s;
    return PP_OK;
}

int pp_session_prompt_frames(const pp_session *s) { return pp_lmgen_prompt_length(&s->schedule); }
int pp_session_prompt_done(const pp_session *s) { return s->done; }
int pp_session_prompt_cached(const pp_session *s) { return s->cached; }


static pp_prompt_key cache_key(const pp_session *s) {
    return (pp_prompt_key){
        .model = s->m->identity, .voice = s->voice_id, .kv = s->kv, .text = s->prompt, .n_text = s->n_prompt};
}

int pp_session_prompt_restorable(const pp_session *s) {
    if (s->done || !s->m->cache) return 0;
    pp_prompt_key k = cache_key(s);
    return pp_prompt_cache_holds(s->m->cache, &k) == 1;
}

int pp_session_shares_prompt(const pp_session *a, const pp_session *b) {
    pp_prompt_key ka = cache_key(a), kb = cache_key(b);
    return a->m == b->m && a->m->cache && ka.kv == kb.kv && strcmp(ka.voice, kb.voice) == 0 &&
           ka.n_text == kb.n_text && memcmp(ka.text, kb.text, (size_t)ka.n_text * sizeof *ka.text) == 0;
}

/* Prompt frames [s->done, to) as one pass on the model's shared prefill scratch. */
static int prefill_run(pp_session *s, int to, char *err) {
    pp_model *m = s->m;
    pthread_mutex_lock(&m->prefill_lock);
    int rc = m->prefill ? PP_OK : pp_lmbatch_create(m->lm, PP_SESSION_PREFILL_ROWS, &m->prefill, err);
    if (!rc) rc = pp_lmgen_prefill(s->gen, m->prefill, &s->schedule, s->done, to, err);
    pthread_mutex_unlock(&m->prefill_lock);
    return rc;
}

/* Offers the finished prompt state to the cache; a failure only costs the next session time. */
static void cache_store(pp_session *s) {
    char err[PP_ERR_LEN];
    pp_lmgen_snapshot *snap = NULL;
    int rc = pp_lmgen_snapshot_take(s->gen, &snap, err);
    if (!rc) {
        pp_prompt_key k = cache_key(s);
        rc = pp_prompt_cache_put(s->m->cache, &k, snap);
        if (rc == PP_ENOMEM) pp_fail(err, rc, "out of memory");
    }
    if (rc < 0) PP_WARN("session", "prompt state not cached: %s", err);
}

int pp_session_prefill(pp_session *s, char *err) {
    if (s->ready) return 1;
    int total = pp_session_prompt_frames(s), rc;
    if (s->done == 0 && s->m->cache) {
        pp_prompt_key k = cache_key(s);
        if ((rc = pp_prompt_cache_restore(s->m->cache, &k, s->gen, err)) < 0) return rc;
        s->cached = rc == 1;
        if (s->cached) s->done = total;
    }
    if (s->done < total) {
        int to = total - s->done > PP_SESSION_PREFILL_ROWS ? s->done + PP_SESSION_PREFILL_ROWS : total;
        if ((rc = prefill_run(s, to, err))) return rc;
        s->done = to;
        if (s->done < total) return 0;
        if (s->m->cache) cache_store(s);
    }
    /* The reference resets the codec before the conversation (docs/model.md §6.1). */
    pp_mimi_state_reset(s->mimi);
    s->ready = 1;
    /* The voice's frames have run (or come from the cache): a long voice need not stay in every
     * conversation's memory. Its identity stays, for the prompt cache's key. */
    pp_voice_free(&s->voice);
    s->schedule.voice_emb = NULL;
    s->schedule.voice_cache = NULL;
    return 1;
}

/* ---- session: frames ------------------------------------------------------------------------ */

int pp_session_encode(pp_session *s, const float *pcm_in, char *err) {
    if (!s->ready) return pp_fail(err, PP_EINVAL, "session: step before the prompts have run");
    int rc = pp_mimi_encode_frame(s->mimi, pcm_in, s->user, NULL, err);
    s->stage = rc ? STAGE_IDLE : STAGE_ENCODED;
    return rc;
}

/* The frame's text piece. Padding ids (0 EPAD, 3 PAD) are not sent (docs/protocol.md §2.4). The
 * bytes of a character spelled by byte-fallback ids wait in the session until it is whole, so
 * every piece is valid UTF-8. A piece that does not fit is dropped rather than cut. */
static void text_piece(pp_session *s, char piece[PP_SESSION_PIECE_MAX]) {
    piece[0] = '\0';
    int text = s->out.text;
    char raw[PP_SESSION_PIECE_MAX], joined[PP_UTF8_JOIN_MAX(PP_SESSION_PIECE_MAX)];
    if (text == 0 || text == PP_LM_TEXT_PAD || pp_spm_piece(s->m->spm, text, raw, sizeof raw, NULL) != PP_OK) return;
    size_t len = pp_utf8_join(&s->text_carry, raw, strlen(raw), joined);
    if (len < PP_SESSION_PIECE_MAX) {
        memcpy(piece, joined, len);
        piece[len] = '\0';
    }
}

int pp_session_decode(pp_session *s, float *pcm_out, char piece[PP_SESSION_PIECE_MAX], char *err) {
    piece[0] = '\0';
    if (s->stage != STAGE_STEPPED) return pp_fail(err, PP_EINVAL, "session: decode before the frame's LM tick");
    s->stage = STAGE_IDLE;
    const pp_lmgen_out *out = &s->out;
    if (!out->ready) {
        memset(pcm_out, 0, PP_FRAME_SAMPLES * sizeof *pcm_out);
        return PP_OK;
    }
    int rc = pp_mimi_decode_frame(s->mimi, out->agent, pcm_out, err);
    if (!rc) text_piece(s, piece);
    return rc;
}

static int check_encoded(const pp_session *s, int i, char *err) {
    if (s->stage != STAGE_ENCODED)
        return pp_fail(err, PP_EINVAL, "session: batch entry %d has no encoded frame waiting for its tick", i);
    return PP_OK;
}

int pp_session_step(pp_session *s, const float *pcm_in, float *pcm_out, char piece[PP_SESSION_PIECE_MAX],
                    pp_step_times *times, char *err) {
    piece[0] = '\0';
    double t0 = pp_now_ms();
    int rc = pp_session_encode(s, pcm_in, err);
    double t1 = pp_now_ms();
    /* The LM stage of a one-session batch: pp_lmgen_step is the one-row tick. */
    if (!rc) rc = check_encoded(s, 0, err);
    if (!rc) rc = pp_lmgen_step(s->gen, s->user, &s->out, err);
    if (!rc) s->stage = STAGE_STEPPED;
    double t2 = pp_now_ms();
    if (!rc) rc = pp_session_decode(s, pcm_out, piece, err);
    if (rc) return rc;
    if (times) *times = (pp_step_times){.encode_ms = t1 - t0, .lm_ms = t2 - t1, .decode_ms = pp_now_ms() - t2};
    return PP_OK;
}

/* ---- batches -------------------------------------------------------------------------------- */

void pp_session_batch_destroy(pp_session_batch *b) {
    if (!b) return;
    pp_lmbatch_destroy(b->lm);
    pp_mimi_batch_destroy(b->codec);
    free(b->states);
    free(b->user_codes);
    free(b->codes);
    free(b->pcm);
    free(b->gens);
    free(b->user);
    free(b->outs);
    free(b);
}

int pp_session_batch_create(pp_model *m, int capacity, pp_session_batch **out, char *err) {
    *out = NULL;
    pp_session_batch *b = calloc(1, sizeof *b);
    if (!b) return pp_fail(err, PP_ENOMEM, "session batch: out of memory");
    b->m = m;
    b->cap = capacity;
    int rc = pp_lmbatch_create(m->lm, capacity, &b->lm, err);
    if (!rc) rc = pp_mimi_batch_create(m->mimi, capacity, &b->codec, err);
    if (!rc) {
        b->gens = calloc((size_t)capacity, sizeof *b->gens);
        b->user = calloc((size_t)capacity, sizeof *b->user);
        b->outs = calloc((size_t)capacity, sizeof *b->outs);
        b->states = calloc((size_t)capacity, sizeof *b->states);
        b->user_codes = calloc((size_t)capacity, sizeof *b->user_codes);
        b->codes = calloc((size_t)capacity, sizeof *b->codes);
        b->pcm = calloc((size_t)capacity, sizeof *b->pcm);
        if (!b->gens || !b->user || !b->outs || !b->states || !b->user_codes || !b->codes || !b->pcm)
            rc = pp_fail(err, PP_ENOMEM, "session batch: out of memory for %d sessions", capacity);
    }
    if (rc) {
        pp_session_batch_destroy(b);
        return rc;
    }
    *out = b;
    return PP_OK;
}

size_t pp_session_batch_bytes(const pp_session_batch *b) {
    size_t per_row = sizeof *b->gens + sizeof *b->user + sizeof *b->outs + sizeof *b->states + sizeof *b->user_codes +
                     sizeof *b->codes + sizeof *b->pcm;
    return pp_lmbatch_bytes(b->lm) + pp_mimi_batch_bytes(b->codec) + (size_t)b->cap * per_row;
}

static int check_batch(const pp_session_batch *b, pp_session *const *ss, int n, char *err) {
    if (n < 0 || n > b->cap)
        return pp_fail(err, PP_EINVAL, "session batch: %d sessions in a batch of capacity %d", n, b->cap);
    for (int i = 0; i < n; i++)
        if (ss[i]->m != b->m) return pp_fail(err, PP_EINVAL, "session batch: entry %d is of another model", i);
    return PP_OK;
}

int pp_session_batch_step(pp_session_batch *b, pp_session *const *ss, int n, char *err) {
    int rc = check_batch(b, ss, n, err);
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        rc = check_encoded(ss[i], i, err);
        if (rc) return rc;
        b->gens[i] = ss[i]->gen;
        memcpy(b->user[i], ss[i]->user, sizeof b->user[i]);
    }
    /* pp_lmbatch_step refuses a session listed twice before anything changes. */
    rc = pp_lmbatch_step(b->lm, b->gens, n, (const int32_t(*)[PP_LM_AUDIO_CODEBOOKS])b->user, b->outs, err);
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        ss[i]->out = b->outs[i];
        ss[i]->stage = STAGE_STEPPED;
    }
    return PP_OK;
}

int pp_session_batch_encode(pp_session_batch *b, pp_session *const *ss, int n, const float *const *pcm_in, char *err) {
    int rc = check_batch(b, ss, n, err);
    if (rc || n == 0) return rc;
    for (int i = 0; i < n; i++) {
        if (!ss[i]->ready)
            return pp_fail(err, PP_EINVAL, "session batch: entry %d steps before its prompts have run", i);
        b->states[i] = ss[i]->mimi;
        b->user_codes[i] = ss[i]->user;
    }
    rc = pp_mimi_encode_batch(b->codec, b->states, n, pcm_in, b->user_codes, err);
    for (int i = 0; i < n && !rc; i++) ss[i]->stage = STAGE_ENCODED;
    return rc;
}

int pp_session_batch_decode(pp_session_batch *b, pp_session *const *ss, int n, float *const *pcm_out,
                            char (*pieces)[PP_SESSION_PIECE_MAX], char *err) {
    int rc = check_batch(b, ss, n, err);
    if (rc) return rc;
    for (int i = 0; i < n; i++)
        if (ss[i]->stage != STAGE_STEPPED)
            return pp_fail(err, PP_EINVAL, "session batch: entry %d decodes before the frame's LM tick", i);
    /* Sessions whose agent has not spoken yet get silence; the rest share one codec call. Their
     * stage moves on only once it has run, so a failed call can be retried (a server runs each
     * session alone then, to find the one at fault). */
    int k = 0;
    for (int i = 0; i < n; i++) {
        pieces[i][0] = '\0';
        if (!ss[i]->out.ready) {
            memset(pcm_out[i], 0, PP_FRAME_SAMPLES * sizeof *pcm_out[i]);
            continue;
        }
        b->states[k] = ss[i]->mimi;
        b->codes[k] = ss[i]->out.agent;
        b->pcm[k++] = pcm_out[i];
    }
    if (k && (rc = pp_mimi_decode_batch(b->codec, b->states, k, b->codes, b->pcm, err))) return rc;
    for (int i = 0; i < n; i++) {
        ss[i]->stage = STAGE_IDLE;
        if (ss[i]->out.ready) text_piece(ss[i], pieces[i]);
    }
    return PP_OK;
}
