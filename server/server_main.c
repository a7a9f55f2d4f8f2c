/* colo-server: loads the YAML config and serves HTTP until SIGTERM/SIGINT.
 * Exit codes: 0 ok, 1 runtime failure (cannot bind...), 2 usage or config error. */
#include <event2/event.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "kernels/ops.h"
#include "runtime/fault.h"
#include "runtime/log.h"
#include "runtime/procmem.h"
#include "batching/evictor.h"
#include "server/admin.h"
#include "server/api/api.h"
#include "server/batches.h"
#include "server/core/registry.h"
#include "server/core/server.h"
#include "server/api/api_request.h"
#include "server/tenants/sha256.h"

/* --hash-key: the SHA-256 of a key (argument, or stdin's first line). */
static int hash_key(const char *arg)
{
    char line[4096];
    const char *key = arg;
    if (!key) {
        if (!fgets(line, sizeof line, stdin)) {
            fprintf(stderr, "colo-server: --hash-key: no key on standard input\n");
            return 2;
        }
        line[strcspn(line, "\r\n")] = 0;
        key = line;
    }
    if (!key[0] || strlen(key) > 512 || strpbrk(key, " ,\t")) {
        fprintf(stderr, "colo-server: --hash-key: a key is 1 to 512 bytes without spaces or commas\n");
        return 2;
    }
    uint8_t d[32];
    char hex[65];
    colo_sha256(key, strlen(key), d);
    colo_sha256_hex(d, hex);
    printf("%s\n", hex);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: colo-server --config FILE [--check-config] [--port-file FILE]\n"
               "       colo-server --hash-key [KEY]   print KEY's SHA-256 for tenants' keys (KEY from stdin when omitted)\n"
               "  --config FILE    the YAML configuration (docs/CONFIG.md)\n"
               "  --port-file FILE write the bound port there once serving (with listen port 0)\n"
               "  --check-config   only read and check the configuration, then exit\n"
               "  --help           this text\n"
               "exit codes: 0 ok, 1 runtime failure, 2 usage or configuration error\n");
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    colo_server *s = arg;
    COLO_INFO("colo-server: %s: shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    if (sig == SIGTERM)
        colo_server_drain(s); /* not ready first, for load balancers (server.drain_delay_ms) */
    else
        colo_server_shutdown(s);
}

typedef struct options {
    const char *config;
    const char *port_file;
    bool check_only;
} options;

/* Fills o from argv. -1 to go on, else the exit code (after --help, or 2
 * with a message for a bad command line). */
static int parse_args(int argc, char **argv, options *o)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            o->config = argv[++i];
        } else if (!strcmp(argv[i], "--port-file") && i + 1 < argc) {
            o->port_file = argv[++i];
        } else if (!strcmp(argv[i], "--hash-key")) {
            return hash_key(i + 1 < argc ? argv[i + 1] : NULL);
        } else if (!strcmp(argv[i], "--check-config")) {
            o->check_only = true;
        } else {
            fprintf(stderr, "colo-server: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!o->config) {
        fprintf(stderr, "colo-server: --config FILE is required\n");
        usage(stderr);
        return 2;
    }
    return -1;
}

static const char *device_want(const colo_config *cfg)
{
    return cfg->server.device == COLO_DEVICE_CPU ? "cpu" : cfg->server.device == COLO_DEVICE_CUDA ? "cuda" : "auto";
}

/* Every draft model against its target's file (speculative.draft: the
 * config has checked the names): the errors on stderr, and how many. */
static int check_drafts(const char *config, const colo_config *cfg)
{
    int bad = 0;
    for (int i = 0; i < cfg->n_models; i++) {
        const colo_model_cfg *mc = &cfg->models[i];
        for (int j = 0; j < cfg->n_models && mc->speculative.draft[0]; j++) {
            char err[1024];
            if (!colo_model_cfg_named(&cfg->models[j], mc->speculative.draft) ||
                colo_served_draft_check(mc, &cfg->models[j], err, sizeof err) == COLO_OK)
                continue;
            fprintf(stderr, "%s:%d:%d: models[%d].speculative.draft: %s\n", config, mc->speculative.mark.line,
                    mc->speculative.mark.column, i, err);
            bad++;
        }
    }
    return bad;
}

