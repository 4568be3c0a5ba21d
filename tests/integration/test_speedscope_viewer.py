"""speedscope output is valid for the schema in the npm `speedscope` package and loads in the real viewer."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.support.speedscope_viewer import SCHEMA_PATH, load_in_viewer, viewer_available
from tests.support.targets import run_nprof, running_target
from tests.targets.python.interpreters import TARGETS

pytestmark = pytest.mark.chromium


@pytest.fixture(scope="module")
def viewer():
    why = viewer_available()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the viewer test: {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def threads_recorded(threads_fp, tmp_path_factory) -> str:
    """Three busy threads (and main, blocked in join): a profile of all threads, then one per thread."""
    out = str(tmp_path_factory.mktemp("viewer") / "threads.speedscope.json")
    with running_target([threads_fp]) as target:
        result = run_nprof("record", "--pid", str(target.pid), "-d", "1", "-o", out)
        assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="module", params=["native", "python"])
def recorded(request, threads_recorded, tmp_path_factory) -> str:
    """A C program's threads, and a Python program's running C code (its frames a function each, with the
    line the function is declared at: issue 44)."""
    if request.param == "native":
        return threads_recorded
    out = str(tmp_path_factory.mktemp("viewer") / "python.speedscope.json")
    with running_target([sys.executable, os.path.join(TARGETS, "c_heavy.py"), "60"], ready_at=2) as target:
        result = run_nprof("record", "--pid", str(target.pid), "-d", "1", "-o", out)
        assert result.returncode == 0, result.stderr
    return out


def test_schema(viewer, recorded):
    import jsonschema

    with open(SCHEMA_PATH) as f:
        schema = json.load(f)
    with open(recorded) as f:
        doc = json.load(f)
    jsonschema.validate(doc, schema)
    frames = len(doc["shared"]["frames"])
    for profile in doc["profiles"]:
        # the schema does not check frame indices; the viewer fails on a bad one
        assert all(0 <= i < frames for sample in profile["samples"] for i in sample)
        assert len(profile["samples"]) == len(profile["weights"])


def test_loads_in_speedscope(viewer, recorded, tmp_path):
    with open(recorded) as f:
        name = json.load(f)["name"]
    result = load_in_viewer(recorded, screenshot=str(tmp_path / "viewer.png"))
    assert result.title == f"{name} - speedscope", result
    assert result.dialogs == []
    assert "Something went wrong" not in result.body
    assert "main" in result.body or os.path.getsize(tmp_path / "viewer.png") > 0


def test_the_viewer_opens_on_all_threads_together(viewer, threads_recorded):
    """What a user sees first is every thread's samples together, each stack with the sum of the threads'
    weights, and the threads' own profiles after it in the viewer's list (issue 44: a threaded server's
    603 profiles opened on its main thread, with 2.9% of the samples)."""
    with open(threads_recorded) as f:
        doc = json.load(f)
    together, *threads = doc["profiles"]
    assert doc["activeProfileIndex"] == 0 and together["name"] == f"all threads ({len(threads)})"
    assert {p["name"].split(" (")[0] for p in threads} == {"alpha", "beta", "gamma"}, [p["name"] for p in threads]
    assert sum(together["weights"]) == pytest.approx(sum(w for p in threads for w in p["weights"]))
    assert together["endValue"] == pytest.approx(sum(p["endValue"] for p in threads))
    # each thread's stacks are in it, weighed as the thread's (no other thread runs its chain)
    frames = [f["name"] for f in doc["shared"]["frames"]]
    merged = {tuple(frames[i] for i in s): w for s, w in zip(together["samples"], together["weights"])}
    for p in threads:
        for sample, weight in zip(p["samples"], p["weights"]):
            assert merged[tuple(frames[i] for i in sample)] == pytest.approx(weight)
    result = load_in_viewer(threads_recorded)
    assert result.ok, result
    assert f"all threads ({len(threads)}) (1/{len(threads) + 1})" in result.body, result.body


def test_viewer_check_catches_a_broken_profile(viewer, threads_recorded, tmp_path):
    """Negative control: a profile the viewer cannot load is reported as such (once: it waits for the
    viewer's timeout, 8 s)."""
    with open(threads_recorded) as f:
        doc = json.load(f)
    doc["profiles"][0]["samples"][0] = [len(doc["shared"]["frames"]) + 5]
    broken = tmp_path / "broken.speedscope.json"
    broken.write_text(json.dumps(doc))
    assert not load_in_viewer(str(broken), timeout_ms=8000).ok
