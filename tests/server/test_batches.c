/* The Files and Batch APIs end to end (docs/API.md, "Files and batches"):
 * the routes and their errors, line-by-line validation, tenant isolation
 * (another tenant's ids are 404), cancel, expiry, and kill -9 in the
 * middle of a batch (the fault kill@batch_line) with a restart on the same
 * state folder: every custom_id is in the output exactly once and the
 * ledger holds one batch request per line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sqlite3.h>

#include "server/tenants/sha256.h"
#include "tests/server/server_fixture.h"
#include "tests/test_seed.h"

/* Tenants acme/search (key ka) and globex/bi (key kb); batches.* as given;
 * the model's max_batch_size max_batch. */
static char *config_text_n(const char *batches, int max_batch)
{
    char ha[65], hb[65];
    srv_key_sha256("ka", ha), srv_key_sha256("kb", hb);
    char *y = malloc(4096);
    snprintf(y, 4096,
             "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 1GiB }\n"
             "models:\n"
             "  - { name: m, kind: llama, path: m.gguf, memory_fraction: 0.2, batching: { max_batch_size: %d } }\n"
             "tenants:\n"
             "  - organization: acme\n"
             "    projects:\n"
             "      - { name: search, keys: [ { name: a, sha256: \"%s\" } ] }\n"
             "  - organization: globex\n"
             "    projects:\n"
             "      - { name: bi, keys: [ { name: b, sha256: \"%s\" } ] }\n"
             "batches: { %s }\n",
             max_batch, ha, hb, batches);
    return y;
}

static char *config_text(const char *batches) { return config_text_n(batches, 4); }

static int req(srv_fixture *f, const char *method, const char *key, const char *path, const char *extra,
               const char *body, srv_resp *r)
{
    char h[512];
    snprintf(h, sizeof h, "Authorization: Bearer %s\r\n%s", key, extra ? extra : "");
    if (!srv_http_h(f, method, path, h, body, r))
        return 0;
    return r->status;
}

/* The JSON answer of a request, its status in *status. */
static json_t *req_json(srv_fixture *f, const char *method, const char *key, const char *path, const char *body,
                        int *status)
{
    srv_resp r;
    *status = req(f, method, key, path, NULL, body, &r);
    json_t *j = *status ? srv_json(&r) : NULL;
    if (*status)
        srv_resp_free(&r);
    return j;
}

#define BOUNDARY "colo-test-boundary-7"

/* Uploads text as a file of purpose with key: the answer's status, and the id into id. */
static int upload(srv_fixture *f, const char *key, const char *purpose, const char *text, char *id, size_t cap)
{
    size_t n = strlen(text) + 512;
    char *body = malloc(n);
    snprintf(body, n,
             "--" BOUNDARY "\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n%s\r\n"
             "--" BOUNDARY "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
             "Content-Type: application/jsonl\r\n\r\n%s\r\n--" BOUNDARY "--\r\n",
             purpose, text);
    srv_resp r;
    int st = req(f, "POST", key, "/v1/files", "Content-Type: multipart/form-data; boundary=" BOUNDARY "\r\n", body, &r);
    free(body);
    if (st == 200 && id) {
        json_t *j = srv_json(&r);
        snprintf(id, cap, "%s", json_string_value(json_object_get(j, "id")));
        json_decref(j);
    } else if (st != 200) {
        fprintf(stderr, "upload: %d %s\n", st, r.body ? r.body : "");
    }
    if (st)
        srv_resp_free(&r);
    return st;
}

/* n chat lines (custom ids c0..), generating max_tokens each. */
static char *lines(int n, int max_tokens)
{
    char *t = malloc((size_t)n * 256 + 1);
    size_t o = 0;
    t[0] = 0;
    for (int i = 0; i < n; i++)
        o += (size_t)sprintf(t + o,
                             "{\"custom_id\":\"c%d\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":"
                             "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"line %d\"}],"
                             "\"max_tokens\":%d,\"temperature\":0}}\n",
                             i, i, max_tokens);
    return t;
}