/* --check-config: also what loading would check first, every model's file
 * and its memory need against the device's budget. Returns the exit code. */
static int check_config(const char *config, const colo_config *cfg)
{
    char err[1024];
    colo_device_config dc0 = {.want = device_want(cfg),
                              .cpu_memory_bytes = (size_t)cfg->server.cpu_memory_bytes,
                              .gpu_memory_bytes = (size_t)cfg->server.gpu_memory_bytes,
                             .cuda_graphs = cfg->server.cuda_graphs};
    colo_device *dev0 = colo_device_open(&dc0, err, sizeof err);
    if (!dev0) {
        fprintf(stderr, "colo-server: %s\n", err);
        return 1;
    }
    size_t budget = colo_arena_device_budget(dev0);
    int bad = 0;
    for (int i = 0; i < cfg->n_models; i++) {
        const colo_model_cfg *mc = &cfg->models[i];
        char plan[512];
        colo_status st = colo_served_plan(mc, budget, plan, sizeof plan, err, sizeof err);
        if (st == COLO_OK)
            printf("%s: model %s (%s): %s\n", config, mc->name, mc->path, plan);
        if (st != COLO_OK) {
            fprintf(stderr, "%s:%d:%d: models[%d].%s: model %s (%s): %s\n", config, mc->mark.line, mc->mark.column, i,
                    st == COLO_EINVAL ? "kind" : "memory_fraction", mc->name, mc->path, err);
            bad++;
        }
    }
    colo_device_close(dev0);
    bad += check_drafts(config, cfg);
    if (bad)
        return 2;
    printf("%s: ok (%d model%s)\n", config, cfg->n_models, cfg->n_models == 1 ? "" : "s");
    return 0;
}

/* Everything a running server holds, freed by app_free. */
typedef struct app {
    const char *config; /* the config file's path, for messages */
    const colo_config *cfg;
    colo_device *dev;
    colo_device_info info;
    colo_cosched *cs;
    colo_mem_pool *pool; /* elastic memory; NULL where the device cannot reserve address space */
    colo_evictor *evictor; /* with the pool: puts idle models to sleep to make room */
    colo_config *file;     /* the config file as last read (SIGHUP applies the difference) */
    colo_server *s;
    colo_registry *reg; /* the models served */
    colo_api *api;
    colo_admin *admin;
    colo_batches *batches;
    int unit_first[COLO_CFG_MAX_MODELS], unit_count[COLO_CFG_MAX_MODELS]; /* partition policy */
    size_t start_rss_bytes; /* resident before any model (0: unknown) */
    struct event *sigterm, *sigint, *sighup;
} app;

/* What the policy arranges on the device before the models load: under
 * partition each model's compute units, under priority the best-effort
 * floor. */
static bool plan_policy(app *a, colo_cosched_config *cc)
{
    const colo_config *cfg = a->cfg;
    char err[1024];
    colo_sched_model models[COLO_CFG_MAX_MODELS];
    for (int i = 0; i < cfg->n_models; i++)
        models[i] = (colo_sched_model){.priority = cfg->models[i].priority,
                                       .share = cfg->models[i].share,
                                       .sm_share = cfg->models[i].sm_share};
    colo_sched_plan plan = {.dev = a->dev,
                            .n_models = cfg->n_models,
                            .models = models,
                            .best_effort_min_share = cfg->scheduler.best_effort_min_share,
                            .unit_first = a->unit_first,
                            .unit_count = a->unit_count,
                            .cc = cc};
    if (colo_sched_policy_plan(cfg->scheduler.policy, &plan, err, sizeof err) != COLO_OK) {
        COLO_ERROR("colo-server: %s: %s", a->config, err);
        return false;
    }
    if (plan.floor_by)
        COLO_INFO("colo-server: best-effort floor %.2f of the device's time, accounted by %s",
                  cc->best_effort_min_share, plan.floor_by);
    return true;
}

/* /health/ready: every model loaded at start and every one the config
 * file names is serving. */
static bool ready(void *ud) { return colo_registry_ready(ud); }

