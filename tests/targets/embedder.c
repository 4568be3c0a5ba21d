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

#define NOINLINE __attribute__((noinline))

static const char SCRIPT[] =
    "import time\n"
    "def inner(until):\n"
    "    n = 0\n"
    "    while time.monotonic() < until:\n"
    "        n += 1\n"
    "def middle(until):\n"
    "    inner(until)\n"
    "def outer(until):\n"
    "    middle(until)\n"
    "outer(time.monotonic() + SECONDS)\n";

volatile int ran; /* set after the call, so that it is not a tail call */

static int traced(void) {
    char line[256];
    int pid = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "TracerPid:", 10) == 0) pid = atoi(line + 10);
    fclose(f);
    return pid != 0;
}

NOINLINE int host_calls_python(void *libpython, const char *seconds) {
    void (*initialize)(void) = (void (*)(void))dlsym(libpython, "Py_Initialize");
    int (*run)(const char *) = (int (*)(const char *))dlsym(libpython, "PyRun_SimpleString");
    if (!initialize || !run) return 1;
    initialize();
    char code[sizeof SCRIPT + 64];
    snprintf(code, sizeof code, "SECONDS = %s\n%s", seconds, SCRIPT);
    int status = run(code);
    ran = 1;
    return status;
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int ready_fd = atoi(argv[1]);
    if (write(ready_fd, "ready\n", 6) != 6) return 1;
    close(ready_fd);
    struct timespec poll = {0, 1000000}; /* 1 ms between looks at TracerPid */
    while (!traced()) nanosleep(&poll, NULL);
    void *libpython = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL);
    if (!libpython) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    return host_calls_python(libpython, argv[3]) != 0;
}
