"""Rust's v0 symbol mangling (RFC 2603, ``_R`` prefix), demangled the way ``rustc-demangle`` prints it in
its alternate form (``{:#}``): without crate disambiguator hashes, e.g.
``_RINvCs32gj3y4fnmh_4main5applyNCNvB2_4main0EB2_`` -> ``main::apply::<main::main::{closure#0}>``.
binutils' ``nm -C`` prints the same (libiberty's rust-demangle.c); libstdc++'s ``__cxa_demangle``, and so
``cxxfilt``, does not know v0 at all.

The grammar is parsed and printed in one recursive descent over the tokens of ``rust_v0_lexer``, whose
limits (back-references only backwards, bounded depth and output) keep a hostile symbol from looping or
blowing up.
"""

from __future__ import annotations

from collections.abc import Callable

from profiler.symbolize.rust_v0_lexer import Invalid, Lexer, char_const, hex_value, utf8_const

__all__ = ["Invalid", "demangle_v0"]

#: <basic-type> (RFC 2603, "Types")
BASIC_TYPES = {
    "a": "i8", "b": "bool", "c": "char", "d": "f64", "e": "str", "f": "f32", "h": "u8", "i": "isize",
    "j": "usize", "l": "i32", "m": "u32", "n": "i128", "o": "u128", "s": "i16", "t": "u16", "u": "()",
    "v": "...", "x": "i64", "y": "u64", "z": "!", "p": "_",
}  # fmt: skip
#: integer <const> type tags (RFC 2603, "Constants")
_UNSIGNED, _SIGNED = "htmyoj", "aslxni"


