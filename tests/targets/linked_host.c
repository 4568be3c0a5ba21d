/* Test target: a program linked with libpython that uses Python's objects and types directly, as uWSGI does.
 *
 *   main -> host_calls_python -> PyRun_SimpleString -> ... -> outer -> middle -> inner (Python)
 *
 * argv[1]: seconds of Python to run. Built as a PIE, its references to libpython's data (Py_None, Py_True,
 * &PyUnicode_Type, ...) are copy relocations (R_X86_64_COPY): the dynamic loader copies those objects into
 * the program's own .bss, and libpython's code uses the copies from then on. A profiler that takes the
 * addresses of None or of the type objects from libpython's symbols compares against objects nobody uses.
 */
#include <Python.h>

#include "embedded_chain.h"

#define NOINLINE __attribute__((noinline))

volatile int ran; /* set after the call, so that it is not a tail call */

NOINLINE int host_calls_python(const char *seconds) {
    char code[EMBEDDED_CHAIN_SIZE];
    embedded_chain(code, sizeof code, seconds);
    int status = PyRun_SimpleString(code);
    ran = 1;
    return status;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    Py_Initialize();
    /* the direct references that make the copies */
    PyObject *five = PyLong_FromLong(5);
    if (!PyLong_CheckExact(five) || PyUnicode_CheckExact(five) || PyDict_CheckExact(five)) return 3;
    if (Py_TYPE(Py_True) != &PyBool_Type || Py_TYPE(Py_None) == &PyFloat_Type) return 3;
    Py_DECREF(five);
    int status = host_calls_python(argv[1]);
    Py_Finalize();
    return status != 0;
}
