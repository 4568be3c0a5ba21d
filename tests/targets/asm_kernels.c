/* Test target: hand-written kernels without CFI, called from C, each a case for one of the unwinder's
 * fallbacks when a frame has no CFI row.
 *
 *   main -> drive -> realigned_kernel   (argv[2] "realigned")
 *   main -> drive -> opaque_kernel      (argv[2] "opaque")
 *   main -> drive -> JIT_KERNEL         (argv[2] "jit")
 *
 * realigned_kernel realigns its stack as OpenBLAS's x86-64 gemm kernels do
 * (kernel/x86_64/dgemm_kernel_4x8_haswell.S and the rest: the PROLOGUE macro, then `movq %rsp, %rbx;
 * subq $N, %rsp; andq $-4096, %rsp`): after the `and`, only the copy of rsp in rbx says where the return
 * address is (prologue analysis follows it). rbp is a loop counter, not a frame pointer.
 *
 * opaque_kernel is what only a stack scan can step: rbp a loop counter, and rsp realigned with its old
 * value kept in memory only (in rax, then a stack slot). Its frame also holds a stale return address of a
 * call to another function, as a frame's uninitialised slots often do.
 *
 * JIT_KERNEL is code in an anonymous mapping, as a JIT makes it (HotSpot without -XX:+PreserveFramePointer):
 * no file, no unwind table, and rbp an ordinary register, zero while it loops.
 *
 * argv[1]: a file descriptor to write "ready\n" to once the hot loop runs.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

long realigned_kernel(long n);
long opaque_kernel(long n);
NOINLINE long other_function(long x) { return x + 1; }
long stale_caller(long x);

/* No .cfi_* directives: the assembler writes no FDE for these. */
__asm__(
    "    .text\n"
    "    .globl realigned_kernel\n"
    "    .type realigned_kernel, @function\n"
    "realigned_kernel:\n"
    "    subq $0x60, %rsp\n"
    "    movq %rbx, (%rsp)\n"
    "    movq %rbp, 0x8(%rsp)\n"
    "    movq %rsp, %rbx\n"
    "    subq $0x2000, %rsp\n"
    "    andq $-4096, %rsp\n"
    "    movq %rdi, %rcx\n"
    "    xorl %ebp, %ebp\n"
    "    xorl %eax, %eax\n"
    "1:  movq %rbp, %rdx\n"
    "    andq $0x3ff, %rdx\n"
    "    addq %rcx, (%rsp,%rdx,8)\n"
    "    addq (%rsp,%rdx,8), %rax\n"
    "    incq %rbp\n"
    "    decq %rcx\n"
    "    jnz 1b\n"
    "    movq %rbx, %rsp\n"
    "    movq (%rsp), %rbx\n"
    "    movq 0x8(%rsp), %rbp\n"
    "    addq $0x60, %rsp\n"
    "    ret\n"
    "    .size realigned_kernel, .-realigned_kernel\n");

__asm__(
    "    .text\n"
    "    .globl stale_caller\n"
    "    .type stale_caller, @function\n"
    "stale_caller:\n"
    "    subq $8, %rsp\n"
    "    call other_function\n"
    ".Lstale_return:\n"
    "    addq $8, %rsp\n"
    "    ret\n"
    "    .size stale_caller, .-stale_caller\n"
    "    .globl opaque_kernel\n"
    "    .type opaque_kernel, @function\n"
    "opaque_kernel:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    movq %rsp, %rax\n"
    "    andq $-64, %rsp\n"
    "    subq $0x40, %rsp\n"
    "    movq %rax, 0x38(%rsp)\n"
    "    leaq .Lstale_return(%rip), %rdx\n"
    "    movq %rdx, 0x10(%rsp)\n"
    "    movq %rdi, %rcx\n"
    "    movl $1, %ebp\n"
    "    xorl %eax, %eax\n"
    "1:  addq %rbp, %rax\n"
    "    incq %rbp\n"
    "    decq %rcx\n"
    "    jnz 1b\n"
    "    movq 0x38(%rsp), %rsp\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    "    .size opaque_kernel, .-opaque_kernel\n");

volatile long sink;

/* long jit_kernel(long n): push %rbp; xor %ebp,%ebp; mov %rdi,%rcx; xor %eax,%eax;
 * 1: add %rcx,%rax; dec %rcx; jnz 1b; pop %rbp; ret */
static const unsigned char JIT_CODE[] = {0x55, 0x31, 0xed, 0x48, 0x89, 0xf9, 0x31, 0xc0, 0x48,
                                         0x01, 0xc8, 0x48, 0xff, 0xc9, 0x75, 0xf8, 0x5d, 0xc3};
typedef long (*kernel_fn)(long);

static kernel_fn jit(void) {
    void *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED) exit(1);
    memcpy(code, JIT_CODE, sizeof JIT_CODE);
    if (mprotect(code, 4096, PROT_READ | PROT_EXEC) != 0) exit(1);
    return (kernel_fn)code;
}

NOINLINE long drive(kernel_fn kernel, long n) {
    long s = 0;
    for (int i = 0; i < 100; i++) s += kernel(n);
    return s;
}

int main(int argc, char **argv) {
    int ready_fd = argc > 1 ? atoi(argv[1]) : -1;
    const char *which = argc > 2 ? argv[2] : "realigned";
    kernel_fn kernel = strcmp(which, "opaque") == 0 ? opaque_kernel
                       : strcmp(which, "jit") == 0  ? jit()
                                                    : realigned_kernel;
    sink = drive(kernel, 10) + stale_caller(1);
    if (ready_fd >= 0) {
        if (write(ready_fd, "ready\n", 6) != 6) return 1;
        close(ready_fd);
    }
    for (;;) sink = drive(kernel, 100000);
}
