// The JSON the server answers with, in OpenAI's shapes: errors, whole completions, and the chunks of a
// stream (server-sent events).
#pragma once
#include <stddef.h>
#include "server/request.h"

typedef struct srv_reply {
    const char *id, *model;
    long created;
    int chat;
    const char *text; size_t len;  // the (whole or this chunk's) generated text
    const char *finish;            // "stop", "length", or NULL (a stream chunk mid-way)
    int n_prompt, n_gen;           // usage
} srv_reply;

// {"error": {...}}; malloc'ed.
char *srv_json_error(const srv_error *e);
// A whole (non-streamed) completion or chat completion.
char *srv_json_completion(const srv_reply *r);
// One stream chunk: the text in r->text (may be empty), r->finish on the last; role 1 adds the chat
// delta's "role": "assistant"; usage 1 makes the usage-only chunk of stream_options.include_usage.
char *srv_json_chunk(const srv_reply *r, int role, int usage);
