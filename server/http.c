// HTTP over libmicrohttpd, one thread per connection: routes, body collection with a size limit, the
// JSON and server-sent-event answers, disconnect detection, and the graceful shutdown.
#include <arpa/inet.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "server/engine.h"
#include "server/response.h"

#define WAIT_SLICE_MS 50            // how often a waiting connection checks that its client is still there

serve_opts serve_default_opts(void) {
    serve_opts o = { .host = "127.0.0.1", .port = 8080, .model_name = "blockspec", .max_running = 8, .max_waiting = 64,
                     .max_tokens = 4096, .max_body = 1 << 20, .idle_timeout_s = 30, .shutdown_grace_s = 30,
                     .defaults = blockspec_default_params(), .log = stderr };
    return o;
}

// One HTTP request's collected body (MHD's per-request pointer).
typedef struct conn { char *body; size_t len, cap; int too_big; } conn;

// A streamed answer's state, owned by its MHD response.
typedef struct stream {
    srv_req *q;
    int fd;                          // the client's socket (to notice it leaving)
    enum { ST_ROLE, ST_TEXT, ST_USAGE, ST_DONE_MARK, ST_END } phase;
    size_t sent;                     // bytes of q->text already sent
    char *out; size_t out_len, out_off;   // the event being written
} stream;

static int client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = { .fd = fd, .events = POLLRDHUP };
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

// Waits up to one slice for q to change (locked). Returns 1 when the client on fd has gone meanwhile: q is
// then abandoned (srv_abandon) and the caller stops answering.
static int wait_slice_or_gone(srv_req *q, int fd) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += WAIT_SLICE_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_cond_timedwait(&q->cv, &q->s->mu, &ts);
    if (!client_gone(fd)) return 0;
    srv_abandon(q->s, q);
    return 1;
}

static enum MHD_Result send_text(struct MHD_Connection *c, int status, const char *type, char *body) {
    if (!body) { body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}"); status = 500; }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_error(srv *s, struct MHD_Connection *c, const srv_error *e) {
    pthread_mutex_lock(&s->mu);
    s->m.requests_rejected++;
    pthread_mutex_unlock(&s->mu);
    return send_text(c, e->status, "application/json", srv_json_error(e));
}

static srv_reply reply_of(const srv_req *q, const char *model) {
    return (srv_reply){ q->id, model, q->created, q->p.chat, q->text ? q->text : "", q->len, q->finish, q->n_prompt, q->n_gen };
}

// The prompt's tokens (the chat rendered first), the output budget and the context check: all in the
// connection's thread, so a request that cannot run is answered at once.
static int prepare(srv *s, srv_req *q, srv_error *e) {
    char err[512];
    const srv_params *p = &q->p;
    if (p->prompt_ids) {
        int V = blockspec_vocab_size(s->bs);
        for (int i = 0; i < p->n_prompt_ids; i++)
            if (p->prompt_ids[i] >= V) return srv_fail(e, 400, "invalid_request_error", "prompt", "prompt[%d] = %d is outside the vocabulary [0, %d)", i, p->prompt_ids[i], V);
        if (!(q->ids = malloc(sizeof(int32_t) * (size_t)p->n_prompt_ids))) return srv_fail(e, 500, "server_error", "", "out of memory");
        memcpy(q->ids, p->prompt_ids, sizeof(int32_t) * (size_t)p->n_prompt_ids);
        q->n_ids = p->n_prompt_ids;
    } else {
        char *text = p->prompt;
        if (p->chat) {
            blockspec_chat_message *m = calloc((size_t)p->n_messages, sizeof *m);
            if (!m) return srv_fail(e, 500, "server_error", "", "out of memory");
            for (int i = 0; i < p->n_messages; i++) m[i] = (blockspec_chat_message){ p->messages[i].role, p->messages[i].content };
            int rc = blockspec_chat_render(s->bs, m, (size_t)p->n_messages, p->enable_thinking, &text, err, sizeof err);
            free(m);
            if (rc) return srv_fail(e, 400, "invalid_request_error", "messages", "%s", err);
        }
        size_t n = 0;
        int32_t *ids = NULL;
        int rc = blockspec_tokenize(s->bs, text, &ids, &n, err, sizeof err);
        if (p->chat) free(text);
        if (rc) return srv_fail(e, 400, "invalid_request_error", p->chat ? "messages" : "prompt", "%s", err);
        if (n == 0) { free(ids); return srv_fail(e, 400, "invalid_request_error", "prompt", "the prompt has no tokens"); }
        if (n > (size_t)s->ctx_limit) {
            free(ids);
            return srv_fail(e, 400, "invalid_request_error", p->chat ? "messages" : "prompt",
                            "the prompt has %zu tokens; this server's context is %d tokens", n, s->ctx_limit);
        }
        q->ids = ids; q->n_ids = (int)n;
    }
    // The context holds the prompt and every output token but the last (which is emitted, never fed).
    int room = s->ctx_limit - q->n_ids + 1;
    if (p->max_tokens < 0) q->max_tokens = room < s->o.max_tokens ? room : s->o.max_tokens;
    else q->max_tokens = p->max_tokens;
    if (q->max_tokens < 1 || q->max_tokens > room)
        return srv_fail(e, 400, "invalid_request_error", p->max_tokens < 0 ? "prompt" : "max_tokens",
                        "this server's context is %d tokens: the prompt's %d and max_tokens %d do not fit (at most %d output tokens)",
                        s->ctx_limit, q->n_ids, p->max_tokens < 0 ? q->max_tokens : p->max_tokens, room > 0 ? room : 0);
    return 0;
}

