/* The bundled demo for `nprof demo`: a tiny "simulation" with a known native call chain.
 *
 *   main -> run_simulation -> step -> integrate -> compute_forces   (about 3/4 of the time)
 *   main -> run_simulation -> render -> shade_pixels                (about 1/4)
 *
 * Built with frame pointers, so nprof unwinds it exactly. The functions are extern so that gcc does not
 * clone them into `.constprop` variants, which would rename them in the profile.
 * Runs for argv[1] seconds (default 3), then exits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static volatile double sink;

NOINLINE double compute_forces(int n) {
    double f = 0;
    for (int i = 1; i < n; i++) f += 1.0 / ((double)i * i);
    return f;
}

NOINLINE double integrate(int n) { return compute_forces(n) * 0.5; }
NOINLINE void step(void) { sink += integrate(300000); }

NOINLINE void shade_pixels(int n) {
    double acc = 0;
    for (int i = 0; i < n; i++) acc += (i % 7) * 0.25;
    sink += acc;
}

NOINLINE void render(void) {
    shade_pixels(100000);
    sink += 1; /* not a tail call: keeps render's frame on the stack */
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

NOINLINE void run_simulation(double seconds) {
    double end = now() + seconds;
    while (now() < end) {
        step();
        render();
    }
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 3.0;
    run_simulation(seconds);
    printf("nprof demo: simulated for %.1f s\n", seconds);
    return 0;
}
