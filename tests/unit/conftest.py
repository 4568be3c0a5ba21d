"""Fixtures of the unit tests."""

from __future__ import annotations

import pytest

from tests.support.fake_cpython import FakeTarget


@pytest.fixture
def target(request: pytest.FixtureRequest) -> FakeTarget:
    """A fake CPython target of the layout given (indirect parametrization); the readers and sessions the
    helpers of ``tests/support/fake_cpython.py`` make read it through its ``readv``."""
    return FakeTarget(request.param)