/* Creates a batch of file id with key: its id into bid; the status. */
static int create(srv_fixture *f, const char *key, const char *file, char *bid, size_t cap)
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"input_file_id\":\"%s\",\"endpoint\":\"/v1/chat/completions\",\"completion_window\":\"24h\","
             "\"metadata\":{\"job\":\"nightly\"}}",
             file);
    int st;
    json_t *j = req_json(f, "POST", key, "/v1/batches", body, &st);
    if (st == 200 && bid)
        snprintf(bid, cap, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    return st;
}

static bool final_status(const char *s)
{
    return s && (!strcmp(s, "completed") || !strcmp(s, "failed") || !strcmp(s, "cancelled") || !strcmp(s, "expired"));
}

/* Polls the batch until its status is final (60 s at most): its object. */
static json_t *wait_batch(srv_fixture *f, const char *key, const char *bid)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/batches/%s", bid);
    for (int i = 0; i < 6000; i++) {
        int st;
        json_t *j = req_json(f, "GET", key, path, NULL, &st);
        if (st == 200 && final_status(json_string_value(json_object_get(j, "status"))))
            return j;
        json_decref(j);
        srv_sleep_ms(10);
    }
    return NULL;
}

static int64_t count(const json_t *b, const char *which)
{
    return json_integer_value(json_object_get(json_object_get(b, "request_counts"), which));
}

/* A file's content (malloc'd), or NULL. */
static char *content(srv_fixture *f, const char *key, const char *file)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/files/%s/content", file);
    srv_resp r;
    if (req(f, "GET", key, path, NULL, NULL, &r) != 200) {
        srv_resp_free(&r);
        return NULL;
    }
    return r.body; /* the caller frees */
}

/* Checks that the output holds c0..c(n-1) exactly once, each answered 200 with a chat completion. */
static void check_output(const char *out, int n)
{
    int *seen = calloc((size_t)n, sizeof *seen);
    int lines_n = 0;
    for (const char *p = out; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        json_t *j = json_loadb(p, len, 0, NULL);
        assert_non_null(j);
        const char *cid = json_string_value(json_object_get(j, "custom_id"));
        assert_non_null(cid);
        int k = atoi(cid + 1);
        assert_true(k >= 0 && k < n);
        seen[k]++;
        json_t *resp = json_object_get(j, "response");
        assert_int_equal(json_integer_value(json_object_get(resp, "status_code")), 200);
        assert_non_null(json_string_value(json_object_get(resp, "request_id")));
        assert_string_equal(json_string_value(json_object_get(json_object_get(resp, "body"), "object")),
                            "chat.completion");
        assert_true(json_is_null(json_object_get(j, "error")));
        json_decref(j);
        lines_n++;
        p = nl ? nl + 1 : NULL;
    }
    for (int k = 0; k < n; k++)
        assert_int_equal(seen[k], 1);
    assert_int_equal(lines_n, n);
    free(seen);
}

