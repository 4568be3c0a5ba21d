/* The library tests/targets/loader.c loads: hot() spins for the given nanoseconds in its own code. */
#include <time.h>

volatile unsigned long sink;

__attribute__((noinline)) void hot(long ns) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long end = ts.tv_sec * 1000000000L + ts.tv_nsec + ns;
    for (;;) {
        for (int i = 0; i < 10000; i++) sink += i;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if (ts.tv_sec * 1000000000L + ts.tv_nsec >= end) return;
    }
}
