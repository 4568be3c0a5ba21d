/* Test target: a program that execs itself again and again, working a few milliseconds in between.
 *
 *   main -> work (then execv of /proc/self/exe)
 *
 * argv[1]: execs still to make; argv[2]: milliseconds of work before each. A profiler that holds each exec
 * in its exec stop while it maps the new program must not sample the thread there as running: it has not
 * run an instruction of the new program yet.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;

NOINLINE void work(long ms) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        for (int i = 0; i < 1000; i++) sink += i;
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000L + (now.tv_nsec - start.tv_nsec) / 1000000L < ms);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    long left = atol(argv[1]);
    work(atol(argv[2]));
    if (left <= 0) return 0;
    char next[32];
    snprintf(next, sizeof next, "%ld", left - 1);
    char *args[] = {argv[0], next, argv[2], NULL};
    execv("/proc/self/exe", args);
    return 1;
}