/* The ledger's batch requests and all requests of the fixture's server. */
static void ledger_counts(srv_fixture *f, int64_t *batch, int64_t *lines_done)
{
    char db[400];
    snprintf(db, sizeof db, "%s/colo/usage.sqlite", f->dir);
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(h, "SELECT COALESCE(SUM(batch_requests), 0) FROM usage_hourly;", -1, &s, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    *batch = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    assert_int_equal(sqlite3_prepare_v2(h, "SELECT COUNT(*) FROM batch_lines;", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    *lines_done = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(h);
}

/* ---- the tests ------------------------------------------------------------------------------ */

static void test_files_routes(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 512));
    char *y = config_text("max_file_bytes: 2KiB");
    assert_true(srv_start_logged(&f, y));
    free(y);
    /* random bytes of a random length, every byte value but the boundary's */
    uint64_t seed = colo_test_seed("test_files_routes", 53);
    srand((unsigned)seed);
    int n = 1 + rand() % 1500;
    char *text = malloc((size_t)n + 1);
    for (int i = 0; i < n; i++)
        text[i] = (char)(' ' + rand() % 90);
    text[n] = 0;
    char id[80];
    assert_int_equal(upload(&f, "ka", "batch", text, id, sizeof id), 200);
    assert_true(!strncmp(id, "file-", 5));
    int st;
    char path[128];
    snprintf(path, sizeof path, "/v1/files/%s", id);
    json_t *j = req_json(&f, "GET", "ka", path, NULL, &st);
    assert_int_equal(st, 200);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "file");
    assert_int_equal(json_integer_value(json_object_get(j, "bytes")), n);
    assert_string_equal(json_string_value(json_object_get(j, "filename")), "in.jsonl");
    assert_string_equal(json_string_value(json_object_get(j, "purpose")), "batch");
    assert_true(json_integer_value(json_object_get(j, "created_at")) > 0);
    json_decref(j);
    char *got = content(&f, "ka", id);
    assert_non_null(got);
    assert_string_equal(got, text);
    free(got);
    j = req_json(&f, "GET", "ka", "/v1/files", NULL, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(json_object_get(j, "data")), 1);
    json_decref(j);
    /* another tenant sees none of it */
    j = req_json(&f, "GET", "kb", path, NULL, &st);
    assert_int_equal(st, 404);
    json_decref(j);
    assert_null(content(&f, "kb", id));
    j = req_json(&f, "DELETE", "kb", path, NULL, &st);
    assert_int_equal(st, 404);
    json_decref(j);
    j = req_json(&f, "GET", "kb", "/v1/files", NULL, &st);
    assert_int_equal(json_array_size(json_object_get(j, "data")), 0);
    json_decref(j);
    /* refusals: another purpose, not a form, no file part, too large */
    assert_int_equal(upload(&f, "ka", "fine-tune", "x", NULL, 0), 400);
    srv_resp r;
    assert_int_equal(req(&f, "POST", "ka", "/v1/files", NULL, "{}", &r), 400);
    srv_resp_free(&r);
    assert_int_equal(req(&f, "POST", "ka", "/v1/files", "Content-Type: multipart/form-data; boundary=" BOUNDARY "\r\n",
                         "--" BOUNDARY "\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--" BOUNDARY
                         "--\r\n",
                         &r),
                     400);
    assert_non_null(strstr(r.body, "file"));
    srv_resp_free(&r);
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    assert_int_equal(upload(&f, "ka", "batch", big, NULL, 0), 413);
    /* the owner deletes it: gone */
    j = req_json(&f, "DELETE", "ka", path, NULL, &st);
    assert_int_equal(st, 200);
    assert_true(json_is_true(json_object_get(j, "deleted")));
    json_decref(j);
    j = req_json(&f, "GET", "ka", path, NULL, &st);
    assert_int_equal(st, 404);
    json_decref(j);
    free(text);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static void test_batch_completes(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 512));
    char *y = config_text("concurrency: 3");
    assert_true(srv_start_logged(&f, y));
    free(y);
    int n = 5 + (int)(colo_test_seed("test_batch_completes", 7) % 8);
    char *text = lines(n, 6);
    char fid[80], bid[80];
    assert_int_equal(upload(&f, "ka", "batch", text, fid, sizeof fid), 200);
    free(text);
    assert_int_equal(create(&f, "ka", fid, bid, sizeof bid), 200);
    assert_true(!strncmp(bid, "batch_", 6));
    json_t *b = wait_batch(&f, "ka", bid);
    assert_non_null(b);
    assert_string_equal(json_string_value(json_object_get(b, "status")), "completed");
    assert_int_equal(count(b, "total"), n);
    assert_int_equal(count(b, "completed"), n);
    assert_int_equal(count(b, "failed"), 0);
    assert_true(json_is_null(json_object_get(b, "error_file_id")));
    assert_string_equal(json_string_value(json_object_get(json_object_get(b, "metadata"), "job")), "nightly");
    int64_t created = json_integer_value(json_object_get(b, "created_at"));
    int64_t started = json_integer_value(json_object_get(b, "in_progress_at"));
    int64_t finalizing = json_integer_value(json_object_get(b, "finalizing_at"));
    int64_t completed = json_integer_value(json_object_get(b, "completed_at"));
    assert_true(created > 0 && created <= started && started <= finalizing && finalizing <= completed);
    char *out = content(&f, "ka", json_string_value(json_object_get(b, "output_file_id")));
    assert_non_null(out);
    check_output(out, n);
    free(out);
    /* listed, newest first, paged */
    char bid2[80];
    assert_int_equal(create(&f, "ka", fid, bid2, sizeof bid2), 200);
    int st;
    json_t *l = req_json(&f, "GET", "ka", "/v1/batches?limit=1", NULL, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(json_object_get(l, "data")), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(l, "data"), 0), "id")), bid2);
    assert_true(json_is_true(json_object_get(l, "has_more")));
    json_decref(l);
    char path[160];
    snprintf(path, sizeof path, "/v1/batches?after=%s&limit=5", bid2);
    l = req_json(&f, "GET", "ka", path, NULL, &st);
    assert_int_equal(json_array_size(json_object_get(l, "data")), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(l, "data"), 0), "id")), bid);
    assert_true(json_is_false(json_object_get(l, "has_more")));
    json_decref(l);
    json_decref(wait_batch(&f, "ka", bid2));
    json_decref(b);
    assert_int_equal(srv_stop(&f), 0);
    int64_t batch, done;
    ledger_counts(&f, &batch, &done);
    assert_int_equal(batch, 2 * n);
    assert_int_equal(done, 2 * n);
    srv_cleanup(&f);
}

