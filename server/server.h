// `blockspec serve`: an OpenAI-compatible HTTP server over one loaded model (libmicrohttpd, one thread
// per connection), decoding every request through the library's batched runtime on ONE engine thread.
//
//   connection threads (server/http.c)          engine thread (server/engine.c)
//   parse + validate the body (request.c)       admit queued requests up to max_running
//   render the chat, tokenize, check the fit    blockspec_step: one batched round for all of them
//   queue the request  ------------------->     tokens -> detokenizer -> text, stop strings
//   wait / stream its text  <--------------     done: finish reason, usage, metrics
//
// The library is used only through include/blockspec.h, and only the engine thread drives the handle.
#pragma once
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include "blockspec.h"

typedef struct serve_opts {
    const char *host;              // address to listen on (default 127.0.0.1)
    int port;                      // 0: any free port (the log says which)
    const char *model_name;        // the name /v1/models reports and requests must use
    int max_running;               // requests decoded at once
    int max_waiting;               // more are queued up to this many; beyond: 429
    int max_tokens;                // the most one request may generate
    int max_ctx;                   // prompt + output per request (0: the model's limit)
    size_t max_body;               // request body bytes
    int idle_timeout_s;            // a connection silent this long is closed (slow or stuck clients)
    double shutdown_grace_s;       // on SIGTERM: running requests get this long to finish, then are cancelled
    blockspec_params defaults;     // draft_max, confidence_threshold, use_drafter for every request
    FILE *log;                     // "listening on ...", errors; NULL: quiet
} serve_opts;

serve_opts serve_default_opts(void);
// Serves until *stop becomes non-zero (a signal handler sets it), then shuts down gracefully. Returns 0,
// or -1 with a message in err (e.g. the port is taken).
int serve_run(blockspec *bs, const serve_opts *o, volatile sig_atomic_t *stop, char *err, size_t err_len);
