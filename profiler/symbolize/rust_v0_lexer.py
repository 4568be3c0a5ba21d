"""The token reader of Rust's v0 mangling (RFC 2603, "Syntax of mangled names"): numbers, identifiers
(with Punycode), back-references, and the output buffer with its limits. ``rust_v0`` builds the grammar
on top of it.

Back-references (``B`` + position) re-read an earlier part of the symbol; they must point strictly
backwards, nesting is capped at ``MAX_DEPTH`` and output at ``MAX_OUTPUT`` characters, so a hostile
symbol can neither loop nor blow up.
"""

from __future__ import annotations

from collections.abc import Callable

#: deeper nesting is treated as invalid (rustc-demangle allows 500; Python's own stack needs a margin)
MAX_DEPTH = 200
#: back-references can repeat text exponentially: longer output is treated as invalid
MAX_OUTPUT = 1 << 16
#: an identifier length with more digits than this cannot fit in any symbol
MAX_LENGTH_DIGITS = 9
#: <base-62-number> digits (RFC 2603, "Numbers")
_DIGITS_62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


class Invalid(Exception):
    """The symbol does not follow the v0 grammar (or exceeds the limits)."""


class Lexer:
    """Reads the symbol text after ``_R`` (positions in it are back-reference targets) and collects the
    printed output; ``printing`` > 0 while a part that is not printed is read (an impl's own path)."""

    def __init__(self, sym: str) -> None:
        self.sym = sym
        self.pos = 0
        self.depth = 0
        self.out: list[str] = []
        self.size = 0
        self.printing = 0
        self.bound_lifetimes = 0

    def emit(self, text: str) -> None:
        if not self.printing:
            self.out.append(text)
            self.size += len(text)
            if self.size > MAX_OUTPUT:
                raise Invalid("output too long")

    def peek(self) -> str:
        return self.sym[self.pos] if self.pos < len(self.sym) else ""

    def eat(self, char: str) -> bool:
        if self.peek() == char:
            self.pos += 1
            return True
        return False

    def next(self) -> str:
        char = self.peek()
        if not char:
            raise Invalid("unexpected end")
        self.pos += 1
        return char

    def base62(self) -> int:
        """<base-62-number>: "_" is 0, digits then "_" are their value + 1."""
        if self.eat("_"):
            return 0
        value = 0
        while not self.eat("_"):
            digit = _DIGITS_62.find(self.next())
            if digit < 0:
                raise Invalid("bad base-62 digit")
            value = value * 62 + digit
        return value + 1

    def opt_base62(self, tag: str) -> int:
        """An optional tagged <base-62-number>: 0 when absent, else its value + 1."""
        return self.base62() + 1 if self.eat(tag) else 0

    def ident(self) -> str:
        """<identifier> without its disambiguator: ["u"] <decimal> ["_"] <bytes>; "u" marks Punycode
        (RFC 3492) with "_" instead of "-" before the encoded part."""
        punycode = self.eat("u")
        start = self.pos
        if not self.peek().isdigit():
            raise Invalid("identifier without length")
        if not self.eat("0"):  # "0" is an empty identifier; other lengths have no leading zero
            while self.peek().isdigit():
                self.pos += 1
        digits = self.sym[start : self.pos]
        if len(digits) > MAX_LENGTH_DIGITS:
            raise Invalid("identifier length too long")
        self.eat("_")
        end = self.pos + int(digits)
        if end > len(self.sym):
            raise Invalid("identifier runs past the end")
        text, self.pos = self.sym[self.pos : end], end
        return _punycode(text) if punycode else text

    def hex_nibbles(self) -> str:
        """<const-data>: lowercase hex digits up to "_" (RFC 2603, "Constants")."""
        start = self.pos
        while (char := self.next()) != "_":
            if char not in "0123456789abcdef":
                raise Invalid("bad hex digit")
        return self.sym[start : self.pos - 1]

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Invalid("too deep")

    def backref(self, action: Callable[[], object]) -> None:
        """"B" <base-62-number>: parse again at an earlier position, then come back."""
        start = self.pos - 1
        target = self.base62()
        if target >= start:
            raise Invalid("forward back-reference")
        saved, self.pos = self.pos, target
        self.enter()
        action()
        self.depth -= 1
        self.pos = saved


def hex_value(digits: str) -> str:
    """An integer constant's hex digits in decimal, as rustc-demangle prints them."""
    return str(int(digits, 16)) if digits else "0"


def char_const(digits: str) -> str:
    """A char constant: its Unicode scalar value in hex."""
    value = int(digits or "0", 16)
    if value > 0x10FFFF or 0xD800 <= value < 0xE000:
        raise Invalid("bad char const")
    return chr(value)


def utf8_const(digits: str) -> str:
    """A &str constant: its UTF-8 bytes in hex."""
    if len(digits) % 2:
        raise Invalid("odd str const")
    try:
        return bytes.fromhex(digits).decode("utf-8")
    except ValueError as e:
        raise Invalid("bad str const") from e


def _punycode(text: str) -> str:
    """Decode RFC 3492 Punycode as v0 spells it: the last "_" separates the ASCII part."""
    basic, _, encoded = text.rpartition("_")
    if not encoded:
        raise Invalid("empty Punycode")
    try:
        return (f"{basic}-{encoded}" if basic else encoded).encode("ascii").decode("punycode")
    except (UnicodeError, ValueError):  # rustc-demangle prints undecodable Punycode this way
        return f"punycode{{{basic + '-' if basic else ''}{encoded}}}"
