"""ThreadAlarm's bookkeeping of when it fires next (the tracer skips re-arming when it already will)."""

from __future__ import annotations

from profiler.target.alarm import ThreadAlarm


def test_fires_within_follows_the_armed_schedule():
    alarm = ThreadAlarm()
    try:
        alarm.arm(60.0, 0.001)
        assert not alarm.fires_within(1.0), "first expiry is a minute away"
        assert alarm.fires_within(120.0)
        alarm.arm(0.0, 0.001)  # fired already (or about to): from now on every millisecond
        assert alarm.fires_within(0.01)
        alarm.arm(0.0, 0.0)  # one shot, no repetition: nothing bounds a later wait
        assert not alarm.fires_within(10.0)
        alarm.disarm()
        assert not alarm.fires_within(10.0)
    finally:
        alarm.close()
