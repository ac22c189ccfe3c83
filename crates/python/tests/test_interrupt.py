"""Ctrl-C stops a `next()` that would otherwise wait forever."""

import os
import signal
import threading

import pytest

import flumen
from flumen import col


@pytest.mark.skipif(os.name != "posix", reason="signals are Unix's")
def test_ctrl_c_interrupts_a_long_next():
    # A filter that keeps nothing of an (almost) endless range: next() never returns on its own.
    it = iter(flumen.Dataset.range(10**18).filter(col("value") < 0))
    started = threading.Event()
    done = threading.Event()

    def interrupt():
        started.wait()
        os.kill(os.getpid(), signal.SIGINT)
        # Had the signal not stopped next(), end the test with a failure rather than a hang.
        if not done.wait(30):
            it.cancel()

    thread = threading.Thread(target=interrupt)
    thread.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            started.set()
            next(it)
    finally:
        done.set()
        thread.join()
    # The interrupted iterator stays cancelled; a new one works.
    with pytest.raises(flumen.CancelledError):
        next(it)
    assert next(iter(flumen.Dataset.range(3).batch(3)))["value"].tolist() == [0, 1, 2]


@pytest.mark.skipif(os.name != "posix", reason="signals are Unix's")
def test_a_python_sigint_handler_still_runs():
    calls = []
    previous = signal.signal(signal.SIGINT, lambda *_: calls.append(1))
    try:
        assert next(iter(flumen.Dataset.range(2).batch(2)))["value"].tolist() == [0, 1]
        # Raised on this thread: its handler has run before the next line. A later next()
        # is not cancelled by it, however late the watcher wakes.
        signal.raise_signal(signal.SIGINT)
        assert next(iter(flumen.Dataset.range(2).batch(2)))["value"].tolist() == [0, 1]
    finally:
        signal.signal(signal.SIGINT, previous)
    assert calls == [1]