/* Opens the device, plans the policy, creates the co-scheduler, the HTTP
 * server, the table of models, the API and the admin routes. */
static bool app_open(app *a)
{
    const colo_config *cfg = a->cfg;
    char err[1024];
    colo_device_config dc = {.want = device_want(cfg),
                             .cpu_threads = cfg->server.threads,
                             .cpu_memory_bytes = (size_t)cfg->server.cpu_memory_bytes,
                             .gpu_memory_bytes = (size_t)cfg->server.gpu_memory_bytes,
                             .cuda_graphs = cfg->server.cuda_graphs};
    if (!(a->dev = colo_device_open(&dc, err, sizeof err))) {
        COLO_ERROR("colo-server: %s", err);
        return false;
    }
    colo_device_get_info(a->dev, &a->info);
    colo_cosched_config cc = {.policy = cfg->scheduler.policy,
                              .best_effort_max_steps = cfg->scheduler.best_effort_max_steps,
                              .best_effort_max_ops = cfg->scheduler.best_effort_max_ops,
                              .best_effort_max_us = cfg->scheduler.best_effort_max_us,
                              .quantum_us = cfg->scheduler.quantum_us,
                              .batch_min_share = cfg->scheduler.batch_min_share};
    if (!plan_policy(a, &cc))
        return false;
    if (!(a->cs = colo_cosched_create(&cc, err, sizeof err)) || !(a->s = colo_server_create(cfg, err, sizeof err))) {
        COLO_ERROR("colo-server: %s", err);
        return false;
    }
    if (!(a->reg = colo_registry_create(colo_server_http(a->s), cfg))) {
        COLO_ERROR("colo-server: out of memory");
        return false;
    }
    if (!(a->api = colo_api_create(a->s, a->reg, cfg, err, sizeof err)) ||
        !(a->admin = colo_admin_create(a->s, a->reg, a->api, cfg, err, sizeof err)) ||
        !(a->batches = colo_batches_create(a->s, a->reg, cfg, err, sizeof err))) {
        COLO_ERROR("colo-server: %s", err);
        return false;
    }
    colo_api_response_store rs;
    if (colo_batches_response_store(a->batches, &rs))
        colo_api_set_response_store(a->api, &rs);
    colo_metric *bq, *br, *bc;
    if (colo_batches_line_metrics(a->batches, &bq, &br, &bc))
        colo_api_set_batch_metrics(a->api, bq, br, bc);
    colo_server_set_ready(a->s, ready, a->reg);
    colo_proc_memory pm;
    if (colo_proc_memory_get(&pm))
        a->start_rss_bytes = pm.rss_bytes;
    bool cuda = a->info.kind == COLO_BACKEND_CUDA;
    COLO_INFO("colo-server: device %s (%s, %d compute units%s%s, budget %.1f MiB), policy %s", a->info.name,
              cuda ? "cuda" : "cpu", a->info.compute_units, cuda ? "" : ", kernels ",
              cuda ? "" : colo_cpu_kernels_name(), (double)colo_arena_device_budget(a->dev) / (1 << 20),
              colo_sched_policy_name(cfg->scheduler.policy));
    return true;
}

/* Two lines per loaded model: which file answers under which name, the
 * memory it took, and the KV cache's reserve with the keys that lower it
 * (a default config gives a 92 MiB model a reserve of several GiB). */
