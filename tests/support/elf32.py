"""A minimal 32-bit i386 ELF executable, assembled here so the wrong-architecture test needs no multilib
compiler. It loops on the pause(2) syscall, so it idles until killed.

Layout per the ELF gABI: Elf32_Ehdr (52 bytes), one PT_LOAD Elf32_Phdr (32 bytes), then the code.
"""

from __future__ import annotations

import os
import struct

LOAD_ADDRESS = 0x08048000
EM_386 = 3
# _start: mov eax, 29 (__NR_pause on i386); int 0x80; jmp _start
CODE = bytes([0xB8, 29, 0, 0, 0, 0xCD, 0x80, 0xEB, 0xF7])


def i386_pause_binary() -> bytes:
    entry = LOAD_ADDRESS + 52 + 32
    ident = b"\x7fELF" + bytes([1, 1, 1, 0]) + bytes(8)  # ELFCLASS32, little endian, EV_CURRENT
    ehdr = ident + struct.pack("<HHIIIIIHHHHHH", 2, EM_386, 1, entry, 52, 0, 0, 52, 32, 1, 0, 0, 0)
    size = 52 + 32 + len(CODE)
    phdr = struct.pack("<IIIIIIII", 1, 0, LOAD_ADDRESS, LOAD_ADDRESS, size, size, 5, 0x1000)
    return ehdr + phdr + CODE


def write_i386_binary(path: str) -> str:
    with open(path, "wb") as f:
        f.write(i386_pause_binary())
    os.chmod(path, 0o755)
    return path
