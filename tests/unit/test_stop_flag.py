"""``nprof record``'s answer to SIGINT and SIGTERM (``StopFlag``): the first stops the recording, the second
only says so, the third abandons it. Signals are sent to this process; Python runs the handler before
``os.kill`` returns."""

from __future__ import annotations

import os
import signal

import pytest

from profiler.cli.record import StopFlag


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