/* The model's one place in its batch holds a long line of a batch: an
 * interactive request that arrives takes the place at once (the line is
 * preempted, kept and recomputed), so it is answered while the line still
 * runs, and the line is then answered whole. Before the batch class was a
 * class of the planner, the request waited for the line's end. */
static void test_interactive_goes_ahead_of_a_line(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 6, 384, 512, 1024));
    char *y = config_text_n("concurrency: 1", 1);
    assert_true(srv_start_logged(&f, y));
    free(y);
    enum { LONG = 900 };
    /* the synthetic vocabulary's last three tokens end a turn: banned, so
     * that the line runs its whole length */
    int eos = colo_mkmodel_min_vocab() - 3;
    char text[512];
    snprintf(text, sizeof text,
             "{\"custom_id\":\"c0\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":"
             "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"line 0\"}],"
             "\"max_tokens\":%d,\"temperature\":0,\"logit_bias\":{\"%d\":-100,\"%d\":-100,\"%d\":-100}}}\n",
             LONG, eos, eos + 1, eos + 2);
    char fid[80], bid[80], path[128];
    assert_int_equal(upload(&f, "ka", "batch", text, fid, sizeof fid), 200);
    assert_int_equal(create(&f, "ka", fid, bid, sizeof bid), 200);
    int st, running = 0;
    for (int i = 0; i < 3000 && !running; i++) { /* the line has the place */
        json_t *m = req_json(&f, "GET", "ka", "/v1/models/m", NULL, &st);
        running = st == 200 ? (int)json_integer_value(json_object_get(m, "running")) : 0;
        json_decref(m);
        if (!running)
            srv_sleep_ms(10);
    }
    assert_int_equal(running, 1);
    json_t *a = req_json(&f, "POST", "kb", "/v1/chat/completions",
                         "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"now\"}],"
                         "\"max_tokens\":4,\"temperature\":0}",
                         &st);
    assert_int_equal(st, 200);
    json_decref(a);
    snprintf(path, sizeof path, "/v1/batches/%s", bid);
    json_t *b = req_json(&f, "GET", "ka", path, NULL, &st);
    assert_int_equal(st, 200);
    assert_int_equal(count(b, "completed"), 0); /* the line is still running */
    json_decref(b);
    b = wait_batch(&f, "ka", bid);
    assert_non_null(b);
    assert_string_equal(json_string_value(json_object_get(b, "status")), "completed");
    char *out = content(&f, "ka", json_string_value(json_object_get(b, "output_file_id")));
    assert_non_null(out);
    check_output(out, 1);
    json_t *line = json_loads(out, 0, NULL);
    assert_non_null(line);
    json_t *body = json_object_get(json_object_get(line, "response"), "body");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(body, "usage"), "completion_tokens")), LONG);
    json_decref(line);
    free(out);
    json_decref(b);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

