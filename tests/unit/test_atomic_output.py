"""Output files written from pieces (``atomic.write_output`` with an iterable): as atomic as from bytes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from profiler.atomic import write_output


def test_an_output_written_in_pieces_replaces_the_file_only_once_whole(tmp_path):
    out = tmp_path / "profile.folded"
    out.write_bytes(b"old\n")
    write_output(str(out), iter([b"a 1\n", bytearray(b"b 2\n")]))
    assert out.read_bytes() == b"a 1\nb 2\n"

    def failing() -> Iterator[bytes]:
        yield b"c 3\n"
        raise RuntimeError("the exporter failed half-way")

    with pytest.raises(RuntimeError):
        write_output(str(out), failing())
    assert out.read_bytes() == b"a 1\nb 2\n"  # the last whole file, and no temporary file beside it
    assert [p.name for p in tmp_path.iterdir()] == ["profile.folded"]
