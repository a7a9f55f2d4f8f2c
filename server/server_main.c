/* colo-server: loads the YAML config and serves HTTP until SIGTERM/SIGINT.
 * Exit codes: 0 ok, 1 runtime failure (cannot bind...), 2 usage or config error. */
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "runtime/fault.h"
#include "runtime/log.h"
#include "server/api.h"
#include "server/server.h"
#include "server/api_request.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: colo-server --config FILE [--check-config] [--port-file FILE]\n"
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
    colo_server_shutdown(s);
}

int main(int argc, char **argv)
{
    const char *config = NULL;
    bool check_only = false;
    const char *port_file = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            config = argv[++i];
        } else if (!strcmp(argv[i], "--port-file") && i + 1 < argc) {
            port_file = argv[++i];
        } else if (!strcmp(argv[i], "--check-config")) {
            check_only = true;
        } else {
            fprintf(stderr, "colo-server: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!config) {
        fprintf(stderr, "colo-server: --config FILE is required\n");
        usage(stderr);
        return 2;
    }
    static colo_config cfg; /* large: not on the stack */
    char err[1024];
    if (colo_config_load(config, &cfg, err, sizeof err) != COLO_OK) {
        fprintf(stderr, "colo-server: %s\n", err);
        return 2;
    }
    if (colo_fault_init(err, sizeof err) != COLO_OK) {
        fprintf(stderr, "colo-server: %s\n", err);
        return 2;
    }
    if (check_only) {
        /* Also what loading would check first: every model's file and its
         * memory need against the device's budget. */
        colo_device_config dc0 = {.want = cfg.server.device == COLO_DEVICE_CPU    ? "cpu"
                                          : cfg.server.device == COLO_DEVICE_CUDA ? "cuda"
                                                                                  : "auto",
                                  .cpu_memory_bytes = (size_t)cfg.server.cpu_memory_bytes};
        colo_device *dev0 = colo_device_open(&dc0, err, sizeof err);
        if (!dev0) {
            fprintf(stderr, "colo-server: %s\n", err);
            return 1;
        }
        size_t budget = colo_arena_device_budget(dev0);
        int bad = 0;
        for (int i = 0; i < cfg.n_models; i++) {
            const colo_model_cfg *mc = &cfg.models[i];
            if (colo_served_check(mc, budget, err, sizeof err) != COLO_OK) {
                fprintf(stderr, "%s:%d:%d: models[%d].memory_fraction: model %s (%s): %s\n", config, mc->mark.line,
                        mc->mark.column, i, mc->name, mc->path, err);
                bad++;
            }
        }
        colo_device_close(dev0);
        if (bad)
            return 2;
        printf("%s: ok (%d model%s)\n", config, cfg.n_models, cfg.n_models == 1 ? "" : "s");
        return 0;
    }
    int rc = 1;
    colo_device_config dc = {.want = cfg.server.device == COLO_DEVICE_CPU    ? "cpu"
                                     : cfg.server.device == COLO_DEVICE_CUDA ? "cuda"
                                                                             : "auto",
                             .cpu_threads = cfg.server.threads,
                             .cpu_memory_bytes = (size_t)cfg.server.cpu_memory_bytes};
    colo_device *dev = NULL;
    colo_cosched *cs = NULL;
    colo_server *s = NULL;
    colo_api *api = NULL;
    colo_served *models[COLO_CFG_MAX_MODELS] = {0};
    struct event *sigterm = NULL, *sigint = NULL;
    if (!(dev = colo_device_open(&dc, err, sizeof err))) {
        COLO_ERROR("colo-server: %s", err);
        return 1;
    }
    colo_device_info info;
    colo_device_get_info(dev, &info);
    colo_cosched_config cc = {.policy = cfg.scheduler.policy,
                              .best_effort_max_steps = cfg.scheduler.best_effort_max_steps,
                              .best_effort_max_ops = cfg.scheduler.best_effort_max_ops,
                              .best_effort_max_us = cfg.scheduler.best_effort_max_us,
                              .quantum_us = cfg.scheduler.quantum_us};
    int first[COLO_CFG_MAX_MODELS] = {0}, count[COLO_CFG_MAX_MODELS] = {0};
    if (cfg.scheduler.policy == COLO_SCHED_PARTITION) {
        if (!info.can_partition) {
            COLO_ERROR("colo-server: %s: scheduler.policy partition is not supported on %s (CUDA needs green "
                       "contexts, driver 12.4 or newer)",
                       config, info.name);
            goto out_free;
        }
        double share[COLO_CFG_MAX_MODELS];
        for (int i = 0; i < cfg.n_models; i++)
            share[i] = cfg.models[i].sm_share;
        if (colo_partition_plan(info.compute_units, info.kind == COLO_BACKEND_CUDA ? 8 : 1, cfg.n_models, share,
                                first, count, err, sizeof err) != COLO_OK) {
            COLO_ERROR("colo-server: %s: scheduler: %s", config, err);
            goto out_free;
        }
    }
    if (!(cs = colo_cosched_create(&cc, err, sizeof err)) || !(s = colo_server_create(&cfg, err, sizeof err)) ||
        !(api = colo_api_create(s, &cfg, err, sizeof err))) {
        COLO_ERROR("colo-server: %s", err);
        goto out_free;
    }
    COLO_INFO("colo-server: device %s (%s, %d compute units, budget %.1f MiB), policy %s", info.name,
              info.kind == COLO_BACKEND_CUDA ? "cuda" : "cpu", info.compute_units,
              (double)colo_arena_device_budget(dev) / (1 << 20), colo_sched_policy_name(cfg.scheduler.policy));
    for (int i = 0; i < cfg.n_models; i++) {
        const colo_model_cfg *mc = &cfg.models[i];
        colo_served_env env = {.dev = dev, .cs = cs, .hooks = colo_api_hooks(api)};
        env.stream.priority = cfg.scheduler.policy == COLO_SCHED_PRIORITY || cfg.scheduler.policy ==
                                  COLO_SCHED_PARTITION ? mc->priority : COLO_PRIO_NORMAL;
        env.stream.unit_first = first[i];
        env.stream.unit_count = count[i];
        if (!(models[i] = colo_served_load(mc, &env, err, sizeof err))) {
            COLO_ERROR("colo-server: %s:%d:%d: models[%d]: %s", config, mc->mark.line, mc->mark.column, i, err);
            goto out_free;
        }
        if (colo_served_start(models[i], err, sizeof err) != COLO_OK || colo_api_add_model(api, models[i])) {
            COLO_ERROR("colo-server: %s", err);
            goto out_free;
        }
        colo_served_info mi;
        colo_served_get_info(models[i], &mi);
        COLO_INFO("colo-server: model %s (%s, priority %s): memory limit %.1f MiB, %.1f MiB used after load, "
                  "loaded in %.0f ms",
                  mc->name, mc->kind, colo_priority_name(mc->priority),
                  (double)mi.mem.limit_bytes / (1 << 20), (double)mi.mem.used_bytes / (1 << 20), mi.load_ms);
    }
    struct event_base *base = colo_http_server_base(colo_server_http(s));
    sigterm = evsignal_new(base, SIGTERM, on_signal, s);
    sigint = evsignal_new(base, SIGINT, on_signal, s);
    if (!sigterm || !sigint || evsignal_add(sigterm, NULL) || evsignal_add(sigint, NULL)) {
        COLO_ERROR("colo-server: cannot install signal handlers");
        goto out_free;
    }
    bool v6 = strchr(cfg.server.listen_host, ':') != NULL;
    COLO_INFO("colo-server: listening on http://%s%s%s:%d (%s, %d model%s)", v6 ? "[" : "", cfg.server.listen_host,
              v6 ? "]" : "", colo_server_port(s), colo_config_api_key(&cfg) ? "API key required" : "no API key",
              cfg.n_models, cfg.n_models == 1 ? "" : "s");
    if (port_file) {
        FILE *pf = fopen(port_file, "w");
        if (!pf || fprintf(pf, "%d\n", colo_server_port(s)) < 0 || fclose(pf)) {
            COLO_ERROR("colo-server: cannot write the port to %s", port_file);
            goto out_free;
        }
    }
    if (colo_server_run(s) != COLO_OK) {
        COLO_ERROR("colo-server: the event loop failed");
        goto out_free;
    }
    COLO_INFO("colo-server: stopped");
    rc = 0;

out_free:
    if (sigterm)
        event_free(sigterm);
    if (sigint)
        event_free(sigint);
    /* Executors first: their last answers are posted to the loop, which
     * colo_server_free runs (finishing requests whose clients are gone). */
    for (int i = 0; i < cfg.n_models; i++)
        colo_served_stop(models[i]);
    colo_server_free(s);
    colo_api_free(api);
    for (int i = 0; i < cfg.n_models; i++)
        colo_served_free(models[i]);
    colo_cosched_destroy(cs);
    colo_device_close(dev);
    return rc;
}
