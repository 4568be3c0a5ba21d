/* Test target: main starts a busy thread, then calls pthread_exit. The process lives on with a zombie
 * main thread (whose /proc/PID/maps is empty, and whose pid reads no memory) until the thread returns.
 *
 *   start_thread -> worker -> spin        (for argv[1] seconds, default 1.5)
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;

NOINLINE void spin(void) {
    for (int i = 0; i < 100000; i++) sink += i;
}

NOINLINE void *worker(void *arg) {
    double seconds = *(double *)arg;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        spin();
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
    return NULL;
}

int main(int argc, char **argv) {
    static double seconds;
    seconds = argc > 1 ? atof(argv[1]) : 1.5;
    pthread_t t;
    if (pthread_create(&t, NULL, worker, &seconds) != 0) return 1;
    pthread_exit(NULL);
}
