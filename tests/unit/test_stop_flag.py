"""``nprof record``'s answer to SIGINT and SIGTERM (``StopFlag``): the first stops the recording, the second
only says so, the third abandons it. Signals are sent to this process; Python runs the handler before
``os.kill`` returns."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import pytest

from profiler.cli.recording import _why_it_ended
from profiler.cli.stop import SetupInterrupted, StopFlag
from profiler.sampling.sampler import EndReason


def test_the_first_stops_the_second_is_answered_the_third_abandons(capsys):
    before = signal.getsignal(signal.SIGINT)
    with StopFlag() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop() and stop.signal == signal.SIGINT
        assert capsys.readouterr().err == ""
        os.kill(os.getpid(), signal.SIGINT)
        assert "SIGINT again" in capsys.readouterr().err
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before


def test_sigterm_then_sigint_count_together(capsys):
    with StopFlag() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.signal == signal.SIGTERM  # the reason the recording ended
        assert "SIGINT again" in capsys.readouterr().err


def test_a_signal_in_the_set_up_is_raised_at_its_next_step():
    with StopFlag() as stop:
        stop.raise_if_stopped()  # nothing came: the set-up goes on
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(SetupInterrupted) as raised:
            stop.raise_if_stopped()
    assert raised.value.signal == signal.SIGTERM
    assert str(raised.value) == "interrupted by SIGTERM while starting; nothing was recorded"


def test_a_flag_told_the_command_is_done_leaves_the_signals_ignored():
    """No moment between the flag's handler and the way out has Python's handler, which would raise
    KeyboardInterrupt for the second signal of a pair."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with StopFlag() as stop:
            os.kill(os.getpid(), signal.SIGINT)
            stop.ignore_on_exit()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)  # ignored: no KeyboardInterrupt
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_signal_ignored_before_is_answered_and_remembered_as_ignored():
    """A script's background job starts with SIGINT ignored; ``kill -INT`` still ends its recording."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StopFlag() as stop:
            assert stop.ignored == {signal.SIGINT}
            os.kill(os.getpid(), signal.SIGINT)
            assert stop.signal == signal.SIGINT
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize(
    "end, why",
    [
        (EndReason.EXITED, "target exited (status 0)"),  # the signal came later: while names were resolved
        (EndReason.DURATION, "recorded 2s"),
        (EndReason.STOPPED, "stopped by SIGINT"),
    ],
)
def test_the_summary_says_what_ended_the_sampling_not_a_later_signal(end, why):
    stop = StopFlag()
    stop.signal = signal.SIGINT
    meta = SimpleNamespace(pid=7, exit_status={7: 0})
    processes = SimpleNamespace(released={})
    sampler = SimpleNamespace(end_reason=end, session=SimpleNamespace(meta=meta), processes=processes)
    assert _why_it_ended(sampler, stop, SimpleNamespace(duration=2.0)) == why