/* colo-loadtest's batch scenario against this server: every round's three
 * phases ran, the batch made lines alone, the figures are in its JSON, and
 * the round's batch was cancelled (or done) before it ended. */
static void test_loadtest_batch_scenario(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 512));
    /* no tenants: /metrics, which the batch scenario reads, is open */
    assert_true(srv_start_logged(&f, "server: { listen: \"127.0.0.1:0\", device: cpu, threads: 2, cpu_memory_bytes: 1GiB }\n"
                                     "models:\n"
                                     "  - { name: m, kind: llama, path: m.gguf, memory_fraction: 0.2 }\n"
                                     "batches: { concurrency: 4 }\n"));
    const char *bin = getenv("COLO_BINARY_DIR") ? getenv("COLO_BINARY_DIR") : COLO_BINARY_DIR;
    char cmd[2048], json_path[400];
    snprintf(json_path, sizeof json_path, "%s/batch.json", f.dir);
    snprintf(cmd, sizeof cmd,
             "timeout 120 %s/colo-loadtest --url http://127.0.0.1:%d --scenario batch --model m "
             "--path /v1/chat/completions --stream --max-tokens 4 --rate 4 --duration 1 --rounds 2 "
             "--batch-lines 3000 --batch-max-tokens 8 --json %s --quiet > %s/lt.out 2>&1",
             bin, f.port, json_path, f.dir);
    int rc = system(cmd);
    if (rc != 0) {
        snprintf(cmd, sizeof cmd, "cat %s/lt.out >&2", f.dir);
        assert_int_equal(system(cmd), 0);
    }
    assert_int_equal(rc, 0);
    json_t *j = json_load_file(json_path, 0, NULL);
    assert_non_null(j);
    json_t *rounds = json_object_get(j, "rounds");
    assert_int_equal(json_array_size(rounds), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *r = json_array_get(rounds, i);
        assert_true(json_real_value(json_object_get(r, "rps")) > 0);
        assert_true(json_real_value(json_object_get(r, "rps_with_batch")) > 0);
        assert_true(json_real_value(json_object_get(r, "ttft_p99_ms_with_batch")) > 0);
        assert_true(json_real_value(json_object_get(r, "batch_lines_per_s_alone")) > 0);
        double busy = json_real_value(json_object_get(r, "busy_pct"));
        assert_true(busy > 0 && busy <= 100.5);
    }
    assert_true(json_is_object(json_object_get(j, "median")));
    json_t *pooled = json_object_get(j, "pooled"); /* every round's requests together */
    assert_true(json_real_value(json_object_get(pooled, "ttft_p99_ms_with_batch")) > 0);
    assert_true(json_real_value(json_object_get(pooled, "ttft_p99_ms")) >=
                json_real_value(json_object_get(pooled, "ttft_p50_ms")));
    json_decref(j);
    int st; /* both rounds' batches ended */
    json_t *l = req_json(&f, "GET", "none", "/v1/batches", NULL, &st);
    assert_int_equal(st, 200);
    json_t *data = json_object_get(l, "data");
    assert_int_equal(json_array_size(data), 2);
    for (size_t i = 0; i < 2; i++)
        assert_true(final_status(json_string_value(json_object_get(json_array_get(data, i), "status"))));
    json_decref(l);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static void test_create_errors_and_isolation(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 512));
    char *y = config_text("concurrency: 2");
    assert_true(srv_start_logged(&f, y));
    free(y);
    char *text = lines(3, 4);
    char fid[80], bid[80];
    assert_int_equal(upload(&f, "ka", "batch", text, fid, sizeof fid), 200);
    free(text);
    static const char *bad[] = {
        "{\"endpoint\":\"/v1/chat/completions\",\"completion_window\":\"24h\"}",
        "{\"input_file_id\":\"%s\",\"endpoint\":\"/v1/images\",\"completion_window\":\"24h\"}",
        "{\"input_file_id\":\"%s\",\"endpoint\":\"/v1/chat/completions\",\"completion_window\":\"1h\"}",
        "{\"input_file_id\":\"%s\",\"endpoint\":\"/v1/chat/completions\",\"completion_window\":\"24h\",\"metadata\":7}",
        "[1]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char body[256];
        snprintf(body, sizeof body, bad[i], fid);
        int st;
        json_t *j = req_json(&f, "POST", "ka", "/v1/batches", body, &st);
        assert_int_equal(st, 400);
        assert_non_null(json_object_get(j, "error"));
        json_decref(j);
    }
    /* another tenant's file is not found; its batch neither */
    assert_int_equal(create(&f, "kb", fid, NULL, 0), 404);
    assert_int_equal(create(&f, "ka", "file-nothing", NULL, 0), 404);
    assert_int_equal(create(&f, "ka", fid, bid, sizeof bid), 200);
    char path[160];
    int st;
    snprintf(path, sizeof path, "/v1/batches/%s", bid);
    json_t *j = req_json(&f, "GET", "kb", path, NULL, &st);
    assert_int_equal(st, 404);
    json_decref(j);
    snprintf(path, sizeof path, "/v1/batches/%s/cancel", bid);
    j = req_json(&f, "POST", "kb", path, "", &st);
    assert_int_equal(st, 404);
    json_decref(j);
    j = req_json(&f, "GET", "kb", "/v1/batches", NULL, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(json_object_get(j, "data")), 0);
    json_decref(j);
    json_t *b = wait_batch(&f, "ka", bid);
    assert_string_equal(json_string_value(json_object_get(b, "status")), "completed");
    /* its output is the owner's */
    assert_null(content(&f, "kb", json_string_value(json_object_get(b, "output_file_id"))));
    /* a finished batch cannot be cancelled */
    j = req_json(&f, "POST", "ka", path, "", &st);
    assert_int_equal(st, 409);
    json_decref(j);
    json_decref(b);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

