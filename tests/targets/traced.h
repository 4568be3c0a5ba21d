/* Whether a tracer (a profiler) has attached: TracerPid in /proc/self/status. Test targets that must act
 * after an attach (loader.c, embedder.c) poll it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* write "ready" to the readiness fd ``fd`` (argv[1] of a test target), then wait for the tracer: 0, or 1 if
 * the write failed */
static int ready_then_wait_until_traced(const char *fd) {
    int ready_fd = atoi(fd);
    if (write(ready_fd, "ready\n", 6) != 6) return 1;
    close(ready_fd);
    wait_until_traced();
    return 0;
}
