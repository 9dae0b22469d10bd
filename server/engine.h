// Inside the server: a request's shared state, the queue, and the engine thread that decodes them.
// Every field marked "locked" is read and written under srv->mu; the blockspec handle and the fields
// marked "engine" belong to the engine thread alone.
#pragma once
#include <pthread.h>
#include "server/metrics.h"
#include "server/request.h"
#include "server/server.h"

typedef enum { RQ_QUEUED, RQ_RUNNING, RQ_DONE } srv_req_state;

typedef struct srv srv;
typedef struct srv_req {
    srv *s;
    srv_params p;                  // the parsed request (immutable once queued)
    int32_t *ids; int n_ids;       // the prompt's tokens
    int max_tokens;                // resolved: the request's, or what the context leaves
    char id[48]; long created;
    pthread_cond_t cv;             // signalled when text arrives or the request ends
    // locked
    srv_req_state state;
    int failed; srv_error err;     // ended by an error (the body says which)
    char *text; size_t len, cap;   // generated text, cut at a stop sequence
    int n_gen, n_prompt;
    const char *finish;            // "stop" / "length" once done (NULL if cancelled or failed)
    int stop_hit;                  // a stop sequence ended it
    int gone;                      // the client went away: cancel
    double t_arrive, t_last;
    int refs;                      // the connection's and the engine's
    struct srv_req *next;          // queue or running list
    // engine
    blockspec_request *r;
    blockspec_detokenizer *dt;
    long seen_rounds, seen_drafted, seen_accepted, seen_pos[SRV_MAX_POS];
} srv_req;

struct srv {
    blockspec *bs;
    serve_opts o;
    int ctx_limit;                 // prompt + output, per request
    pthread_mutex_t mu;
    pthread_cond_t work;           // the engine thread waits here for work
    pthread_t thread;
    // locked
    srv_req *queue, *queue_tail, *running;
    int n_waiting, n_running;
    int stopping;                  // no new requests; the engine thread ends once idle
    double deadline;               // stopping: cancel what still runs after this
    srv_metrics m;
    unsigned long next_id;
};

double srv_now(void);
int  srv_engine_start(srv *s, char *err, size_t err_len);
void srv_engine_stop(srv *s);      // after stopping is set: waits for the engine thread
// Queues q (its refs count the caller and the engine). Returns 0, or -1 with *e (queue full: 429;
// shutting down: 503).
int  srv_enqueue(srv *s, srv_req *q, srv_error *e);
// The client went away (locked): a queued request leaves the queue at once; a running one is cancelled
// before the next step.
void srv_abandon(srv *s, srv_req *q);
// Drops the caller's reference (locked); frees q when the engine is done with it too.
void srv_req_release(srv_req *q);
// Bytes of q->text that are final (locked): all of it once done, else short of any tail that could still
// grow into a stop sequence.
size_t srv_req_final_len(const srv_req *q);
