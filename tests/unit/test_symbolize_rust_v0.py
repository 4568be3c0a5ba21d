"""Rust symbol demangling (v0, RFC 2603, and legacy) through ``demangle()``, and DWARF names of a Rust binary.

The oracle is binutils' ``nm -C`` (libiberty's rust-demangle.c, 2.40), which prints v0 names the way
rustc-demangle's alternate form does. A Rust program with closures, trait impls, generics over
references, slices, arrays, tuples, fn pointers, ``dyn for<'a> Fn`` and const generics is built offline
with ``rustc -C symbol-mangling-version=v0`` (opt-level 0, so that every generic instance keeps its
symbol); every ``_R`` symbol ``nm`` lists must demangle as ``nm -C``
prints it. Documented differences:

* symbols with a ``.``-suffix (``MAIN.0``, ``.llvm.123`` is dropped as rustc-demangle does): nm drops
  every suffix, nprof keeps gcc/LLVM clone suffixes as it does for C++ (``demangle()``);
* legacy ``$u<hex>$`` escapes of non-ASCII characters: nm 2.40 leaves them, rustc-demangle and nprof
  decode them (``gr$uf6$$udf$e`` -> ``größe``).
"""

from __future__ import annotations

import random
import shutil
import subprocess
import time

import pytest

from profiler.binary.elf import ElfFile
from profiler.binary.symbols import load_symbols
from profiler.symbolize.demangle import demangle
from profiler.symbolize.dwarf import DwarfResolver
from profiler.symbolize.rust_v0_lexer import MAX_OUTPUT
from tests.unit.test_symbolize_dwarf import instructions
from tests.unit.test_symbolize_oracle import addr2line, disagreement

RUST_SOURCE = r"""
use std::collections::HashMap;
use std::hint::black_box;

pub trait Shape { fn area(&self) -> f64; }
pub struct Sq<T>(pub T);
impl Shape for Sq<f64> { #[inline(never)] fn area(&self) -> f64 { self.0 * self.0 } }
impl<T: Copy + Into<f64>> Sq<T> {
    #[inline(never)] pub fn twice(&self) -> f64 { let v: f64 = self.0.into(); v * 2.0 }
}
pub struct Const<const N: usize, const C: char, const B: bool, const I: i32>;
impl<const N: usize, const C: char, const B: bool, const I: i32> Const<N, C, B, I> {
    #[inline(never)] pub fn get(&self) -> usize { N + C as usize + B as usize + I as usize }
}
#[inline(never)] fn apply<F: Fn(i32) -> i32>(f: F, x: i32) -> i32 { f(x) }
#[inline(never)] fn takes<T>(t: T) -> usize { std::mem::size_of_val(&t) }
mod größe { #[inline(never)] pub fn ünïcödé(x: u8) -> u8 { x.wrapping_mul(3) } }

fn main() {
    let k = black_box(7);
    let c = |x| x + k;
    println!("{}", apply(c, 3));
    let s: Box<dyn Shape> = Box::new(Sq(2.0f64));
    println!("{}", s.area());
    println!("{}", Sq(3u8).twice());
    let mut m: HashMap<&str, [u32; 3]> = HashMap::new();
    m.insert("a", [1, 2, 3]);
    println!("{:?} {}", m.get("a"), größe::ünïcödé(black_box(5)));
    println!("{}", Const::<3, 'x', true, -5>.get());
    let f: fn(&u8) -> u32 = |b| *b as u32;
    let d: &dyn for<'a> Fn(&'a u8) -> u8 = &|b| *b;
    let p: *const [u8; 4] = std::ptr::null();
    let mut buf = [0u8; 2];
    let t: (i64, &mut [u8]) = (1, &mut buf[..]);
    println!("{}", takes(f) + takes(d) + takes(p) + takes(t) + takes(()) + takes(Some("x")));
}
"""

