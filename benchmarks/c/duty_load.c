/* A CPU load with a fixed duty cycle, standing in for a sampler's own work between stops
 * (benchmarks/bench_corun.py).
 *
 * usage: duty_load BUSY_US [PERIOD_US]
 *
 * In every PERIOD_US (default 1000, one tick at 1 kHz) it computes for BUSY_US, then sleeps for the rest
 * of the period. The work is an xorshift generator scattering writes into a 1 MiB array: a working set
 * the size of an interpreter's hot data, so that it competes for caches as a sampler written in Python
 * does, not only for an execution unit.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define WORDS (1u << 17) /* 1 MiB of uint64_t */

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s BUSY_US [PERIOD_US]\n", argv[0]);
        return 2;
    }
    uint64_t busy = strtoull(argv[1], NULL, 10) * 1000u;
    uint64_t period = (argc > 2 ? strtoull(argv[2], NULL, 10) : 1000u) * 1000u;
    static volatile uint64_t memory[WORDS];
    uint64_t x = 88172645463325252ull;
    uint64_t next = now_ns();
    for (;;) {
        uint64_t start = now_ns();
        while (now_ns() - start < busy) {
            for (int i = 0; i < 256; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                memory[x & (WORDS - 1)] += x;
            }
        }
        next += period;
        uint64_t after = now_ns();
        if (next > after) {
            struct timespec rest = {(time_t)((next - after) / 1000000000u), (long)((next - after) % 1000000000u)};
            nanosleep(&rest, NULL);
        } else {
            next = after; /* overran a period: restart the schedule rather than catch up */
        }
    }
}
