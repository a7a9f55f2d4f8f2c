/* colo-server: loads the YAML config and serves HTTP until SIGTERM/SIGINT.
 * Exit codes: 0 ok, 1 runtime failure (cannot bind...), 2 usage or config error. */
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "runtime/log.h"
#include "server/server.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: colo-server --config FILE [--check-config]\n"
               "  --config FILE    the YAML configuration (docs/CONFIG.md)\n"
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
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            config = argv[++i];
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
    if (check_only) {
        printf("%s: ok (%d model%s)\n", config, cfg.n_models, cfg.n_models == 1 ? "" : "s");
        return 0;
    }

    int rc = 1;
    colo_server *s = colo_server_create(&cfg, err, sizeof err);
    if (!s) {
        COLO_ERROR("colo-server: %s", err);
        return 1;
    }
    struct event_base *base = colo_http_server_base(colo_server_http(s));
    struct event *sigterm = evsignal_new(base, SIGTERM, on_signal, s);
    struct event *sigint = evsignal_new(base, SIGINT, on_signal, s);
    if (!sigterm || !sigint || evsignal_add(sigterm, NULL) || evsignal_add(sigint, NULL)) {
        COLO_ERROR("colo-server: cannot install signal handlers");
        goto out_free;
    }
    bool v6 = strchr(cfg.server.listen_host, ':') != NULL;
    COLO_INFO("colo-server: listening on http://%s%s%s:%d (%s%s)", v6 ? "[" : "", cfg.server.listen_host,
              v6 ? "]" : "", colo_server_port(s), colo_config_api_key(&cfg) ? "API key required" : "no API key",
              ", health and metrics only");
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
    colo_server_free(s);
    return rc;
}
