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


@pytest.fixture(scope="module", params=["native", "python"])
def recorded(request, chain_fp, tmp_path_factory) -> str:
    """A C program's profile, and a Python program's running C code (its frames a function each, with the
    line the function is declared at: issue 44)."""
    out = str(tmp_path_factory.mktemp("viewer") / f"{request.param}.speedscope.json")
    if request.param == "native":
        argv, ready_at = [chain_fp], 1
    else:
        argv, ready_at = [sys.executable, os.path.join(TARGETS, "c_heavy.py"), "60"], 2
    with running_target(argv, ready_at=ready_at) as target:
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


def test_viewer_check_catches_a_broken_profile(viewer, recorded, tmp_path):
    """Negative control: a profile the viewer cannot load is reported as such."""
    with open(recorded) as f:
        doc = json.load(f)
    doc["profiles"][0]["samples"][0] = [len(doc["shared"]["frames"]) + 5]
    broken = tmp_path / "broken.speedscope.json"
    broken.write_text(json.dumps(doc))
    assert not load_in_viewer(str(broken), timeout_ms=8000).ok
