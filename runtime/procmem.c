/* This process's resident memory from /proc/self/status (runtime/procmem.h). */
#include "runtime/procmem.h"

#include <stdio.h>
#include <string.h>

bool colo_proc_memory_get(colo_proc_memory *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return false;
    char line[256];
    bool rss = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long kb;
        if (sscanf(line, "VmRSS: %lu kB", &kb) == 1)
            out->rss_bytes = (size_t)kb * 1024, rss = true;
        else if (sscanf(line, "VmHWM: %lu kB", &kb) == 1)
            out->peak_rss_bytes = (size_t)kb * 1024;
        else if (sscanf(line, "RssAnon: %lu kB", &kb) == 1)
            out->anon_bytes = (size_t)kb * 1024;
        else if (sscanf(line, "RssFile: %lu kB", &kb) == 1)
            out->file_bytes = (size_t)kb * 1024;
    }
    fclose(f);
    if (!rss)
        memset(out, 0, sizeof *out);
    return rss;
}
