// libFuzzer harness for the server's request parser (server/request.c) and the JSON it answers with
// (server/response.c). The first byte picks /v1/completions or /v1/chat/completions; the rest is the
// body. Accepted requests must satisfy every documented bound; refused ones must carry a 4xx status, a
// type and a message; every answer the server would build must be valid JSON that gives back the text.
#include <string.h>
#include "fuzz_util.h"
#include "server/request.h"
#include "server/response.h"
#include <cjson/cJSON.h>

static void check_json_text(char *json, const char *want, int chat) {
    if (!json) abort();
    cJSON *j = cJSON_Parse(json);
    if (!j) abort();
    if (want) {
        cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        cJSON *t = chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content") : cJSON_GetObjectItem(c, "text");
        if (!cJSON_IsString(t) || strcmp(t->valuestring, want)) abort();
    }
    cJSON_Delete(j);
    free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int chat = data[0] & 1;     // the seeds use "0" and "1"
    srv_limits lim = { .max_body = 1 << 16, .max_tokens = 512, .model_name = "m" };
    srv_params p;
    srv_error e;
    memset(&e, 0, sizeof e);
    if (srv_parse_request((const char *)data + 1, size - 1, chat, &lim, &p, &e)) {
        if (e.status < 400 || e.status > 499 || !e.type || !e.message[0]) abort();
        check_json_text(srv_json_error(&e), NULL, 0);
        return 0;
    }
    if (p.max_tokens != -1 && (p.max_tokens < 1 || p.max_tokens > lim.max_tokens)) abort();
    if (!(p.temperature >= 0 && p.temperature <= 2) || !(p.top_p > 0 && p.top_p <= 1) || p.top_k < 0) abort();
    if (p.n_stop > SRV_MAX_STOP) abort();
    for (int i = 0; i < p.n_stop; i++) if (!p.stop[i][0] || strlen(p.stop[i]) > SRV_MAX_STOP_LEN || !srv_utf8_valid(p.stop[i], strlen(p.stop[i]))) abort();
    if (p.include_usage && !p.stream) abort();
    const char *text = NULL;
    if (chat) {
        if (p.n_messages < 1 || p.prompt || p.prompt_ids) abort();
        for (int i = 0; i < p.n_messages; i++) {
            if (!p.messages[i].role || !p.messages[i].content) abort();
            if (!srv_utf8_valid(p.messages[i].content, strlen(p.messages[i].content))) abort();
        }
        text = p.messages[0].content;
    } else {
        if (!!p.prompt == !!p.prompt_ids) abort();   // exactly one of text or ids
        if (p.prompt && (!p.prompt[0] || !srv_utf8_valid(p.prompt, strlen(p.prompt)))) abort();
        for (int i = 0; i < p.n_prompt_ids; i++) if (p.prompt_ids[i] < 0) abort();
        text = p.prompt ? p.prompt : "";
    }
    // The answers built from accepted text (as if the model had echoed it) are valid JSON holding it.
    srv_reply r = { "id-1", "m", 1, chat, text, strlen(text), "stop", 3, 4 };
    check_json_text(srv_json_completion(&r), text, chat);
    check_json_text(srv_json_chunk(&r, 1, 0), NULL, chat);
    check_json_text(srv_json_chunk(&r, 0, 1), NULL, chat);
    srv_params_free(&p);
    return 0;
}