static void test_validation_names_lines(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 512));
    char *y = config_text("concurrency: 2");
    assert_true(srv_start_logged(&f, y));
    free(y);
    const char *text =
        "{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"m\"}}\n"
        "not json\n"
        "{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"m\"}}\n"
        "\n"
        "{\"custom_id\":\"b\",\"method\":\"POST\",\"url\":\"/v1/embeddings\",\"body\":{\"model\":\"m\"}}\n"
        "{\"custom_id\":\"c\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"nope\"}}\n"
        "{\"custom_id\":\"d\",\"method\":\"GET\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"m\"}}\n";
    char fid[80], bid[80];
    assert_int_equal(upload(&f, "ka", "batch", text, fid, sizeof fid), 200);
    assert_int_equal(create(&f, "ka", fid, bid, sizeof bid), 200);
    json_t *b = wait_batch(&f, "ka", bid);
    assert_non_null(b);
    assert_string_equal(json_string_value(json_object_get(b, "status")), "failed");
    assert_true(json_integer_value(json_object_get(b, "failed_at")) > 0);
    json_t *data = json_object_get(json_object_get(b, "errors"), "data");
    /* lines of the file: the blank line 4 is skipped, and counted */
    static const struct {
        int line;
        const char *code;
    } want[] = {{2, "invalid_json_line"},
                {3, "duplicate_custom_id"},
                {5, "mismatched_endpoint"},
                {6, "model_not_found"},
                {7, "invalid_method"}};
    assert_int_equal(json_array_size(data), sizeof want / sizeof *want);
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        json_t *e = json_array_get(data, i);
        assert_int_equal(json_integer_value(json_object_get(e, "line")), want[i].line);
        assert_string_equal(json_string_value(json_object_get(e, "code")), want[i].code);
        assert_non_null(json_string_value(json_object_get(e, "message")));
    }
    json_decref(b);
    assert_int_equal(srv_stop(&f), 0);
    int64_t batch, done;
    ledger_counts(&f, &batch, &done);
    assert_int_equal(batch, 0); /* nothing ran */
    srv_cleanup(&f);
}

