/* loadtest/http_client.h: the HTTP side of the load generator.
 *
 * An lt_http_response reads one HTTP/1.1 response at a time off a
 * keep-alive connection (llhttp): status, whether the connection may be
 * reused, a 2xx body (to read the token count), and for Server-Sent Events
 * the arrival time of every data event (time to first token, inter-token
 * gaps). lt_http_connect starts a non-blocking connection. Nothing here
 * knows about loads, schedules or results (loadtest/engine.c).
 *
 * Not thread-safe: one thread per response. */
#ifndef COLO_LOADTEST_HTTP_CLIENT_H
#define COLO_LOADTEST_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/bufferevent.h>
#include <llhttp.h>

#include "loadtest/stats.h"
#include "loadtest/status.h"
#include "loadtest/workload.h"

/* Bytes of a 2xx body kept to read its usage; the rest is not stored. */
#define LT_BODY_KEEP_MAX (4u << 20)

typedef struct lt_http_response {
    /* what was read (valid until the next lt_http_response_reset) */
    int status;          /* 0 until the headers are complete */
    bool sse;            /* Content-Type text/event-stream */
    bool complete;       /* the whole message was parsed */
    bool keep_alive;     /* the connection may carry the next request (once complete) */
    char *body;          /* 2xx non-SSE body, NUL-terminated; NULL or stale when body_len is 0 */
    size_t body_len;
    bool has_ttft;       /* a data event arrived */
    double ttft_ms;      /* start_ns -> first token event */
    lt_samples itl_ms;   /* gaps between consecutive token events */
    uint64_t events;     /* token events: data events with generated text (see http_client.c) */
    bool has_tokens;     /* an event carried usage.completion_tokens */
    uint64_t tokens;     /* the last such count */
    bool has_prompt_tokens; /* an event carried usage.prompt_tokens */
    uint64_t prompt_tokens;
    bool out_of_memory;  /* a gap could not be kept (the response itself was read) */

    /* parser state */
    llhttp_t parser;
    uint64_t start_ns, last_event_ns;
    char hdr_name[32];
    size_t hdr_name_len;
    char ctype[64];
    size_t ctype_len;
    size_t body_cap;
    char event[32];      /* SSE: the event's name (event: line), "" when none */
    size_t event_len;
    char *line;          /* SSE: the line being read */
    size_t line_len, line_cap;
    char *data;          /* SSE: the event's data lines */
    size_t data_len, data_cap;
    bool has_data;
} lt_http_response;

/* Once per connection, before the first reset. */
void lt_http_response_init(lt_http_response *r);
/* Before each request: forgets the last response (keeping its buffers).
 * start_ns (lt_now_ns) is what time to first token counts from. */
void lt_http_response_reset(lt_http_response *r, uint64_t start_ns);
/* Parses len more bytes of the response. LT_OK (check r->complete), or
 * LT_EFORMAT for a malformed response or one that could not be stored. */
lt_status lt_http_response_feed(lt_http_response *r, const char *buf, size_t len);
/* The peer closed the connection: ends a response delimited by the close.
 * LT_OK when that makes it complete. */
lt_status lt_http_response_finish(lt_http_response *r);
/* Output tokens of a complete 2xx response: usage.completion_tokens of the
 * body, else the last count an SSE event carried, else the number of data
 * events. False when none of these is known. */
bool lt_http_response_tokens(const lt_http_response *r, uint64_t *tokens);
/* Prompt tokens of a complete 2xx response (usage.prompt_tokens of the body
 * or of an SSE event). False when not known. */
bool lt_http_response_prompt_tokens(const lt_http_response *r, uint64_t *tokens);
/* Frees the buffers. Accepts NULL. */
void lt_http_response_fini(lt_http_response *r);

/* Starts connecting bev (a socket bufferevent without fd) to t and sets
 * TCP_NODELAY. LT_EIO when the connect failed at once; otherwise the
 * outcome comes as a bufferevent event. */
lt_status lt_http_connect(struct bufferevent *bev, const lt_target *t);

#endif
