/* The library tests/targets/loader.c loads: hot() spins for the given nanoseconds in its own code.
 * -DWORK=name renames the function that spins, so that two builds of this file, the same size, tell
 * apart the samples in each (a library unloaded and the other loaded at its addresses).
 * -DWORK_LINKAGE=static keeps it out of the dynamic symbols: stripped, the library has no name for it. */
#include <time.h>

#ifndef WORK
#define WORK work
#endif

volatile unsigned long sink;

#ifndef WORK_LINKAGE
#define WORK_LINKAGE
#endif

WORK_LINKAGE __attribute__((noinline)) void WORK(long ns) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long end = ts.tv_sec * 1000000000L + ts.tv_nsec + ns;
    for (;;) {
        for (int i = 0; i < 10000; i++) sink += i;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if (ts.tv_sec * 1000000000L + ts.tv_nsec >= end) return;
    }
}

__attribute__((noinline)) void hot(long ns) {
    WORK(ns);
    sink++; /* not a tail call */
}
