/* The Python code the embedding test targets run (embedder.c, forking_host.c, linked_host.c):
 *
 *   <module> -> outer -> middle -> inner, spinning in inner for the seconds given
 */
#include <stdio.h>

/* code[size] is filled with the program for ``seconds`` (a decimal number, as text) */
static inline void embedded_chain(char *code, size_t size, const char *seconds) {
    snprintf(code, size,
             "import time\n"
             "def inner(until):\n"
             "    n = 0\n"
             "    while time.monotonic() < until:\n"
             "        n += 1\n"
             "def middle(until):\n"
             "    inner(until)\n"
             "def outer(until):\n"
             "    middle(until)\n"
             "outer(time.monotonic() + %s)\n",
             seconds);
}

/* a buffer that holds it */
#define EMBEDDED_CHAIN_SIZE 512

/* run it for ``seconds`` through ``run`` (libpython's PyRun_SimpleString): its status */
static inline int run_embedded_chain(int (*run)(const char *), const char *seconds) {
    char code[EMBEDDED_CHAIN_SIZE];
    embedded_chain(code, sizeof code, seconds);
    return run(code);
}
