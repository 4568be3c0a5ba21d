"""When the unwinder's module lookup reads the target's maps again (``AddressSpace.find``): at once for a
pc that is code, rate-limited for one that may be data. The maps are fakes; no process is read."""

from __future__ import annotations

from profiler.binary.objfile import ObjectFileCache
from profiler.target.maps import Mapping, MappingIndex
from profiler.unwind.address_space import RECHECK_INTERVAL, AddressSpace

FIRST = Mapping(0x10000, 0x11000, "r-xp", 0, 0, "")  # anonymous code (a JIT's): no file is opened
LOADED = Mapping(0x20000, 0x21000, "r-xp", 0, 0, "")  # mapped after the first read of the maps


class FakeProcess:
    """A process whose maps are whatever the test says; counts how often they are read."""

    def __init__(self) -> None:
        self.mappings = [FIRST]
        self.reads = 0

    def refresh_maps(self) -> MappingIndex:
        self.reads += 1
        return MappingIndex(list(self.mappings))

    def code_map_lines(self) -> bytes:
        return repr([m for m in self.mappings if m.executable]).encode()


def space_after_a_load() -> tuple[AddressSpace, FakeProcess]:
    process = FakeProcess()
    space = AddressSpace(process, ObjectFileCache())  # type: ignore[arg-type]
    process.mappings.append(LOADED)
    return space, process


def test_a_code_pc_in_a_new_mapping_reads_the_maps_at_once() -> None:
    space, process = space_after_a_load()
    entry = space.find(0x20010, code=True)
    assert entry is not None and entry.start == LOADED.start
    assert process.reads == 2


def test_a_pc_that_may_be_data_waits_for_the_refresh_interval() -> None:
    space, process = space_after_a_load()
    assert space.find(0x20010) is None  # just read: a frame-pointer walk's value does not read them again
    assert process.reads == 1


def test_a_code_pc_outside_every_mapping_reads_the_maps_once_per_page() -> None:
    space, process = space_after_a_load()
    assert space.find(0x30010, code=True) is None
    assert space.find(0x30FF0, code=True) is None  # the same page: no second read
    assert process.reads == 2
    assert space.find(0x31000, code=True) is None  # the next page is another question
    assert process.reads == 3


def test_known_pcs_never_read_the_maps() -> None:
    space, process = space_after_a_load()
    for _ in range(3):
        assert space.find(0x10010, code=True) is not None
        assert space.find(0x10020) is not None
    assert process.reads == 1


def test_a_library_swapped_at_the_same_addresses_is_seen_at_the_next_check() -> None:
    """dlclose, then dlopen of another library mapped where the first was: no pc misses, so only the
    periodic check of the code mapped sees it; a check that finds the same code mapped reads nothing."""
    process = FakeProcess()
    space = AddressSpace(process, ObjectFileCache())  # type: ignore[arg-type]
    first = space.find(0x10010, code=True)
    now = space._last_check + 1.0
    space.recheck(now)
    assert process.reads == 1, "nothing changed: the maps are not read"
    process.mappings = [Mapping(0x10000, 0x11000, "r-xp", 0, 0, "[anon:other]")]
    space.recheck(now + RECHECK_INTERVAL / 2)
    assert process.reads == 1, "checked at most every RECHECK_INTERVAL"
    space.recheck(now + 2 * RECHECK_INTERVAL)
    second = space.find(0x10010, code=True)
    assert process.reads == 2 and first is not None and second is not None
    assert second.module.id != first.module.id


def test_the_generation_changes_with_the_code_mapped_not_with_each_read() -> None:
    """What the unwinder keeps per pc and per walk holds within a generation: a read of the maps that finds
    the same code mapped keeps it; a library loaded, or unloaded, starts a new one."""
    space, process = space_after_a_load()
    generation = space.generation
    process.mappings = [FIRST]  # the load undone before anyone saw it
    space.refresh()
    assert space.generation == generation
    process.mappings = [FIRST, LOADED]
    space.refresh()
    assert space.generation == generation + 1
    process.mappings = [LOADED]
    space.refresh()
    assert space.generation == generation + 2
