/* server/api/dashboard.h: the /dashboard page (server/api/dashboard.html), embedded
 * in colo-server at build time (server/api/dashboard_embed.cmake writes it as a
 * C array). One self-contained page: no external script, style or font; it
 * polls GET /v1/stats (docs/OBSERVABILITY.md). */
#ifndef COLO_SERVER_DASHBOARD_H
#define COLO_SERVER_DASHBOARD_H

#include <stddef.h>

extern const char colo_dashboard_html[];   /* NUL-terminated */
extern const size_t colo_dashboard_html_len; /* bytes, without the NUL */

#endif
