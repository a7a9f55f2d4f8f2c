/* server/api/api.h: the model endpoints of colo-server (docs/API.md).
 *
 *   POST /v1/models/{name}/infer   generation (prompt | messages) or embeddings (inputs)
 *   GET  /v1/models                OpenAI's list shape with colo's fields
 *   GET  /v1/models/{name}         one model: kind, state, memory, batching, queue
 *   POST /v1/completions           OpenAI-compatible (SSE with "stream": true)
 *   POST /v1/chat/completions      OpenAI-compatible (SSE with "stream": true)
 *   POST /v1/embeddings            OpenAI-compatible (float or base64)
 *   POST /v1/responses             OpenAI's Responses API (named SSE events with "stream": true)
 *   POST /v1/messages              Anthropic's Messages API (and /v1/messages/count_tokens)
 *
 * Requests are decoded on the loop thread (server/api/api_request.h), queued on
 * the model (batching/served.h) and answered from its executor through
 * colo_http_server_call, so every response is written by the loop thread.
 * A client that goes away cancels its request (queued or running).
 *
 * Statuses: 400 bad body or field, 404 unknown model, 429 (Retry-After) the
 * model's queue is full, 503 the model is not ready or failed, its queue
 * deadline passed, or its memory could not hold the request.
 *
 * Per-model metrics (labels model, and priority for queue time):
 * colo_model_requests_total{model,status}, request / queue / prefill /
 * decode / time-to-first-token / inter-token histograms in seconds, prompt
 * and generated tokens, batch size and step time histograms, queue depth,
 * running, memory limit / used / peak bytes, KV blocks, readiness, and the
 * co-scheduler's wait time and steps by policy.
 *
 * Threads: create and free on the controlling thread before and after the
 * loop runs; the hooks from any executor thread. */
#ifndef COLO_SERVER_API_H
#define COLO_SERVER_API_H

#include <jansson.h>
#include <stdbool.h>

#include "batching/served.h"
#include "server/core/registry.h"
#include "server/core/server.h"

typedef struct colo_api colo_api;

/* Registers the routes and metric families on srv, serving the models of
 * reg (server/core/registry.h), which outlives the api. */
colo_api *colo_api_create(colo_server *srv, colo_registry *reg, const colo_config *cfg, char *err, size_t errlen);
/* A model as GET /v1/models lists it: kind, state, memory, batching, queue,
 * lifecycle and SLO attainment (loop thread). */
json_t *colo_api_model_json(const colo_api *a, const colo_registry_model *e);
/* A LoRA adapter of base, as /v1/models lists it ("kind": "lora", "base"). */
json_t *colo_api_adapter_json(const colo_api *a, const colo_registry_model *base, const colo_served_adapter_info *ad);
/* Where the Responses API keeps what `store: true` asks it to keep and
 * finds what previous_response_id names (server/responses.h). Loop thread. */
typedef struct colo_api_response_store {
    /* Before body (a /v1/responses body) is read: its previous_response_id's
     * conversation put before its input. *own and *context (malloc'd JSON
     * arrays) are its own input items and everything the model is given.
     * False after answering req (404: no such response of the caller's). */
    bool (*expand)(void *ud, colo_http_req *req, json_t *body, char **own, char **context);
    /* A response that succeeded with store: its object, its own input items
     * and its context (as expand gave them). */
    void (*keep)(void *ud, colo_http_req *req, const json_t *response, const char *own, const char *context);
    void *ud;
    bool store_default; /* what a body without "store" asks (OpenAI's default: true) */
} colo_api_response_store;
/* Before the loop runs; without one, store and previous_response_id are refused. */
void colo_api_set_response_store(colo_api *a, const colo_api_response_store *rs);
/* The families of the lines of batches by model (server/batches.h:
 * queued and running gauges, completed counter by model and outcome), for
 * /v1/stats and the dashboard. Before colo_api_watch. */
void colo_api_set_batch_metrics(colo_api *a, colo_metric *queued, colo_metric *running, colo_metric *completed);
/* Hooks for colo_served_env: step metrics. */
colo_served_hooks colo_api_hooks(colo_api *a);
/* Watches dev (runtime/telemetry.h, sampled every interval_ms off the
 * loop), exports the colo_device_* metric families, keeps a short history
 * of every added model's counters (a timer on the loop thread, one point
 * per interval) and serves GET /v1/stats and GET /dashboard
 * (docs/OBSERVABILITY.md). Call after the models are added, before the
 * loop runs; dev must outlive colo_api_unwatch. */
colo_status colo_api_watch(colo_api *a, colo_device *dev, int interval_ms, char *err, size_t errlen);
/* Stops the sampler and the timer (before the loop's base is freed);
 * /v1/stats then answers from the history it has. Accepts NULL. */
void colo_api_unwatch(colo_api *a);
void colo_api_free(colo_api *a);

#endif
