/* Test target: a native program that embeds CPython and loads it only once it is being profiled, as an
 * embedding host loads it on first use (PostgreSQL's plpython3u, uWSGI's python plugin, Blender).
 *
 *   main -> host_calls_python -> PyRun_SimpleString -> ... -> outer -> middle -> inner (Python)
 *
 * argv[1]: readiness fd, written once the program runs, before libpython is mapped; argv[2]: the libpython
 * to dlopen (the interpreter's home comes from PYTHONHOME); argv[3]: seconds of Python to run. libpython is
 * loaded once a tracer has attached (TracerPid in /proc/self/status), so a profiler sees a process with no
 * Python in it at its attach: one that does not look for a runtime again shows only libpython's C frames.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "embedded_chain.h"
#include "traced.h"

#define NOINLINE __attribute__((noinline))

volatile int ran; /* set after the call, so that it is not a tail call */

NOINLINE int host_calls_python(void *libpython, const char *seconds) {
    void (*initialize)(void) = (void (*)(void))dlsym(libpython, "Py_Initialize");
    int (*run)(const char *) = (int (*)(const char *))dlsym(libpython, "PyRun_SimpleString");
    if (!initialize || !run) return 1;
    initialize();
    int status = run_embedded_chain(run, seconds);
    ran = 1;
    return status;
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    if (ready_then_wait_until_traced(argv[1]) != 0) return 1;
    void *libpython = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL);
    if (!libpython) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    return host_calls_python(libpython, argv[3]) != 0;
}