#: RFC 2603 / rustc-demangle fixtures, checked once against binutils' c++filt (which adds crate hashes)
FIXTURES = {
    "_RNvNtCs1234_7mycrate3foo3bar": "mycrate::foo::bar",
    "_RNvC6_123foo3bar": "123foo::bar",
    "_RNqCs4fqI2P2rA04_11utf8_identsu30____7hkackfecea1cbdathfdh9hlq6y": "utf8_idents::საჭმელად_გემრიელი_სადილი",
    "_RNCNCNgCs6DXkGYLi8lr_2cc5spawn00B5_": "cc::spawn::{closure#0}::{closure#0}",
    "_RNCINkXs25_NgCsbmNqQUJIY6D_4core5sliceINyB9_4IterhENuNgNoBb_4iter8iterator8Iterator9rpositionNCNgNpB9_6memchr7memrchrs_0E0Bb_":
        "<core::slice::Iter<u8> as core::iter::iterator::Iterator>::rpos"
        "ition::<core::slice::memchr::memrchr::{closure#1}>::{closure#0}",
    "_RINbNbCskIICzLVDPPb_5alloc5alloc8box_freeDINbNiB4_5boxed5FnBoxuEp6OutputuEL_ECs1iopQbuBiw2_3std":
        "alloc::alloc::box_free::<dyn alloc::boxed::FnBox<(), Output = ()>>",
    "_RMC0INtC8arrayvec8ArrayVechKj7b_E": "<arrayvec::ArrayVec<u8, 123>>",
    "_RMCs4fqI2P2rA04_13const_genericINtB0_8UnsignedKhb_E": "<const_generic::Unsigned<11>>",
    "_RMCs4fqI2P2rA04_13const_genericINtB0_6SignedKanb_E": "<const_generic::Signed<-11>>",
    "_RMCs4fqI2P2rA04_13const_genericINtB0_4BoolKb1_E": "<const_generic::Bool<true>>",
    "_RMCs4fqI2P2rA04_13const_genericINtB0_4CharKc76_E": "<const_generic::Char<'v'>>",
    # a suffix after the mangled name: LLVM's LTO uniquifier is dropped, a clone suffix kept
    "_RNvNtCs1234_7mycrate3foo3bar.llvm.1A2B": "mycrate::foo::bar",
    "_RNvNtCs1234_7mycrate3foo3bar.cold": "mycrate::foo::bar.cold",
}
LEGACY = {
    "_ZN4main3foo17h0123456789abcdefE": "main::foo",
    "_ZN4core3ptr85drop_in_place$LT$std..rt..lang_start$LT$$LP$$RP$$GT$..$u7b$$u7b$closure$u7d$$u7d$$GT$17h2b1a2c5e1f7b3c4dE":
        "core::ptr::drop_in_place<std::rt::lang_start<()>::{{closure}}>",
    "_ZN50_$LT$T$u20$as$u20$core..convert..Into$LT$U$GT$$GT$4into17h0123456789abcdefE":
        "<T as core::convert::Into<U>>::into",
    "_ZN4main13gr$uf6$$udf$e24_$ufc$n$uef$c$uf6$d$ue9$17hcd400e3c6e5811a6E": "main::größe::ünïcödé",
    "_ZN4main3foo17h0123456789abcdefE.llvm.99": "main::foo",
    "_ZN3foo3barE": "foo::bar",  # no hash: C++, through cxxfilt
}


@pytest.mark.parametrize("mangled", sorted(FIXTURES))
def test_v0_fixtures(mangled):
    assert demangle(mangled) == FIXTURES[mangled]


@pytest.mark.parametrize("mangled", sorted(LEGACY))
def test_legacy_fixtures(mangled):
    assert demangle(mangled) == LEGACY[mangled]


