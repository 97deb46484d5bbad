/* server: the shared state's accessors (see server.h), in one place that every other server
 * file may call without calling each other. */
#include "server/server.h"

engine *server_engine(server *s, pp_model **model) {
    pthread_mutex_lock(&s->lock);
    engine *e = s->engine;
    *model = s->model;
    pthread_mutex_unlock(&s->lock);
    return e;
}

void server_publish(server *s, pp_model *model, engine *e, const char *load_error) {
    pthread_mutex_lock(&s->lock);
    if (load_error) {
        s->failed = 1;
        snprintf(s->load_error, sizeof s->load_error, "%s", load_error);
    }
    s->model = model;
    s->engine = e;
    pthread_mutex_unlock(&s->lock);
}

int server_draining(const server *s) { return atomic_load(&s->draining); }

void server_start_draining(server *s) { atomic_store(&s->draining, 1); }