static void log_model(const app *a, int i, colo_served *m)
{
    colo_served_info mi;
    colo_served_get_info(m, &mi);
    const colo_model_cfg *mc = colo_served_config(m);
    const double MiB = 1 << 20;
    const char *file = strrchr(mc->path, '/') ? strrchr(mc->path, '/') + 1 : mc->path;
    COLO_INFO("colo-server: model \"%s\" is %s (%s, priority %s), loaded in %.0f ms: %.1f MiB in use (weights "
              "%.1f MiB, activations %.1f MiB)",
              mi.name, file, mi.kind, colo_priority_name(mi.priority), mi.load_ms, (double)mi.mem.used_bytes / MiB,
              (double)mi.weight_bytes / MiB, (double)mi.act_bytes / MiB);
    if (mi.task != COLO_TASK_GENERATE)
        return;
    for (int k = 0; k < mc->n_adapters; k++) {
        colo_served_adapter_info ad;
        if (colo_served_adapter_get(m, mc->adapters[k].name, &ad))
            COLO_INFO("colo-server: model \"%s\": LoRA adapter \"%s\" (rank %d, %.1f MiB, priority %s) answers as a "
                      "model of its own",
                      mi.name, ad.cfg.name, ad.rank, (double)ad.bytes / MiB, colo_priority_name(ad.cfg.priority));
    }
    bool cpu = a->info.kind == COLO_BACKEND_CPU;
    COLO_INFO("colo-server: model \"%s\": KV cache (%s) up to %.1f MiB (%d tokens), %s: the rest of its "
              "memory_fraction %.2f of the device's %.1f MiB (limit %.1f MiB); a smaller models[%d].memory_fraction or "
              "server.%s_memory_bytes reserves less",
              mi.name, colo_dtype_name(mc->kv_dtype), (double)mi.kv_bytes / MiB, mi.kv_tokens,
              a->pool ? "taken block by block as sequences need it" : "allocated now", mc->memory_fraction,
              (double)colo_arena_device_budget(a->dev) / MiB, (double)mi.mem.limit_bytes / MiB, i,
              cpu ? "cpu" : "gpu");
}

/* The process's memory on the CPU beside the budget (docs/CONFIG.md,
 * "Memory"): what it held before any model, the first
 * COLO_HOST_ALLOWANCE_BYTES of the models' host memory (tokenizers,
 * executors; what passes it is counted against the budget), each pool
 * worker's kernel scratch, and the heap's working room (requests, HTTP
 * buffers, the ledger). */
#define COLO_HOST_ALLOWANCE_BYTES ((size_t)20 << 20)
#define COLO_WORKER_SCRATCH_BYTES ((size_t)4 << 20)
#define COLO_HEAP_ROOM_BYTES ((size_t)8 << 20)

/* Sets the pool's host allowance and reports the fixed overhead and the
 * container limit that holds the process. */
static void report_overhead(app *a)
{
    const double MiB = 1 << 20;
    size_t start = a->start_rss_bytes ? a->start_rss_bytes : (size_t)16 << 20;
    size_t scratch = (size_t)a->info.compute_units * COLO_WORKER_SCRATCH_BYTES;
    size_t overhead = start + COLO_HOST_ALLOWANCE_BYTES + scratch + COLO_HEAP_ROOM_BYTES;
    size_t budget = colo_mem_pool_budget(a->pool);
    colo_mem_pool_set_host_allowance(a->pool, COLO_HOST_ALLOWANCE_BYTES);
    COLO_INFO("colo-server: memory: budget %.1f MiB (server.cpu_memory_bytes) for the models, and a fixed overhead of "
              "%.1f MiB (resident before any model %.1f MiB, the models' first %.1f MiB of host memory, kernel "
              "scratch %d x %.1f MiB, heap room %.1f MiB): a container memory limit of %zu bytes (%.1f MiB) holds "
              "the process, with responses queued for slow clients (server.max_unsent_bytes) on top",
              (double)budget / MiB, (double)overhead / MiB, (double)start / MiB, COLO_HOST_ALLOWANCE_BYTES / MiB,
              a->info.compute_units, COLO_WORKER_SCRATCH_BYTES / MiB, COLO_HEAP_ROOM_BYTES / MiB, budget + overhead,
              (double)(budget + overhead) / MiB);
}

