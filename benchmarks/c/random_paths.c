/* Benchmark target: threads that keep taking new call paths, so a recording's prefix tree grows for as
 * long as it runs.
 *
 * Each thread calls through a table of NFUNCS functions: every function does a little arithmetic, then
 * calls a function picked from the table by a pseudo-random number, one level less deep, and a third of
 * the time a second one half as deep. The stacks are random paths through the table, up to DEPTH frames
 * deep, so nearly every deep sample is a stack not seen before (the shape of the soak recording that
 * first showed a tree's interning index growing by ~7 MB/s at 1 kHz).
 *
 * usage: random_paths READY_FD NTHREADS   (runs until killed)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NFUNCS 50
#define DEPTH 64 /* each top-level call is 5 to DEPTH levels deep */

typedef uint64_t (*fn)(int, uint64_t);
static fn table[NFUNCS];
volatile uint64_t sink;

/* Function I: K rounds of a multiplicative hash (a different amount of work per function), then the
 * calls. noinline keeps each a frame of its own. */
#define F(I, K)                                                                   \
    __attribute__((noinline)) static uint64_t f##I(int d, uint64_t s) {           \
        s = s * 6364136223846793005ULL + (2 * (I) + 1);                            \
        uint64_t acc = s;                                                         \
        for (int k = 0; k < (K); k++) acc = acc * 31 + (acc >> 7) + k;            \
        if (d <= 0) return acc;                                                   \
        uint64_t r = table[(s >> 33) % NFUNCS](d - 1, s);                         \
        if ((s >> 40) % 3 == 0) r += table[(s >> 20) % NFUNCS](d / 2, r);         \
        sink = r;                                                                 \
        return r ^ acc;                                                           \
    }
#define F10(T, K) F(T##0, K) F(T##1, K + 20) F(T##2, K + 40) F(T##3, K + 60) F(T##4, K + 80) \
    F(T##5, K + 10) F(T##6, K + 30) F(T##7, K + 50) F(T##8, K + 70) F(T##9, K + 90)
F10(1, 10) F10(2, 15) F10(3, 5) F10(4, 25) F10(5, 0)
#define T10(T) f##T##0, f##T##1, f##T##2, f##T##3, f##T##4, f##T##5, f##T##6, f##T##7, f##T##8, f##T##9
static fn table[NFUNCS] = {T10(1), T10(2), T10(3), T10(4), T10(5)};

static void *worker(void *arg) {
    uint64_t s = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ULL + 1;
    for (;;) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        sink = table[(s >> 33) % NFUNCS](5 + (int)((s >> 50) % (DEPTH - 5)), s);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s READY_FD NTHREADS\n", argv[0]);
        return 2;
    }
    int ready = atoi(argv[1]), n = atoi(argv[2]);
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, (void *)(uintptr_t)(i + 1)) != 0) return 1;
    }
    if (write(ready, "ready\n", 6) != 6) return 1;
    close(ready);
    for (;;) pause();
}
