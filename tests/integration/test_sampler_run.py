"""The sampler's loop on a live target, driven directly rather than through the command line: what it
promises about its own timing."""

from __future__ import annotations

import time

from profiler.config import SamplerConfig, SamplingPriority
from profiler.profile.session import Session, SessionMeta
from profiler.sampling.sampler import EndReason, Sampler
from tests.support.targets import assert_running_free, running_target

DURATION = 0.4  #: seconds of recording asked for (-d)
RATE = 100.0


def test_the_duration_counts_from_the_recordings_start_not_from_the_attach(chain_fp):
    """A set-up that outlasts -d (next to a thousand busy threads on two CPUs the attach alone took longer
    than a second) still gets the recording it asked for: before, the loop ended at once, with no tick."""
    with running_target([chain_fp]) as target:
        session = Session(SessionMeta(pid=target.pid, command=[chain_fp]))
        config = SamplerConfig(rate=RATE, duration=DURATION, priority=SamplingPriority.NORMAL)
        sampler = Sampler(session, config)
        try:
            sampler.add_process(target.pid)
            time.sleep(2 * DURATION)  # a slow set-up: its length is the point, nothing waits on it
            before = time.time()
            ticks = sum(1 for _tick in sampler.run())
        finally:
            sampler.close()
        assert sampler.end_reason is EndReason.DURATION
        assert ticks >= 0.5 * DURATION * RATE, ticks  # 40 due; a loaded machine runs late, not never
        assert 0.8 * DURATION <= session.meta.duration < DURATION + 1.0  # (to the last tick due)
        assert session.meta.start_time >= before
        assert session.total_samples > 0
        assert_running_free(target.pid)