// ---- streamed answers ----

static void stream_event(stream *st, char *json) {
    free(st->out);
    st->out = NULL; st->out_len = st->out_off = 0;
    if (!json) return;
    size_t n = strlen(json);
    if ((st->out = malloc(n + 9))) { memcpy(st->out, "data: ", 6); memcpy(st->out + 6, json, n); memcpy(st->out + 6 + n, "\n\n", 3); st->out_len = n + 8; }
    free(json);
}

// Locked. The next event of the stream into st->out, or 0 if there is none yet.
static int next_event(stream *st, const char *model) {
    srv_req *q = st->q;
    srv_reply r = reply_of(q, model);
    if (st->phase == ST_ROLE) {    // chat streams open with the assistant's role
        st->phase = ST_TEXT;
        if (q->p.chat) { r.len = 0; r.finish = NULL; stream_event(st, srv_json_chunk(&r, 1, 0)); return 1; }
    }
    if (st->phase == ST_TEXT) {
        size_t fin = srv_req_final_len(q);
        if (fin > st->sent) {
            size_t end = fin - st->sent > 4096 ? st->sent + 4096 : fin;
            while (end > st->sent + 1 && (q->text[end] & 0xC0) == 0x80 && end < fin) end--;   // whole characters
            r.text = q->text + st->sent; r.len = end - st->sent; r.finish = NULL;
            st->sent = end;
            stream_event(st, srv_json_chunk(&r, 0, 0));
            return 1;
        }
        if (q->state != RQ_DONE) return 0;
        if (q->failed || !q->finish) {   // an error after the stream began: said in the stream
            srv_error e = q->err;
            if (!q->failed) srv_fail(&e, 500, "server_error", "", "the request was cancelled");
            stream_event(st, srv_json_error(&e));
            st->phase = ST_DONE_MARK;
            return 1;
        }
        r.len = 0;
        stream_event(st, srv_json_chunk(&r, 0, 0));
        st->phase = q->p.include_usage ? ST_USAGE : ST_DONE_MARK;
        return 1;
    }
    if (st->phase == ST_USAGE) { stream_event(st, srv_json_chunk(&r, 0, 1)); st->phase = ST_DONE_MARK; return 1; }
    if (st->phase == ST_DONE_MARK) {
        free(st->out);
        st->out = strdup("data: [DONE]\n\n"); st->out_len = st->out ? 14 : 0; st->out_off = 0;
        st->phase = ST_END;
        return 1;
    }
    return 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream *st = cls;
    srv *s = st->q->s;
    if (st->out_off == st->out_len) {
        if (st->phase == ST_END) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&s->mu);
        while (!next_event(st, s->o.model_name))
            if (wait_slice_or_gone(st->q, st->fd)) { pthread_mutex_unlock(&s->mu); return MHD_CONTENT_READER_END_WITH_ERROR; }
        pthread_mutex_unlock(&s->mu);
        if (!st->out) return MHD_CONTENT_READER_END_WITH_ERROR;   // out of memory
    }
    size_t n = st->out_len - st->out_off < max ? st->out_len - st->out_off : max;
    memcpy(buf, st->out + st->out_off, n);
    st->out_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream *st = cls;
    srv *s = st->q->s;
    pthread_mutex_lock(&s->mu);
    if (st->q->state != RQ_DONE) srv_abandon(s, st->q);
    srv_req_release(st->q);
    pthread_mutex_unlock(&s->mu);
    free(st->out);
    free(st);
}

