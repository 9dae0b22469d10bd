// The engine thread: admits queued requests into the library's runtime, steps it (one batched round for
// every running request per step), turns tokens into text, applies stop sequences, and ends requests.
// The lock is never held across blockspec_step: connection threads queue, read text and leave while a
// step runs; the token callback takes it briefly per token.
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "server/engine.h"

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void req_free(srv_req *q) {
    srv_params_free(&q->p);
    free(q->ids); free(q->text);
    pthread_cond_destroy(&q->cv);
    free(q);
}

void srv_req_release(srv_req *q) { if (--q->refs == 0) req_free(q); }

void srv_abandon(srv *s, srv_req *q) {
    q->gone = 1;
    if (q->state == RQ_QUEUED) {   // never started: out of the queue now, so it holds no place there
        srv_req **pp = &s->queue, *prev = NULL;
        while (*pp && *pp != q) { prev = *pp; pp = &(*pp)->next; }
        if (*pp) {
            *pp = q->next;
            if (s->queue_tail == q) s->queue_tail = prev;
            s->n_waiting--;
            s->m.waiting = s->n_waiting;
            s->m.requests_cancelled++;
            q->state = RQ_DONE;
            srv_req_release(q);   // the engine's reference
        }
    }
    pthread_cond_signal(&s->work);   // a running one is cancelled by the engine thread before its next step
}

int srv_enqueue(srv *s, srv_req *q, srv_error *e) {
    if (s->stopping) return srv_fail(e, 503, "server_error", "", "the server is shutting down");
    if (s->n_waiting >= s->o.max_waiting && s->n_running >= s->o.max_running)
        return srv_fail(e, 429, "rate_limit_error", "", "too many requests: %d running and %d queued (the limits: --max-concurrency %d, --max-queue %d)",
                        s->n_running, s->n_waiting, s->o.max_running, s->o.max_waiting);
    q->state = RQ_QUEUED;
    q->refs = 2;
    q->next = NULL;
    if (s->queue_tail) s->queue_tail->next = q; else s->queue = q;
    s->queue_tail = q;
    s->n_waiting++;
    s->m.waiting = s->n_waiting;
    pthread_cond_signal(&s->work);
    return 0;
}

// Appends generated text; returns 1 if a stop sequence now appears in it (the text is cut before it).
static int append_text(srv_req *q, const char *t, size_t n) {
    if (q->len + n + 1 > q->cap) {
        size_t cap = (q->len + n + 1) * 2;
        char *p = realloc(q->text, cap);
        if (!p) return 0;   // text lost only if memory runs out; the tokens still count
        q->text = p; q->cap = cap;
    }
    // A stop sequence can start up to its length - 1 bytes before the new text.
    size_t from = q->len;
    memcpy(q->text + q->len, t, n);
    q->len += n;
    q->text[q->len] = 0;
    size_t best = (size_t)-1;
    for (int i = 0; i < q->p.n_stop; i++) {
        size_t sl = strlen(q->p.stop[i]), start = from >= sl - 1 ? from - (sl - 1) : 0;
        char *hit = memmem(q->text + start, q->len - start, q->p.stop[i], sl);
        if (hit && (size_t)(hit - q->text) < best) best = (size_t)(hit - q->text);
    }
    if (best == (size_t)-1) return 0;
    q->len = best;
    q->text[q->len] = 0;
    return 1;
}

size_t srv_req_final_len(const srv_req *q) {
    if (q->state == RQ_DONE || !q->p.n_stop) return q->len;
    size_t hold = 0;
    for (int i = 0; i < q->p.n_stop; i++) {
        size_t sl = strlen(q->p.stop[i]);
        // The longest tail of the text that is a proper prefix of this stop sequence.
        for (size_t k = sl - 1 < q->len ? sl - 1 : q->len; k > hold; k--)
            if (!memcmp(q->text + q->len - k, q->p.stop[i], k)) { hold = k; break; }
    }
    return q->len - hold;
}

// The library calls this for every token it emits (engine thread, inside blockspec_step).
static int on_token(void *ctx, int32_t t) {
    srv_req *q = ctx;
    srv *s = q->s;
    char buf[8192];
    int n = blockspec_detokenizer_push(q->dt, t, buf, sizeof buf);
    double now = srv_now();
    pthread_mutex_lock(&s->mu);
    if (q->n_gen == 0) srv_hist_observe(&s->m.ttft, now - q->t_arrive);
    else srv_hist_observe(&s->m.itl, now - q->t_last);
    q->t_last = now;
    q->n_gen++;
    s->m.generation_tokens++;
    int stop = q->gone;
    if (n > 0 && append_text(q, buf, (size_t)n)) stop = q->stop_hit = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&s->mu);
    return stop;
}

// Locked. Takes q off the running list (or it was never on it) and ends it.
static void unlink_running(srv *s, srv_req *q) {
    for (srv_req **pp = &s->running; *pp; pp = &(*pp)->next)
        if (*pp == q) { *pp = q->next; s->n_running--; break; }
    q->next = NULL;
    s->m.running = s->n_running;
}

