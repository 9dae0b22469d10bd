// OpenAI-shaped JSON bodies, built with cJSON (which escapes the text).
#include <stdlib.h>
#include <cjson/cJSON.h>
#include "server/response.h"

static char *print_delete(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

// cJSON strings are NUL-terminated; the generated text never holds a NUL (the detokenizer's output of
// normal tokens could in principle: such bytes are dropped rather than cutting the text short).
static cJSON *text_item(const char *t, size_t n) {
    char *c = malloc(n + 1);
    if (!c) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) if (t[i]) c[k++] = t[i];
    c[k] = 0;
    cJSON *s = cJSON_CreateString(c);
    free(c);
    return s;
}

char *srv_json_error(const srv_error *e) {
    cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_AddStringToObject(err, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0]) cJSON_AddStringToObject(err, "param", e->param); else cJSON_AddNullToObject(err, "param");
    cJSON_AddNullToObject(err, "code");
    return print_delete(o);
}

static cJSON *head(const srv_reply *r, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", r->model);
    return o;
}

static void add_usage(cJSON *o, const srv_reply *r) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", r->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt + r->n_gen);
}

static void add_finish(cJSON *c, const char *finish) {
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish); else cJSON_AddNullToObject(c, "finish_reason");
}

char *srv_json_completion(const srv_reply *r) {
    cJSON *o = head(r, r->chat ? "chat.completion" : "text_completion");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (r->chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddItemToObject(m, "content", text_item(r->text, r->len));
    } else {
        cJSON_AddItemToObject(c, "text", text_item(r->text, r->len));
        cJSON_AddNullToObject(c, "logprobs");
    }
    add_finish(c, r->finish);
    add_usage(o, r);
    return print_delete(o);
}

char *srv_json_chunk(const srv_reply *r, int role, int usage) {
    cJSON *o = head(r, r->chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    if (usage) { add_usage(o, r); return print_delete(o); }   // the usage chunk has no choices
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (r->chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (r->len || !r->finish) cJSON_AddItemToObject(d, "content", text_item(r->text, r->len));
    } else {
        cJSON_AddItemToObject(c, "text", text_item(r->text, r->len));
        cJSON_AddNullToObject(c, "logprobs");
    }
    add_finish(c, r->finish);
    return print_delete(o);
}
