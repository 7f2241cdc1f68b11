"""attach/listen.py's Merge: several processes' events (a script's subprocesses, a torchrun's ranks,
notebooks) as the one run at a time the panes take."""

import socket
import threading
import time
from collections import deque

from monitors.codec import to_json
from monitors.events import EngineError, EngineReady, Levers, RunFinished, RunStarted, Step
from tests.helpers.synthetic import session_events, timed_run
from tui_app.attach import listen
from tui_app.attach.listen import Listener, Merge

READY = next(ev for ev in session_events(1) if isinstance(ev, EngineReady))


def merged(*sends) -> tuple[list, Merge]:
    out: deque = deque()
    merge = Merge(out)
    merge.pid.update({1: 101, 2: 202})
    for conn, events in sends:
        for ev in events:
            merge.take(conn, ev)
    return list(out), merge


def shown(events) -> list[tuple[str, int]]:
    return [(type(ev).__name__, ev.run_id) for ev in events if isinstance(ev, (RunStarted, RunFinished))]


def test_processes_one_after_another_are_numbered_on_and_each_told_its_model():
    run = timed_run(1, Levers(), 50, tokens=3)
    out, merge = merged((1, [READY, *run]), (2, [READY, *run]), (1, timed_run(2, Levers(), 50, tokens=3)))
    assert shown(out) == [("RunStarted", 1), ("RunFinished", 1), ("RunStarted", 2), ("RunFinished", 2), ("RunStarted", 3), ("RunFinished", 3)]
    assert [s.run_id for s in out if isinstance(s, Step)] == [1] * 3 + [2] * 3 + [3] * 3
    # Each process's model before its run, once the panes showed another's; the memory pane follows it.
    assert [type(ev).__name__ for ev in out].count("EngineReady") == 3 and merge.peer_pid == 101


def test_a_process_that_numbers_on_keeps_its_numbers():
    """A notebook's listener started again mid-session is sent the notebook's call 5 first: it stays run 5."""
    out, _ = merged((1, [READY, *timed_run(5, Levers(), 50, tokens=2), *timed_run(6, Levers(), 50, tokens=2)]))
    assert [n for kind, n in shown(out) if kind == "RunStarted"] == [5, 6]


def test_a_run_overlapping_the_shown_one_is_said_once_and_left_out():
    a, b = timed_run(1, Levers(), 50, tokens=4), timed_run(1, Levers(), 50, tokens=4)
    # Interleaved as two ranks send them: a's run opens first.
    out, merge = merged((1, [READY, a[0]]), (2, [READY, b[0]]), (1, a[1:3]), (2, b[1:]), (1, a[3:]), (2, timed_run(2, Levers(), 50, tokens=4)))
    assert shown(out) == [("RunStarted", 1), ("RunFinished", 1), ("RunStarted", 2), ("RunFinished", 2)]
    (error,) = [ev for ev in out if isinstance(ev, EngineError)]
    assert "pid 202's generation, at the same time as pid 101's, is not shown" in error.message
    assert len([s for s in out if isinstance(s, Step)]) == 8 and merge.peer_pid == 202


def test_a_process_gone_mid_run_frees_the_panes():
    a = timed_run(1, Levers(), 50, tokens=4)
    out: deque = deque()
    merge = Merge(out)
    for ev in a[:3]:
        merge.take(1, ev)
    merge.closed(1)
    for ev in timed_run(1, Levers(), 50, tokens=2):
        merge.take(2, ev)
    assert shown(out) == [("RunStarted", 1), ("RunStarted", 2), ("RunFinished", 2)]
    # Nothing of the gone process is kept: a listener outlives any number of them.
    assert not [key for key in merge.ids if key[0] == 1] and 1 not in merge.ready


def test_a_connection_accepted_but_not_yet_read_counts_as_reading(tmp_path, monkeypatch):
    """A script's quiet time ends when no process is connected or waiting to be: a connection the
    listener has taken off the backlog but whose reader has not started is neither, unless the two
    are one step. The accepting thread is held there (its peer's pid read slowly), as a loaded
    machine may hold it; the process's event, sent before it closed, is read."""
    inside, real = threading.Event(), listen._peer_pid

    def slow_peer_pid(conn):
        inside.set()
        time.sleep(0.5)
        return real(conn)

    monkeypatch.setattr(listen, "_peer_pid", slow_peer_pid)
    listener = Listener(tmp_path / "events.sock")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as process:
            process.connect(str(listener.path))
            process.sendall((to_json(READY) + "\n").encode())
        assert inside.wait(10)
        # No longer reading only once the reader has read the line and the end of the connection
        end = time.monotonic() + 10
        while listener.reading() and time.monotonic() < end:
            time.sleep(0.01)
        assert [type(ev) for ev in listener.drain()] == [EngineReady]
    finally:
        listener.close()