// Locked. The engine lets go of q: its library request and detokenizer are freed.
static void end_request(srv *s, srv_req *q) {
    if (q->r) {
        blockspec_stats st;
        blockspec_request_stats(q->r, &st);
        if (!q->failed) {
            if (q->dt) { char buf[64]; int n = blockspec_detokenizer_flush(q->dt, buf, sizeof buf); if (n > 0 && !q->stop_hit) append_text(q, buf, (size_t)n); }
            const char *f = st.finish_reason;
            if (q->stop_hit || !strcmp(f, "eos")) q->finish = "stop";
            else if (!strcmp(f, "length") || !strcmp(f, "context")) q->finish = "length";
            else q->finish = NULL;   // cancelled: the client is gone
            if (q->finish) { s->m.requests_ok++; srv_hist_observe(&s->m.e2e, srv_now() - q->t_arrive); }
            else s->m.requests_cancelled++;
        }
        blockspec_request_free(s->bs, q->r);
        q->r = NULL;
    }
    blockspec_detokenizer_free(q->dt);
    q->dt = NULL;
    q->state = RQ_DONE;
    pthread_cond_broadcast(&q->cv);
    srv_req_release(q);
}

// Locked on entry and exit. Starts q in the library, or ends it with the library's refusal.
static void admit(srv *s, srv_req *q) {
    blockspec_params p = s->o.defaults;
    p.n_new = q->max_tokens;
    p.temperature = (float)q->p.temperature;
    p.top_p = (float)q->p.top_p;
    p.top_k = q->p.top_k;
    p.seed = q->p.has_seed ? q->p.seed : (uint64_t)time(NULL) * 6364136223846793005ull + s->next_id;
    p.stop_at_eos = !q->p.ignore_eos;
    p.n_ctx = 0;
    char err[512];
    q->state = RQ_RUNNING;
    q->next = s->running; s->running = q; s->n_running++;
    s->m.running = s->n_running;
    pthread_mutex_unlock(&s->mu);
    q->dt = blockspec_detokenizer_new(s->bs);
    int rc = blockspec_submit(s->bs, q->ids, (size_t)q->n_ids, &p, on_token, q, &q->r, err, sizeof err);
    pthread_mutex_lock(&s->mu);
    if (rc) {
        q->failed = 1;
        srv_fail(&q->err, 400, "invalid_request_error", "", "%s", err);
        s->m.requests_rejected++;
        unlink_running(s, q);
        end_request(s, q);
        return;
    }
    s->m.prompt_tokens += (unsigned long)q->n_ids;
    q->n_prompt = q->n_ids;
}

// Locked. Adds what q's drafts did since the last look to the speculative counters.
static void count_spec(srv *s, srv_req *q) {
    blockspec_spec_counts c;
    blockspec_request_spec_counts(q->r, &c);
    s->m.num_drafts += (unsigned long)(c.rounds - q->seen_rounds);
    s->m.num_draft_tokens += (unsigned long)(c.drafted - q->seen_drafted);
    s->m.num_accepted_tokens += (unsigned long)(c.accepted - q->seen_accepted);
    q->seen_rounds = c.rounds; q->seen_drafted = c.drafted; q->seen_accepted = c.accepted;
    for (int k = 0; k < c.n_pos && k < SRV_MAX_POS; k++) {
        s->m.accepted_per_pos[k] += (unsigned long)(c.pos_accepted[k] - q->seen_pos[k]);
        q->seen_pos[k] = c.pos_accepted[k];
        if (k + 1 > s->m.n_pos) s->m.n_pos = k + 1;
    }
}

static void *engine_main(void *arg) {
    srv *s = arg;
    char err[512];
    pthread_mutex_lock(&s->mu);
    for (;;) {
        // Clients that left, and (past the shutdown deadline) everything still running, are cancelled.
        int overdue = s->stopping && srv_now() > s->deadline;
        for (srv_req *q = s->running, *nx; q; q = nx) {
            nx = q->next;
            if (!(q->gone || overdue) || !q->r || blockspec_request_done(q->r)) continue;
            if (overdue && !q->gone) {   // its client is still there: tell it why the answer stops short
                q->failed = 1;
                srv_fail(&q->err, 503, "server_error", "", "the server shut down before this request finished");
            }
            blockspec_cancel(s->bs, q->r);
        }
        while (s->queue && s->n_running < s->o.max_running) {
            srv_req *q = s->queue;
            s->queue = q->next;
            if (!s->queue) s->queue_tail = NULL;
            s->n_waiting--;
            s->m.waiting = s->n_waiting;
            if (q->gone || overdue) { s->m.requests_cancelled++; end_request(s, q); continue; }
            admit(s, q);
        }
        if (!s->n_running) {
            if (s->stopping && !s->queue) break;
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        int rc = blockspec_step(s->bs, err, sizeof err);
        pthread_mutex_lock(&s->mu);
        s->m.steps++;
        srv_hist_observe(&s->m.verify_rows, blockspec_last_step_rows(s->bs));
        blockspec_kv_usage(s->bs, &s->m.kv);   // pages taken and given back in the step (the library's KV pool)
        for (srv_req *q = s->running, *nx; q; q = nx) {
            nx = q->next;
            if (rc < 0) {   // the library's requests in that step are unusable: fail them all, keep serving
                q->failed = 1;
                srv_fail(&q->err, 500, "server_error", "", "decoding failed: %s", err);
            } else {
                count_spec(s, q);
                if (!blockspec_request_done(q->r)) continue;
            }
            unlink_running(s, q);
            end_request(s, q);
        }
        if (rc < 0 && s->o.log) fprintf(s->o.log, "blockspec serve: a step failed (%s); its requests got a 500\n", err);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int srv_engine_start(srv *s, char *err, size_t err_len) {
    if (pthread_create(&s->thread, NULL, engine_main, s)) { snprintf(err, err_len, "cannot start the engine thread"); return -1; }
    return 0;
}

void srv_engine_stop(srv *s) {
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
}