def test_malformed_and_hostile_v0_names_come_back_unchanged():
    nested = "_R" + "INv" * 5000 + "C3foo3bar" + "E" * 5000
    forward_backref = "_RNvB9_3foo"
    self_backref = "_RNvB_3foo"
    # each level's two backrefs re-print everything before them: output doubles per level
    exponential = "_RINvC1a1f" + "".join(f"TB{k}_B{k}_E" for k in ("", *(str(i) for i in range(1, 30)))) + "E"
    for name in (nested, forward_backref, self_backref, "_R", "_RC", "_RC99x", "_RNvC3foo", "_Rx", "_RNvCu0_3bar"):
        started = time.monotonic()
        assert demangle(name) == name
        assert time.monotonic() - started < 1.0
    started = time.monotonic()
    result = demangle(exponential)
    assert len(result) <= MAX_OUTPUT + len(exponential) and time.monotonic() - started < 1.0


def test_random_v0_strings_never_raise():
    rng = random.Random(2603)
    alphabet = "_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    for _ in range(3000):
        name = "_R" + "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 60)))
        assert isinstance(demangle(name), str)


@pytest.fixture(scope="module")
def rust_program(tmp_path_factory) -> str:
    if shutil.which("rustc") is None:
        pytest.skip("rustc is not installed")
    directory = tmp_path_factory.mktemp("rust")
    (directory / "main.rs").write_text(RUST_SOURCE)
    binary = directory / "main"
    subprocess.run(
        ["rustc", "-C", "symbol-mangling-version=v0", "-C", "opt-level=0", "-g", "-o", str(binary),
         str(directory / "main.rs")],
        check=True, capture_output=True, cwd=directory,
    )  # fmt: skip
    return str(binary)


def nm_pairs(path: str) -> list[tuple[str, str]]:
    """(mangled, ``nm -C`` demangled) for every symbol; ``nm`` and ``nm -C`` list in the same order."""
    raw = subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout.splitlines()
    readable = subprocess.run(["nm", "-C", path], capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(raw) == len(readable)
    return [(r.split(" ", 2)[-1], d.split(" ", 2)[-1]) for r, d in zip(raw, readable)]


def test_every_v0_symbol_of_a_rust_program_matches_nm(rust_program):
    pairs = [(m, d) for m, d in nm_pairs(rust_program) if m.startswith("_R") and "." not in m]
    assert len(pairs) > 300
    wrong = [(m, demangle(m), d) for m, d in pairs if demangle(m) != d]
    assert not wrong, "\n".join(f"{m}\n  nprof {ours}\n  nm    {theirs}" for m, ours, theirs in wrong[:5])
    names = {d for _, d in pairs}
    for expected in (
        "main::apply::<main::main::{closure#0}>",
        "<main::Sq<f64> as main::Shape>::area",
        "<main::Sq<u8>>::twice",
        "<main::Const<3, 'x', true, -5>>::get",
        "main::größe::ünïcödé",
        "main::takes::<for<'a> fn(&'a u8) -> u32>",
        "main::takes::<core::option::Option<&str>>",
        "main::takes::<&dyn for<'a> core::ops::function::Fn<(&'a u8,), Output = u8>>",
        "main::takes::<*const [u8; 4]>",
        "main::takes::<(i64, &mut [u8])>",
    ):
        assert expected in names, expected


def test_rust_dwarf_names_and_lines_match_addr2line(rust_program):
    symbols = load_symbols(ElfFile(rust_program))
    assert symbols is not None
    mangled = next(m for m, d in nm_pairs(rust_program) if d == "main::main" and m.startswith("_R"))
    every, calls = instructions(rust_program, mangled)
    assert calls
    resolver = DwarfResolver(ElfFile(rust_program), symbols)
    results = resolver.resolve(every)
    reference = addr2line(rust_program, every)
    problems = [
        f"0x{address:x}: {why}"
        for address, frames in zip(every, results)
        if (why := disagreement(frames or [], reference[address], None))
    ]
    assert not problems, "\n".join(problems[:10])
    assert {frames[0].name for frames in results if frames} == {"main::main"}