/* Loads and starts every configured model, in config order. */
static bool load_models(app *a)
{
    const colo_config *cfg = a->cfg;
    char err[1024];
    if (check_drafts(a->config, cfg))
        return false; /* a draft model that cannot draft for its target */
    /* Elastic memory: always on the CPU; on CUDA (virtual memory management)
     * unless server.elastic_memory is false, which keeps one cudaMalloc per
     * model (a sleeping model then frees nothing, and nobody borrows). */
    if (colo_device_can_reserve(a->dev) && (a->info.kind == COLO_BACKEND_CPU || cfg->server.elastic_memory)) {
        if (!(a->pool = colo_mem_pool_create(colo_arena_device_budget(a->dev))) ||
            !(a->evictor = colo_evictor_create(a->pool, colo_registry_walk_served, a->reg))) {
            COLO_ERROR("colo-server: out of memory");
            return false;
        }
        colo_evictor_set_min_residency_ms(a->evictor, cfg->server.min_residency_ms);
        if (a->info.kind == COLO_BACKEND_CPU)
            report_overhead(a);
    } else {
        for (int i = 0; i < cfg->n_models; i++)
            if (cfg->models[i].memory_max_fraction > cfg->models[i].memory_fraction)
                COLO_WARN("colo-server: models[%d] (%s): memory_max_fraction is ignored on %s (%s): the model "
                          "keeps memory_fraction",
                          i, cfg->models[i].name, a->info.name,
                          cfg->server.elastic_memory ? "no virtual memory management" : "server.elastic_memory is false");
    }
    colo_registry_env env = {.dev = a->dev, .cs = a->cs, .pool = a->pool, .evictor = a->evictor,
                             .policy = cfg->scheduler.policy, .hooks = colo_api_hooks(a->api)};
    colo_registry_attach(a->reg, &env);
    for (int i = 0; i < cfg->n_models; i++) {
        const colo_model_cfg *mc = &cfg->models[i];
        colo_registry_model *e = colo_registry_load_now(a->reg, mc, a->unit_first[i], a->unit_count[i], err, sizeof err);
        if (!e) {
            COLO_ERROR("colo-server: %s:%d:%d: models[%d]: %s", a->config, mc->mark.line, mc->mark.column, i, err);
            return false;
        }
        log_model(a, i, e->m);
    }
    if (colo_api_watch(a->api, a->dev, cfg->server.telemetry_interval_ms, err, sizeof err) != COLO_OK) {
        COLO_ERROR("colo-server: telemetry: %s", err);
        return false;
    }
    return true;
}

/* SIGHUP: reads the config file again and applies the difference from
 * what it said before; a file that does not load changes nothing. */
static void on_sighup(evutil_socket_t sig, short what, void *arg)
{
    (void)sig, (void)what;
    app *a = arg;
    colo_config *now = malloc(sizeof *now);
    char err[1024];
    if (!now) {
        COLO_ERROR("reload: out of memory: nothing changed");
        return;
    }
    COLO_INFO("reload: SIGHUP: reading %s", a->config);
    if (colo_config_load(a->config, now, err, sizeof err) != COLO_OK) {
        COLO_ERROR("reload: %s: nothing changed", err);
        free(now);
        return;
    }
    colo_admin_reload(a->admin, a->file, now);
    free(a->file);
    a->file = now;
}

static bool install_signals(app *a)
{
    struct event_base *base = colo_http_server_base(colo_server_http(a->s));
    a->sigterm = evsignal_new(base, SIGTERM, on_signal, a->s);
    a->sigint = evsignal_new(base, SIGINT, on_signal, a->s);
    a->sighup = evsignal_new(base, SIGHUP, on_sighup, a);
    if (!(a->file = malloc(sizeof *a->file))) {
        COLO_ERROR("colo-server: out of memory");
        return false;
    }
    *a->file = *a->cfg;
    if (!a->sigterm || !a->sigint || !a->sighup || evsignal_add(a->sigterm, NULL) || evsignal_add(a->sigint, NULL) ||
        evsignal_add(a->sighup, NULL)) {
        COLO_ERROR("colo-server: cannot install signal handlers");
        return false;
    }
    return true;
}

/* Announces the address, writes the port file when asked, then runs the
 * event loop until shutdown. */
