/* A shared library whose .eh_frame the test corrupts (in a copy). Built with frame pointers, so nprof's
 * fallback to frame-pointer unwinding for this module still yields the right frames. */
#define NOINLINE __attribute__((noinline))

volatile unsigned long lib_sink;

NOINLINE void lib_leaf(void) {
    for (unsigned long i = 0; i < 100000; i++) lib_sink += i;
}

NOINLINE void lib_middle(void) { lib_leaf(); lib_sink++; }
NOINLINE void lib_entry(void) { lib_middle(); lib_sink++; }