static void test_cancel(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 512));
    char *y = config_text("concurrency: 1");
    assert_true(srv_start_logged(&f, y));
    free(y);
    int n = 200;
    char *text = lines(n, 48);
    char fid[80], bid[80];
    assert_int_equal(upload(&f, "ka", "batch", text, fid, sizeof fid), 200);
    free(text);
    assert_int_equal(create(&f, "ka", fid, bid, sizeof bid), 200);
    char path[160];
    snprintf(path, sizeof path, "/v1/batches/%s/cancel", bid);
    int st;
    json_t *j = req_json(&f, "POST", "ka", path, "", &st);
    assert_int_equal(st, 200);
    const char *s = json_string_value(json_object_get(j, "status"));
    assert_true(!strcmp(s, "cancelling") || !strcmp(s, "cancelled"));
    assert_true(json_integer_value(json_object_get(j, "cancelling_at")) > 0);
    json_decref(j);
    json_t *b = wait_batch(&f, "ka", bid);
    assert_non_null(b);
    assert_string_equal(json_string_value(json_object_get(b, "status")), "cancelled");
    assert_true(json_integer_value(json_object_get(b, "cancelled_at")) > 0);
    int64_t completed = count(b, "completed");
    assert_true(completed < n);
    const char *out_id = json_string_value(json_object_get(b, "output_file_id"));
    if (completed) {
        char *out = content(&f, "ka", out_id);
        assert_non_null(out);
        int k = 0;
        for (const char *p = out; (p = strchr(p, '\n')); p++)
            k++;
        assert_int_equal(k, completed);
        free(out);
    } else {
        assert_null(out_id);
    }
    json_decref(b);
    assert_int_equal(srv_stop(&f), 0);
    int64_t batch, done;
    ledger_counts(&f, &batch, &done);
    assert_int_equal(batch, completed);
    srv_cleanup(&f);
}

/* Starts the server with env's faults and waits until one of them kills
 * it (perhaps before it was seen ready: it resumes a batch at once). */
static void run_until_killed(srv_fixture *f, const char *yaml, const char *env)
{
    if (!srv_start_env(f, yaml, env)) {
        assert_int_equal(f->pid, 0);
        assert_int_equal(f->exit_code, -1); /* a signal */
        return;
    }
    int st = 0;
    assert_int_equal(waitpid(f->pid, &st, 0), f->pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    f->pid = 0;
}

/* Waits for the server, killed by its fault, to be gone. */
static void wait_killed(srv_fixture *f)
{
    int st = 0;
    assert_int_equal(waitpid(f->pid, &st, 0), f->pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    f->pid = 0;
}

static void test_kill9_resumes_each_line_once(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 512));
    char *y = config_text("concurrency: 4");
    int n = 14;
    char *text = lines(n, 8);
    char fid[80], bid[80];
    /* three kills, each right after a line's result is committed (the
     * lines then in flight are lost and run again) */
    assert_true(srv_start_env(&f, y, "COLO_FAULTS=kill@batch_line:skip=2"));
    assert_int_equal(upload(&f, "ka", "batch", text, fid, sizeof fid), 200);
    free(text);
    assert_int_equal(create(&f, "ka", fid, bid, sizeof bid), 200);
    wait_killed(&f);
    for (int k = 0; k < 2; k++)
        run_until_killed(&f, y, "COLO_FAULTS=kill@batch_line:skip=2");
    int64_t batch, done;
    ledger_counts(&f, &batch, &done);
    assert_int_equal(done, 9);
    assert_int_equal(batch, 9);
    assert_true(srv_start_logged(&f, y));
    json_t *b = wait_batch(&f, "ka", bid);
    assert_non_null(b);
    assert_string_equal(json_string_value(json_object_get(b, "status")), "completed");
    assert_int_equal(count(b, "completed"), n);
    char *out = content(&f, "ka", json_string_value(json_object_get(b, "output_file_id")));
    assert_non_null(out);
    check_output(out, n);
    free(out);
    json_decref(b);
    assert_int_equal(srv_stop(&f), 0);
    ledger_counts(&f, &batch, &done);
    assert_int_equal(done, n);
    assert_int_equal(batch, n); /* every line billed once */
    free(y);
    srv_cleanup(&f);
}