// ---- completions ----

static enum MHD_Result completion(srv *s, struct MHD_Connection *c, conn *k, int chat) {
    srv_error e = { 0 };
    srv_limits lim = { s->o.max_body, s->o.max_tokens, s->o.model_name };
    if (k->too_big) { srv_fail(&e, 413, "invalid_request_error", "", "the request body is over %zu bytes", s->o.max_body); return send_error(s, c, &e); }
    srv_req *q = calloc(1, sizeof *q);
    if (!q) return send_error(s, c, (srv_fail(&e, 500, "server_error", "", "out of memory"), &e));
    if (srv_parse_request(k->body ? k->body : "", k->len, chat, &lim, &q->p, &e)) { free(q); return send_error(s, c, &e); }
    q->s = s;
    pthread_cond_init(&q->cv, NULL);
    q->refs = 1;
    if (prepare(s, q, &e)) { srv_req_release(q); return send_error(s, c, &e); }
    pthread_mutex_lock(&s->mu);
    snprintf(q->id, sizeof q->id, "%s-%lu", chat ? "chatcmpl" : "cmpl", ++s->next_id);
    q->created = (long)time(NULL);
    q->t_arrive = srv_now();
    int rc = srv_enqueue(s, q, &e);
    pthread_mutex_unlock(&s->mu);
    if (rc) { srv_req_release(q); return send_error(s, c, &e); }
    if (q->p.stream) {
        stream *st = calloc(1, sizeof *st);
        struct MHD_Response *r = st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, st, stream_free) : NULL;
        if (!r) {
            pthread_mutex_lock(&s->mu); srv_abandon(s, q); srv_req_release(q); pthread_mutex_unlock(&s->mu);
            free(st);
            return MHD_NO;
        }
        st->q = q; st->fd = conn_fd(c); st->phase = ST_ROLE;
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result mr = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return mr;
    }
    int fd = conn_fd(c);
    pthread_mutex_lock(&s->mu);
    while (q->state != RQ_DONE)
        if (wait_slice_or_gone(q, fd)) {   // nobody to answer: cancelled; close
            srv_req_release(q);
            pthread_mutex_unlock(&s->mu);
            return MHD_NO;
        }
    char *body;
    int status = 200;
    if (q->failed || !q->finish) {
        srv_error fe = q->err;
        if (!q->failed) srv_fail(&fe, 500, "server_error", "", "the request was cancelled");
        status = fe.status;
        body = srv_json_error(&fe);
    } else {
        srv_reply r = reply_of(q, s->o.model_name);
        body = srv_json_completion(&r);
    }
    srv_req_release(q);
    pthread_mutex_unlock(&s->mu);
    return send_text(c, status, "application/json", body);
}

// ---- the other routes ----

static enum MHD_Result models(srv *s, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject(), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
    cJSON_AddStringToObject(m, "id", s->o.model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "blockspec");
    cJSON_AddNumberToObject(m, "max_model_len", s->ctx_limit);
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return send_text(c, 200, "application/json", body);
}

