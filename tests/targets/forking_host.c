/* Test target: a native program that starts CPython and then forks, with no PyOS_AfterFork_Child, as uWSGI's
 * master does before its workers run Python (unless --py-call-osafterfork).
 *
 *   child: main -> child_spins_in_c, then main -> child_calls_python -> PyRun_SimpleString -> ... -> outer
 *          -> middle -> inner (Python)
 *
 * argv[1]: the libpython to dlopen (the interpreter's home comes from PYTHONHOME); argv[2]: seconds of
 * Python the child runs, "-" for none; argv[3] (optional): seconds the child spins in C first, on the
 * parent's thread state with an empty chain, as a uWSGI worker between requests. The parent waits for the
 * child. The child's main thread keeps the thread state the parent made, whose native_thread_id (3.11+) is
 * the parent's tid: no thread of the child has it.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "embedded_chain.h"

#define NOINLINE __attribute__((noinline))

volatile int ran; /* set after the call, so that it is not a tail call */

NOINLINE int child_calls_python(int (*run)(const char *), const char *seconds) {
    int status = run_embedded_chain(run, seconds);
    ran = 1;
    return status;
}

NOINLINE void child_spins_in_c(double seconds) {
    double until = now() + seconds;
    while (now() < until) ran++;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    void *libpython = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (!libpython) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    void (*initialize)(void) = (void (*)(void))dlsym(libpython, "Py_Initialize");
    int (*run)(const char *) = (int (*)(const char *))dlsym(libpython, "PyRun_SimpleString");
    if (!initialize || !run) return 1;
    initialize();
    pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {
        if (argc > 3) child_spins_in_c(atof(argv[3]));
        _exit(strcmp(argv[2], "-") != 0 && child_calls_python(run, argv[2]) != 0);
    }
    int status;
    if (waitpid(child, &status, 0) != child) return 1;
    return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
