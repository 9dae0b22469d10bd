// One OpenAI-style request body (/v1/completions or /v1/chat/completions), parsed and validated: every
// field's type and range is checked here, before anything reaches the engine, and a bad field gets an
// error naming it in OpenAI's error shape (status, type, param, message).
#pragma once
#include <stddef.h>
#include <stdint.h>

#define SRV_MAX_STOP 4            // OpenAI's limit on stop sequences
#define SRV_MAX_STOP_LEN 256      // bytes per stop sequence

typedef struct srv_error {
    int status;                   // HTTP status: 400, 404, 413, 429, 500, 503
    const char *type;             // "invalid_request_error", "not_found_error", ...
    char param[64];               // the offending field ("" when none)
    char message[512];
} srv_error;

typedef struct srv_limits {
    size_t max_body;              // bytes
    int max_tokens;               // the most a request may ask for
    const char *model_name;       // the served name: a request naming another model is a 404
} srv_limits;

typedef struct srv_message { char *role, *content; } srv_message;

typedef struct srv_params {
    int chat;                     // /v1/chat/completions
    char *prompt;                 // completions: text (or NULL when prompt_ids)
    int32_t *prompt_ids; int n_prompt_ids;
    srv_message *messages; int n_messages;   // chat
    int enable_thinking;          // chat_template_kwargs.enable_thinking (default 1)
    int max_tokens;               // -1: not given
    double temperature, top_p;    // OpenAI's defaults: 1, 1
    int top_k;                    // 0: off (an extension, as vLLM's)
    int has_seed; uint64_t seed;
    char *stop[SRV_MAX_STOP]; int n_stop;
    int stream, include_usage;    // stream_options.include_usage
    int ignore_eos;               // an extension, as vLLM's: keep going past EOS
} srv_params;

// Parses body (len bytes, not necessarily NUL-terminated). Returns 0, or -1 with *e filled.
int  srv_parse_request(const char *body, size_t len, int chat, const srv_limits *lim, srv_params *out, srv_error *e);
void srv_params_free(srv_params *p);
// Fills *e (status, type, param, printf-style message); returns -1.
int  srv_fail(srv_error *e, int status, const char *type, const char *param, const char *fmt, ...)
     __attribute__((format(printf, 5, 6)));
// 1 if s[0..n) is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
int  srv_utf8_valid(const char *s, size_t n);