static enum MHD_Result metrics(srv *s, struct MHD_Connection *c) {
    pthread_mutex_lock(&s->mu);
    char *body = srv_metrics_render(&s->m, s->o.model_name);
    pthread_mutex_unlock(&s->mu);
    return send_text(c, 200, "text/plain; version=0.0.4", body);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
                              const char *upload, size_t *upload_size, void **con_cls) {
    srv *s = cls;
    conn *k = *con_cls;
    if (!k) {   // the headers have arrived: the body (if any) comes in the next calls
        if (!(k = calloc(1, sizeof *k))) return MHD_NO;
        *con_cls = k;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {   // refused before reading a byte of it
            srv_error e = { 0 };
            srv_fail(&e, 413, "invalid_request_error", "", "the request body is %.30s bytes; at most %zu are accepted", cl, s->o.max_body);
            return send_error(s, c, &e);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!k->too_big && k->len + *upload_size > s->o.max_body) k->too_big = 1;
        if (!k->too_big) {
            if (k->len + *upload_size + 1 > k->cap) {
                size_t cap = (k->len + *upload_size + 1) * 2;
                char *b = realloc(k->body, cap);
                if (!b) return MHD_NO;
                k->body = b; k->cap = cap;
            }
            memcpy(k->body + k->len, upload, *upload_size);
            k->len += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    srv_error e = { 0 };
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health")) {
        if (!get) return send_error(s, c, (srv_fail(&e, 405, "invalid_request_error", "", "use GET for /health"), &e));
        pthread_mutex_lock(&s->mu);
        int stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        return send_text(c, stopping ? 503 : 200, "application/json", strdup(stopping ? "{\"status\":\"shutting down\"}" : "{\"status\":\"ok\"}"));
    }
    if (!strcmp(url, "/v1/models")) return get ? models(s, c) : send_error(s, c, (srv_fail(&e, 405, "invalid_request_error", "", "use GET for /v1/models"), &e));
    if (!strcmp(url, "/metrics")) return get ? metrics(s, c) : send_error(s, c, (srv_fail(&e, 405, "invalid_request_error", "", "use GET for /metrics"), &e));
    int chat = !strcmp(url, "/v1/chat/completions");
    if (chat || !strcmp(url, "/v1/completions")) {
        if (!post) return send_error(s, c, (srv_fail(&e, 405, "invalid_request_error", "", "use POST for %s", url), &e));
        return completion(s, c, k, chat);
    }
    return send_error(s, c, (srv_fail(&e, 404, "not_found_error", "", "no route %.100s %.200s (the routes: POST /v1/completions, POST /v1/chat/completions, "
                                      "GET /v1/models, /health, /metrics)", method, url), &e));
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why) {
    conn *k = *con_cls;
    if (k) { free(k->body); free(k); }
    *con_cls = NULL;
}

int serve_run(blockspec *bs, const serve_opts *o, volatile sig_atomic_t *stop, char *err, size_t err_len) {
    srv *s = calloc(1, sizeof *s);
    if (!s) { snprintf(err, err_len, "out of memory"); return -1; }
    s->bs = bs; s->o = *o;
    s->ctx_limit = blockspec_max_context(bs);
    if (o->max_ctx > 0 && o->max_ctx < s->ctx_limit) s->ctx_limit = o->max_ctx;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    srv_metrics_init(&s->m);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t)o->port) };
    if (inet_pton(AF_INET, o->host, &addr.sin_addr) != 1) { snprintf(err, err_len, "--host %s: not an IPv4 address", o->host); free(s); return -1; }
    if (srv_engine_start(s, err, err_len)) { free(s); return -1; }
    unsigned limit = (unsigned)(o->max_running + o->max_waiting + 16);
    struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC,
                                            (uint16_t)o->port, NULL, NULL, handle, s,
                                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                            MHD_OPTION_CONNECTION_LIMIT, limit,
                                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->idle_timeout_s,
                                            MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
                                            MHD_OPTION_END);
    if (!d) {
        snprintf(err, err_len, "cannot listen on %s:%d (taken, or not allowed)", o->host, o->port);
        srv_engine_stop(s);
        free(s);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    if (o->log) { fprintf(o->log, "blockspec serve: listening on http://%s:%u (model '%s')\n", o->host, di ? di->port : (unsigned)o->port, o->model_name); fflush(o->log); }
    while (!*stop) { struct timespec ts = { 0, 100000000L }; nanosleep(&ts, NULL); }
    if (o->log) { fprintf(o->log, "blockspec serve: shutting down (running requests get %.0f s to finish)\n", o->shutdown_grace_s); fflush(o->log); }
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    s->deadline = srv_now() + o->shutdown_grace_s;
    pthread_mutex_unlock(&s->mu);
    MHD_socket lfd = MHD_quiesce_daemon(d);   // no new connections
    srv_engine_stop(s);                      // what runs finishes (or is cancelled at the deadline)
    // Streams still sending their last events get a moment before the connections are closed.
    for (int i = 0; i < 40; i++) {
        const union MHD_DaemonInfo *ci = MHD_get_daemon_info(d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        if (!ci || ci->num_connections == 0) break;
        struct timespec ts = { 0, 50000000L }; nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(d);
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return 0;
}
