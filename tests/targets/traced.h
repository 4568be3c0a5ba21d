/* Whether a tracer (a profiler) has attached: TracerPid in /proc/self/status. Test targets that must act
 * after an attach (loader.c, embedder.c) poll it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int traced(void) {
    char line[256];
    int pid = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "TracerPid:", 10) == 0) pid = atoi(line + 10);
    fclose(f);
    return pid != 0;
}

static void wait_until_traced(void) {
    struct timespec poll = {0, 1000000}; /* 1 ms between looks at TracerPid */
    while (!traced()) nanosleep(&poll, NULL);
}
