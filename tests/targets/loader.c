/* Test target: a program that loads libraries while it is being profiled, and runs in each at once.
 *
 *   main -> run_library -> hot (in the library just loaded)
 *
 * argv[1]: readiness fd, written once the program runs; argv[2]: milliseconds to spend in each library;
 * argv[3...]: the libraries (copies of loaded_lib.c's build under different names, so each is a new
 * mapping). The first is loaded once a tracer has attached (TracerPid in /proc/self/status), so that
 * every load happens after the profiler read the maps: a profiler that does not read them again when a
 * thread runs in unknown code shows these samples as bare addresses.
 * With LOADER_DLCLOSE=FILE in the environment, each library is closed after its run, so the next one is
 * usually mapped at the same addresses, and the address of each library's hot() is appended to FILE.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "traced.h"

#define NOINLINE __attribute__((noinline))

volatile int loaded; /* counted after each hot(), so that the call is not a tail call */

NOINLINE void run_library(const char *path, long ms) {
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        fprintf(stderr, "%s\n", dlerror());
        exit(1);
    }
    void (*hot)(long) = (void (*)(long))dlsym(handle, "hot");
    if (!hot) exit(1);
    hot(ms * 1000000L);
    loaded++;
    const char *report = getenv("LOADER_DLCLOSE");
    if (report) {
        FILE *f = fopen(report, "a");
        if (!f) exit(1);
        fprintf(f, "%p\n", (void *)hot);
        fclose(f);
        dlclose(handle);
    }
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    if (ready_then_wait_until_traced(argv[1]) != 0) return 1;
    for (int i = 3; i < argc; i++) run_library(argv[i], atol(argv[2]));
    return 0;
}