class _Printer(Lexer):
    """The v0 grammar, printed as it is parsed."""

    def path(self, in_value: bool) -> None:
        self.enter()
        tag = self.next()
        if tag == "C":  # crate root: the disambiguator is the crate hash, left out of the alternate form
            self.opt_base62("s")
            self.emit(self.ident())
        elif tag == "N":  # nested path: <namespace> <path> <identifier>
            namespace = self.next()
            if not namespace.isalpha():
                raise Invalid("bad namespace")
            self.path(in_value)
            disambiguator = self.opt_base62("s")
            name = self.ident()
            if namespace.isupper():  # special namespaces: C closure, S shim (RFC 2603, "Namespaces")
                kind = {"C": "closure", "S": "shim"}.get(namespace, namespace)
                self.emit(f"::{{{kind}{':' + name if name else ''}#{disambiguator}}}")
            elif name:
                self.emit(f"::{name}")
        elif tag in "MXY":  # impl paths: <T>, <T as Trait>; the impl's own path is not printed
            if tag != "Y":
                self.opt_base62("s")
                self.printing += 1
                self.path(False)
                self.printing -= 1
            self.emit("<")
            self.type()
            if tag != "M":
                self.emit(" as ")
                self.path(False)
            self.emit(">")
        elif tag == "I":  # generic arguments
            self.path(in_value)
            self.emit("::<" if in_value else "<")
            self.sep_list(self.generic_arg, ", ")
            self.emit(">")
        elif tag == "B":
            self.backref(lambda: self.path(in_value))
        else:
            raise Invalid(f"bad path tag {tag!r}")
        self.depth -= 1

    def sep_list(self, item: Callable[[], object], separator: str) -> int:
        count = 0
        while not self.eat("E"):
            if count:
                self.emit(separator)
            item()
            count += 1
        return count

    def generic_arg(self) -> None:
        if self.eat("L"):
            self.lifetime(self.base62())
        elif self.eat("K"):
            self.const()
        else:
            self.type()

    def lifetime(self, index: int) -> None:
        """'_ for an erased lifetime (index 0), else 'a, 'b... counted back from the innermost binder."""
        if index == 0:
            self.emit("'_")
            return
        depth = self.bound_lifetimes - index
        if depth < 0:
            raise Invalid("unbound lifetime")
        self.emit("'" + chr(ord("a") + depth) if depth < 26 else f"'_{depth}")

    def binder(self) -> int:
        """[<binder>]: "G" count, printed as for<'a, ...>; returns how many lifetimes it bound."""
        count = self.opt_base62("G")
        if count:
            self.emit("for<")
            for i in range(count):
                self.emit(", " if i else "")
                self.bound_lifetimes += 1
                self.lifetime(1)
            self.emit("> ")
        return count

    def type(self) -> None:
        tag = self.next()
        if tag in BASIC_TYPES:
            self.emit(BASIC_TYPES[tag])
            return
        self.enter()
        if tag in "RQ":
            self.emit("&")
            if self.eat("L"):
                index = self.base62()
                if index:
                    self.lifetime(index)
                    self.emit(" ")
            self.emit("mut " if tag == "Q" else "")
            self.type()
        elif tag in "PO":
            self.emit("*const " if tag == "P" else "*mut ")
            self.type()
        elif tag in "AS":
            self.emit("[")
            self.type()
            if tag == "A":
                self.emit("; ")
                self.const()
            self.emit("]")
        elif tag == "T":
            self.emit("(")
            if self.sep_list(self.type, ", ") == 1:
                self.emit(",")
            self.emit(")")
        elif tag == "F":
            self.fn_sig()
        elif tag == "D":
            self.dyn_type()
        elif tag == "B":
            self.backref(self.type)
        else:  # a named type is a path
            self.pos -= 1
            self.path(False)
        self.depth -= 1

    def fn_sig(self) -> None:
        """<fn-sig> = [<binder>] ["U"] ["K" <abi>] {<type>} "E" <type>"""
        bound = self.binder()
        unsafe = self.eat("U")
        abi = None
        if self.eat("K"):
            abi = "C" if self.eat("C") else self.ident().replace("_", "-")
        self.emit("unsafe " if unsafe else "")
        self.emit(f'extern "{abi}" ' if abi else "")
        self.emit("fn(")
        self.sep_list(self.type, ", ")
        self.emit(")")
        if not self.eat("u"):  # a unit return type is not printed
            self.emit(" -> ")
            self.type()
        self.bound_lifetimes -= bound

    def dyn_type(self) -> None:
        """"D" <dyn-bounds> <lifetime>: dyn Trait<Assoc = T> + Send [+ 'a]"""
        self.emit("dyn ")
        bound = self.binder()
        self.sep_list(self.dyn_trait, " + ")
        self.bound_lifetimes -= bound
        if not self.eat("L"):
            raise Invalid("dyn type without lifetime")
        index = self.base62()
        if index:
            self.emit(" + ")
            self.lifetime(index)

    def dyn_trait(self) -> None:
        """<path> {"p" <undisambiguated-identifier> <type>}: associated type bindings go inside the
        trait's generic arguments, so those are left open while the bindings are printed."""
        open_generics = self.path_open_generics()
        while self.eat("p"):
            self.emit(", " if open_generics else "<")
            open_generics = True
            self.emit(f"{self.ident()} = ")
            self.type()
        if open_generics:
            self.emit(">")

    def path_open_generics(self) -> bool:
        """A path, printed without the ">" closing its generic arguments; True if it had some."""
        if self.eat("B"):
            found = [False]
            self.backref(lambda: found.__setitem__(0, self.path_open_generics()))
            return found[0]
        if self.eat("I"):
            self.path(False)
            self.emit("<")
            self.sep_list(self.generic_arg, ", ")
            return True
        self.path(False)
        return False

    def const(self) -> None:
        """<const> = <type> <const-data> | "p" | <backref>; integers print in decimal, as rustc-demangle's
        alternate form does (no type suffix)."""
        if self.eat("B"):
            self.backref(self.const)
            return
        tag = self.next()
        if tag == "p":
            self.emit("_")
        elif tag in _UNSIGNED or tag in _SIGNED:
            negative = tag in _SIGNED and self.eat("n")
            self.emit(("-" if negative else "") + hex_value(self.hex_nibbles()))
        elif tag == "b":
            value = self.hex_nibbles()
            if value not in ("0", "1"):
                raise Invalid("bad bool const")
            self.emit("true" if value == "1" else "false")
        elif tag == "c":
            self.emit(repr(char_const(self.hex_nibbles())))
        elif tag == "e":  # &str constants: UTF-8 bytes in hex
            self.emit('"' + utf8_const(self.hex_nibbles()).replace("\\", "\\\\").replace('"', '\\"') + '"')
        else:
            raise Invalid(f"unsupported const tag {tag!r}")


def demangle_v0(symbol: str) -> str:
    """The demangled form of a ``_R`` symbol; raises Invalid if it is not one. A suffix after the
    mangled name (``.llvm.1234``, ``.cold``) is kept as is."""
    if not symbol.startswith("_R") or not symbol.isascii():
        raise Invalid("not a v0 symbol")
    printer = _Printer(symbol[2:])
    if printer.peek().isdigit():  # an encoding version; only version 0 (absent) exists
        raise Invalid("unknown encoding version")
    if not printer.peek().isupper():
        raise Invalid("a v0 path starts with an uppercase tag")
    try:
        printer.path(True)
        if printer.peek().isupper():  # the instantiating crate: not printed
            printer.printing += 1
            printer.path(False)
    except RecursionError as e:
        raise Invalid("too deep") from e
    rest = printer.sym[printer.pos :]
    if rest and not rest.startswith("."):
        raise Invalid("trailing characters")
    return "".join(printer.out) + rest
