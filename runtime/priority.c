/* runtime/priority.c: the priorities' names (runtime/backend.h), the one
 * list the config, the API and the logs read. */
#include "runtime/backend.h"

#include <string.h>

const char *const colo_priority_names[] = {"low", "normal", "high", NULL}; /* indexed by colo_priority */

colo_status colo_priority_parse(const char *s, colo_priority *out)
{
    for (int i = 0; s && colo_priority_names[i]; i++)
        if (!strcmp(s, colo_priority_names[i])) {
            *out = (colo_priority)i;
            return COLO_OK;
        }
    return COLO_EINVAL;
}

const char *colo_priority_name(colo_priority p)
{
    return (unsigned)p <= (unsigned)COLO_PRIO_HIGH ? colo_priority_names[p] : "normal";
}
