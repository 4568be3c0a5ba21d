/* Test target for a command started by nprof: a program whose start is its work. A constructor spins in
 * `startup` before main runs, then main spins as long in `steady`.
 *
 *   _start -> __libc_start_main -> ... -> startup   (an .init_array constructor, before main)
 *   _start -> __libc_start_main -> main -> steady
 *
 * argv[1]: milliseconds for each; argv[2]: a file to which the constructor first writes whether the
 * program was traced at that moment (TracerPid in /proc/self/status): a profiler that attaches once the
 * command runs writes 0 there, one that holds it at its exec writes 1. glibc passes argc and argv to
 * .init_array functions as to main.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int tracer_pid(void) {
    char line[256];
    int pid = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "TracerPid:", 10) == 0) pid = atoi(line + 10);
    fclose(f);
    return pid;
}

NOINLINE static void spin_for(double seconds) {
    double end = now() + seconds;
    while (now() < end) sink++;
}

NOINLINE void startup(double seconds) { spin_for(seconds); sink++; }
NOINLINE void steady(double seconds) { spin_for(seconds); sink++; }

__attribute__((constructor)) static void at_start(int argc, char **argv) {
    if (argc < 3) return;
    FILE *f = fopen(argv[2], "w");
    if (!f) exit(2);
    fprintf(f, "%d\n", tracer_pid() != 0);
    fclose(f);
    startup(atol(argv[1]) / 1000.0);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: startup MS TRACED_FILE\n");
        return 2;
    }
    steady(atol(argv[1]) / 1000.0);
    return 0;
}