static bool serve(app *a, const char *port_file)
{
    const colo_config *cfg = a->cfg;
    bool v6 = strchr(cfg->server.listen_host, ':') != NULL;
    char url[300];
    snprintf(url, sizeof url, "http://%s%s%s:%d", v6 ? "[" : "", cfg->server.listen_host, v6 ? "]" : "",
             colo_server_port(a->s));
    COLO_INFO("colo-server: listening on %s (%s, %d model%s)", url,
              colo_config_api_key(cfg) || cfg->tenants.n_keys ? "API key required" : "no API key", cfg->n_models,
              cfg->n_models == 1 ? "" : "s");
    /* Where to send a first request: the first model, by its kind's route. */
    if (cfg->n_models > 0) {
        const char *name = cfg->models[0].name;
        if (colo_served_task(colo_registry_slot(a->reg, 0)->m) == COLO_TASK_GENERATE)
            COLO_INFO("colo-server: try: curl -s %s/v1/chat/completions -d '{\"model\":\"%s\",\"messages\":"
                      "[{\"role\":\"user\",\"content\":\"What is 2+2?\"}],\"temperature\":0}'",
                      url, name);
        else
            COLO_INFO("colo-server: try: curl -s %s/v1/embeddings -d '{\"model\":\"%s\",\"input\":[\"Hello\"]}'", url,
                      name);
    }
    if (cfg->tenants.n_orgs || cfg->usage.enabled)
        COLO_INFO("colo-server: tenants: %d organization%s, %d project%s, %d key%s; usage ledger %s",
                  cfg->tenants.n_orgs, cfg->tenants.n_orgs == 1 ? "" : "s", cfg->tenants.n_projects,
                  cfg->tenants.n_projects == 1 ? "" : "s", cfg->tenants.n_keys, cfg->tenants.n_keys == 1 ? "" : "s",
                  cfg->usage.enabled ? cfg->usage.db : "off");
    if (port_file) {
        FILE *pf = fopen(port_file, "w");
        if (!pf || fprintf(pf, "%d\n", colo_server_port(a->s)) < 0 || fclose(pf)) {
            COLO_ERROR("colo-server: cannot write the port to %s", port_file);
            return false;
        }
    }
    if (colo_server_run(a->s) != COLO_OK) {
        COLO_ERROR("colo-server: the event loop failed");
        return false;
    }
    COLO_INFO("colo-server: stopped");
    return true;
}

static void app_free(app *a)
{
    if (a->sigterm)
        event_free(a->sigterm);
    if (a->sigint)
        event_free(a->sigint);
    if (a->sighup)
        event_free(a->sighup);
    free(a->file);
    /* Executors first: their last answers are posted to the loop, which
     * colo_server_free runs (finishing requests whose clients are gone).
     * A load that does not end within shutdown_timeout_ms (a file that
     * blocks) is not waited for: nothing it may use is freed, the process
     * exits around it. */
    colo_batches_stop(a->batches); /* lines the stop cuts short run again on the next start */
    if (!colo_registry_stop(a->reg)) {
        COLO_ERROR("colo-server: exiting with a model load under way");
        return;
    }
    colo_api_unwatch(a->api); /* its timer is on the server's loop */
    colo_server_free(a->s);
    colo_batches_free(a->batches);
    colo_admin_free(a->admin);
    colo_api_free(a->api);
    colo_registry_free(a->reg);
    colo_cosched_destroy(a->cs);
    colo_evictor_free(a->evictor);
    colo_mem_pool_destroy(a->pool);
    colo_device_close(a->dev);
}

int main(int argc, char **argv)
{
#ifdef __GLIBC__
    /* A fixed threshold: glibc raises its own (up to 32 MiB) each time a
     * large block is freed, after which the transient buffers of model
     * loads, wakes and adapters come from the heap and stay resident once
     * freed (RSS 12% higher after ten minutes of churn, scripts/churn.py). */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
    options o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    static colo_config cfg; /* large: not on the stack */
    char err[1024];
    if (colo_config_load(o.config, &cfg, err, sizeof err) != COLO_OK) {
        fprintf(stderr, "colo-server: %s\n", err);
        return 2;
    }
    if (colo_fault_init(err, sizeof err) != COLO_OK) {
        fprintf(stderr, "colo-server: %s\n", err);
        return 2;
    }
    if (o.check_only)
        return check_config(o.config, &cfg);
    static app a; /* large: not on the stack */
    a.config = o.config;
    a.cfg = &cfg;
    bool ok = app_open(&a) && load_models(&a) && install_signals(&a) && serve(&a, o.port_file);
    app_free(&a);
    return ok ? 0 : 1;
}