/* SIGTERM in the middle of a batch: a clean exit, and the lines it cut
 * short run on the next start (each custom_id once, each line billed once). */
static void test_sigterm_resumes(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 512));
    char *y = config_text("concurrency: 4");
    int n = 200;
    char *text = lines(n, 48);
    char fid[80], bid[80];
    assert_true(srv_start_logged(&f, y));
    assert_int_equal(upload(&f, "ka", "batch", text, fid, sizeof fid), 200);
    free(text);
    assert_int_equal(create(&f, "ka", fid, bid, sizeof bid), 200);
    srv_sleep_ms(20);
    assert_int_equal(srv_stop(&f), 0);
    int64_t batch, done;
    ledger_counts(&f, &batch, &done);
    assert_int_equal(batch, done);
    printf("stopped with %lld of %d lines done\n", (long long)done, n);
    assert_true(srv_start_logged(&f, y));
    json_t *b = wait_batch(&f, "ka", bid);
    assert_non_null(b);
    assert_string_equal(json_string_value(json_object_get(b, "status")), "completed");
    char *out = content(&f, "ka", json_string_value(json_object_get(b, "output_file_id")));
    assert_non_null(out);
    check_output(out, n);
    free(out);
    json_decref(b);
    assert_int_equal(srv_stop(&f), 0);
    ledger_counts(&f, &batch, &done);
    assert_int_equal(done, n);
    assert_int_equal(batch, n);
    free(y);
    srv_cleanup(&f);
}

static void test_expiry(void **state)
{
    (void)state;
    srv_fixture f;
    assert_true(srv_tmpdir(&f) && srv_mkmodel(&f, "m.gguf", 2, 64, 512, 512));
    /* killed after its first line; it comes back with a window of 1 s
     * (the config's window applies from then on), more than 1 s after it
     * was created */
    char *y = config_text("concurrency: 1");
    int n = 6;
    char *text = lines(n, 4);
    char fid[80], bid[80];
    assert_true(srv_start_env(&f, y, "COLO_FAULTS=kill@batch_line"));
    assert_int_equal(upload(&f, "ka", "batch", text, fid, sizeof fid), 200);
    free(text);
    assert_int_equal(create(&f, "ka", fid, bid, sizeof bid), 200);
    wait_killed(&f);
    free(y);
    y = config_text("concurrency: 1, window_s: 1");
    srv_sleep_ms(1100);
    assert_true(srv_start_logged(&f, y));
    json_t *b = wait_batch(&f, "ka", bid);
    assert_non_null(b);
    assert_string_equal(json_string_value(json_object_get(b, "status")), "expired");
    assert_true(json_integer_value(json_object_get(b, "expired_at")) > 0);
    assert_int_equal(count(b, "completed"), 1);
    assert_int_equal(count(b, "failed"), n - 1);
    char *err = content(&f, "ka", json_string_value(json_object_get(b, "error_file_id")));
    assert_non_null(err);
    int k = 0;
    for (const char *p = err; (p = strstr(p, "batch_expired")); p++)
        k++;
    assert_int_equal(k, n - 1);
    free(err);
    json_decref(b);
    free(y);
    assert_int_equal(srv_stop(&f), 0);
    srv_cleanup(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_files_routes),
        cmocka_unit_test(test_batch_completes),
        cmocka_unit_test(test_interactive_goes_ahead_of_a_line),
        cmocka_unit_test(test_loadtest_batch_scenario),
        cmocka_unit_test(test_create_errors_and_isolation),
        cmocka_unit_test(test_validation_names_lines),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_kill9_resumes_each_line_once),
        cmocka_unit_test(test_sigterm_resumes),
        cmocka_unit_test(test_expiry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
