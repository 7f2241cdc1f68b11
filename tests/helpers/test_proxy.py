"""The fault proxy (tests/helpers/proxy.py) on its own: the delay, the cap, the splits and the
faults it applies are what is asked, measured on a plain TCP server of this test's. Bounds are
strict on the side load cannot help (nothing arrives sooner or faster than asked) and loose on
the side a loaded machine can push (later)."""

from __future__ import annotations

import socket
import socketserver
import statistics
import threading
import time

import pytest

from tests.helpers.proxy import FaultProxy, Faults

# serial: the delays, the jitter and the cap are timed against what was asked.
pytestmark = [pytest.mark.chaos, pytest.mark.serial]
PAYLOAD = bytes(range(256)) * 400  # 102,400 bytes


class _Handler(socketserver.BaseRequestHandler):
    """`echo` echoes; `send N` sends N bytes of PAYLOAD then closes."""

    def handle(self) -> None:
        while line := self.request.recv(64):
            if line.startswith(b"send "):
                self.request.sendall(PAYLOAD[: int(line[5:])])
                return
            self.request.sendall(line)


@pytest.fixture(scope="module")
def server():
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address
    srv.shutdown()
    srv.server_close()


def connect(proxy: FaultProxy) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def receive(s: socket.socket, n: int) -> tuple[list[bytes], list[float]]:
    """Reads until n bytes came: each read's bytes and the time it returned."""
    reads, times, got = [], [], 0
    while got < n:
        data = s.recv(65536)
        if not data:
            break
        reads.append(data)
        times.append(time.perf_counter())
        got += len(data)
    return reads, times


def rtt(s: socket.socket) -> float:
    t = time.perf_counter()
    s.sendall(b"ping")
    assert s.recv(64) == b"ping"
    return time.perf_counter() - t


def test_the_delay_each_way_is_what_is_asked(server):
    with FaultProxy(server) as proxy:
        s = connect(proxy)
        direct = statistics.median(rtt(s) for _ in range(5))
        proxy.up.latency_s = proxy.down.latency_s = 0.1  # changed on an open connection
        delayed = [rtt(s) for _ in range(5)]
        s.close()
    assert min(delayed) >= 0.2  # never sooner than both delays
    assert statistics.median(delayed) - direct == pytest.approx(0.2, abs=0.05)


def test_jitter_stays_within_its_range_and_keeps_order(server):
    with FaultProxy(server, seed=3) as proxy:
        proxy.down.latency_s, proxy.down.jitter_s = 0.1, 0.05
        s = connect(proxy)
        times = [rtt(s) for _ in range(12)]
        s.close()
    assert min(times) >= 0.05 and max(times) < 0.15 + 0.1
    assert statistics.pstdev(times) > 0.01  # it does vary


def test_the_cap_is_the_rate_asked_and_the_counters_count(server):
    with FaultProxy(server) as proxy:
        proxy.down.rate = 50_000
        s = connect(proxy)
        s.sendall(b"send 102400")
        t0 = time.perf_counter()
        reads, times = receive(s, len(PAYLOAD))
        s.close()
        assert b"".join(reads) == PAYLOAD
        assert proxy.bytes == {"up": len(b"send 102400"), "down": len(PAYLOAD)} and proxy.connections == 1
    elapsed = times[-1] - t0
    assert elapsed >= (len(PAYLOAD) - 50_000 * 0.02) / 50_000  # the first 20 ms quantum may go at once
    assert elapsed == pytest.approx(len(PAYLOAD) / 50_000, rel=0.15)


def test_a_byte_per_write_reaches_the_reader_a_byte_per_read(server):
    with FaultProxy(server) as proxy:
        proxy.down.split, proxy.down.split_gap_s = 1, 0.02
        s = connect(proxy)
        s.sendall(b"send 40")
        reads, _ = receive(s, 40)
        s.close()
    assert b"".join(reads) == PAYLOAD[:40]
    assert sum(len(r) == 1 for r in reads) >= 36  # a reader descheduled past a gap may take two at once


def test_cuts_break_the_stream_at_the_offsets_asked(server):
    with FaultProxy(server) as proxy:
        proxy.down.cut_at, proxy.down.split_gap_s = frozenset({5, 17}), 0.1
        s = connect(proxy)
        s.sendall(b"send 30")
        reads, _ = receive(s, 30)
        s.close()
    assert [len(r) for r in reads] == [5, 12, 13]


def test_reset_after_n_bytes_sends_those_then_a_reset(server):
    with FaultProxy(server) as proxy:
        proxy.faults = Faults(reset_after=1000)
        s = connect(proxy)
        s.sendall(b"send 5000")
        got = b""
        with pytest.raises(ConnectionResetError):
            while data := s.recv(65536):
                got += data
        s.close()
    assert got == PAYLOAD[:1000]


def test_hold_after_n_bytes_is_a_half_open_connection_until_released(server):
    with FaultProxy(server) as proxy:
        proxy.faults = Faults(hold_after=300)
        s = connect(proxy)
        s.sendall(b"send 1000")
        reads, _ = receive(s, 300)
        assert b"".join(reads) == PAYLOAD[:300]
        s.settimeout(1.0)
        with pytest.raises(TimeoutError):  # silent, and open: a closed socket would read b""
            s.recv(65536)
        assert len(proxy.links) == 1
        proxy.release()
        s.settimeout(10)
        reads, _ = receive(s, 700)
        assert b"".join(reads) == PAYLOAD[300:1000]
        s.close()


def test_arm_gives_faults_to_the_connections_that_carry_the_marker(server):
    with FaultProxy(server) as proxy:
        quiet = connect(proxy)  # opened first, carries no marker: no fault
        proxy.arm([Faults(hold_after=10), Faults(hold_after=20)], marker=b"send ")
        assert rtt(quiet) < 1.0
        held = []
        for _ in range(2):
            s = connect(proxy)
            s.sendall(b"send 100")
            held.append(s)
        got = [len(b"".join(receive(s, n)[0])) for s, n in zip(held, (10, 20), strict=True)]
        quiet.sendall(b"send 100")
        assert len(b"".join(receive(quiet, 100)[0])) == 100
        for s in (quiet, *held):
            s.close()
    assert got == [10, 20]


def test_a_slow_close_reaches_the_reader_late(server):
    with FaultProxy(server) as proxy:
        proxy.faults = Faults(close_delay_s=0.5)
        s = connect(proxy)
        s.sendall(b"send 10")
        receive(s, 10)
        t = time.perf_counter()
        assert s.recv(64) == b""
        waited = time.perf_counter() - t
        s.close()
    assert waited >= 0.45
