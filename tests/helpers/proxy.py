"""A TCP proxy of the tests' own that stands in for a bad network between a client and a real
server (it is not a stand-in for the server: the server behind it is real).

    with FaultProxy(("127.0.0.1", server_port)) as proxy:   # started; stopped on leaving
        proxy.down.latency_s = 0.1          # server → client: 100 ms added to every byte
        proxy.up.rate = 32_000              # client → server: at most 32,000 bytes/s
        client.connect(proxy.url)           # or ("127.0.0.1", proxy.port) for any TCP client
        ...
        proxy.bytes["down"]                 # bytes passed so far, server → client

Every setting can change while connections are open (each chunk reads them as it passes):

- per direction (`proxy.up`, `proxy.down`, both `Direction`): `latency_s` and `jitter_s` (each
  chunk is held latency ± jitter, uniformly, never overtaking the one before: TCP delivers in
  order), `rate` (a cap in bytes/s, smooth to 20 ms), `split` (at most this many bytes per write,
  `split_gap_s` apart, so the reader gets them as separate reads: 1 is a byte per write) and
  `cut_at` (offsets in each connection's stream where a write is broken, with the same gap);
- faults of a connection, counted in bytes passed server → client (`proxy.faults`, a `Faults`,
  for every new connection): `reset_after` (then both sides get a TCP reset), `hold_after` (then
  nothing passes either way and both sockets stay open: a half-open connection), `close_delay_s`
  (a side's close reaches the other this much later: a slow close);
- `proxy.hold()` / `proxy.release()`: stop and restart forwarding on every connection now;
- `proxy.tap = {"up": [], "down": []}`: every read from then on is appended to its direction's
  list as (arrival on the perf counter in ns, bytes), the moment the proxy has it: a clock of the
  raw stream that owes nothing to the client behind it;
- `proxy.arm([Faults, ...], marker=b"POST ")`: the next connections to carry `marker` client →
  server take these faults in turn, counted from that moment (a pooled keep-alive connection is
  armed when it carries the request, not when it was opened).

It runs its own event loop in a thread, so a client in any loop, thread or process can use it,
and its timing never waits on the client's.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace

READ = 16 * 1024
QUANTUM_S = 0.02  # a capped direction writes at most this long's worth of bytes at once


@dataclass
class Direction:
    latency_s: float = 0.0
    jitter_s: float = 0.0
    rate: float | None = None  # bytes/s
    split: int | None = None
    split_gap_s: float = 0.002
    cut_at: frozenset = frozenset()


@dataclass
class Faults:
    reset_after: int | None = None
    hold_after: int | None = None
    close_delay_s: float = 0.0


@dataclass
class _Link:
    index: int
    faults: Faults
    writers: list
    passed: dict = field(default_factory=lambda: {"up": 0, "down": 0})
    armed_at: int = 0  # bytes passed down when its faults were armed
    held: bool = False
    queued: dict = field(default_factory=lambda: {"up": 0, "down": 0})


class FaultProxy:
    def __init__(self, target: tuple[str, int], host: str = "127.0.0.1", port: int = 0, seed: int = 0):
        self.target = target
        self.host = host
        self.port = port
        self.up = Direction()
        self.down = Direction()
        self.faults = Faults()
        self.bytes = {"up": 0, "down": 0}
        self.connections = 0  # accepted so far
        self.tap: dict[str, list] | None = None
        self.links: list[_Link] = []  # open now
        self._rng = random.Random(seed)
        self._held = False
        self._plan: deque = deque()
        self._marker = b""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._wake: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # ------------------------------------------------------------ control (any thread)
    def start(self) -> FaultProxy:
        started = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._open())
            started.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="fault-proxy", daemon=True)
        self._thread.start()
        started.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(10)
        self._loop.close()
        self._loop = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def hold(self) -> None:
        self._held = True

    def release(self) -> None:
        """Forwarding resumes everywhere, on connections held by `hold_after` too."""
        self._held = False
        for link in list(self.links):
            link.held = False
        self._poke()

    def arm(self, plan: list[Faults], marker: bytes = b"POST ") -> None:
        self._marker = marker
        self._plan = deque(plan)

    def reset(self) -> None:
        """Every setting and fault back to none (open connections keep their own faults)."""
        self.up, self.down, self.faults = Direction(), Direction(), Faults()
        self._plan.clear()
        self.release()

    # ------------------------------------------------------------ the loop's side
    def _poke(self) -> None:
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def _open(self) -> None:
        self._wake = asyncio.Event()
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._tasks: set[asyncio.Task] = set()

    async def _close(self) -> None:
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for link in list(self.links):
            for w in link.writers:
                w.transport.abort()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            try:
                server_r, server_w = await asyncio.open_connection(*self.target)
            except OSError:
                client_w.transport.abort()
                return
            for w in (client_w, server_w):
                w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(self.connections, replace(self.faults), [client_w, server_w])
            self.connections += 1
            self.links.append(link)
            try:
                await asyncio.gather(self._pump(link, "up", client_r, server_w), self._pump(link, "down", server_r, client_w))
            except asyncio.CancelledError:  # stop(): ended here, not reported as a failure by asyncio's stream callback
                pass
            finally:
                self.links.remove(link)
                for w in link.writers:
                    w.transport.abort()
        finally:
            self._tasks.discard(task)

    async def _pump(self, link: _Link, way: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read as the bytes come, stamp each chunk with the moment it may leave, and write them
        out through the direction's cap, splits and the connection's faults."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        room = asyncio.Event()
        room.set()

        async def read() -> None:
            due = 0.0
            while True:
                try:
                    data = await reader.read(READ)
                except (ConnectionError, OSError):
                    data = b""
                if data and self.tap is not None:
                    self.tap[way].append((time.perf_counter_ns(), data))
                d = getattr(self, way)
                if data and way == "up" and self._marker and self._plan and self._marker in data:
                    link.faults, link.armed_at = self._plan.popleft(), link.passed["down"]
                delay = max(0.0, d.latency_s + self._rng.uniform(-d.jitter_s, d.jitter_s)) if d.latency_s or d.jitter_s else 0.0
                due = max(due, loop.time() + delay)
                await queue.put((due, data))
                if not data:
                    return
                link.queued[way] += len(data)
                while link.queued[way] > _buffer(d):
                    room.clear()
                    await room.wait()

        reading = asyncio.create_task(read())
        next_free = 0.0
        try:
            while True:
                due, data = await queue.get()
                await asyncio.sleep(max(0.0, due - loop.time()))
                if not data:
                    await asyncio.sleep(link.faults.close_delay_s)
                    await self._gate(link)
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                link.queued[way] -= len(data)
                if link.queued[way] <= _buffer(getattr(self, way)):
                    room.set()
                view = memoryview(data)
                while view:
                    await self._gate(link)
                    d = getattr(self, way)
                    piece = self._piece(link, way, d, len(view))
                    if d.rate:
                        next_free = max(next_free, loop.time())
                        await asyncio.sleep(max(0.0, next_free - loop.time()))
                        next_free += piece / d.rate
                    link.passed[way] += piece  # before the write: a reader in another thread may see the bytes at once
                    self.bytes[way] += piece
                    writer.write(view[:piece])
                    await writer.drain()
                    view = view[piece:]
                    if way == "down" and self._fault(link):
                        return
                    if view and (d.split or d.cut_at):
                        await asyncio.sleep(d.split_gap_s)
        except (ConnectionError, OSError):
            return
        finally:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)

    def _piece(self, link: _Link, way: str, d: Direction, left: int) -> int:
        """How many of the next `left` bytes go in one write."""
        n = left
        if d.rate:
            n = min(n, max(1, int(d.rate * QUANTUM_S)))
        if d.split:
            n = min(n, d.split)
        at = link.passed[way]
        cuts = [c - at for c in d.cut_at if at < c < at + n]
        if cuts:
            n = min(cuts)
        if way == "down":
            for limit, zero in ((link.faults.reset_after, True), (link.faults.hold_after, False)):
                # A reset at 0 lets not one byte pass; a hold resumes where it held, so it writes on.
                if limit is not None and (link.armed_at + limit > at or (zero and link.armed_at + limit == at)):
                    n = min(n, link.armed_at + limit - at)
        return n

    def _fault(self, link: _Link) -> bool:
        """After a write down: reset the connection (True: its pumps end) or hold it."""
        f, sent = link.faults, link.passed["down"] - link.armed_at
        if f.reset_after is not None and sent >= f.reset_after:
            for w in link.writers:
                sock = w.get_extra_info("socket")
                if sock is not None:  # linger 0: close sends RST, not FIN
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                w.transport.abort()
            return True
        if f.hold_after is not None and sent >= f.hold_after:
            link.held = True
        return False

    async def _gate(self, link: _Link) -> None:
        """Nothing passes while held: the bytes wait, the sockets stay open."""
        assert self._wake is not None
        while self._held or link.held:
            self._wake.clear()
            await self._wake.wait()


def _buffer(d: Direction) -> float:
    """Bytes a direction holds before it stops reading, like a router's buffer: a capped link
    pushes back on its sender after a quarter of a second's worth (and its latency's)."""
    return max(READ, (d.rate or 4 * 2**20) * (d.latency_s + 0.25))


def tapped_chunks(tap: dict) -> tuple[int, list[tuple[int, str, str, int | None]]]:
    """(when the request reached the proxy, [(arrival, field, text, the server's running count of
    generated tokens at that event, where it streams one)] of each delta text a completion stream
    brought, `content` or a server's reasoning field), read from a tap's bytes as they passed: an
    SSE event is whole at the read that ends it."""
    posted = next(t for t, data in tap["up"] if b"POST " in data)
    buf, chunks = b"", []
    for t, data in tap["down"]:
        buf += data
        *events, buf = buf.split(b"\n\n")
        for event in events:
            line = event.split(b"data: ", 1)[-1]
            if line.startswith(b"{"):
                obj = json.loads(line)
                delta = ((obj.get("choices") or [{}])[0]).get("delta") or {}
                running = (obj.get("usage") or {}).get("completion_tokens")
                chunks += [(t, key, text, running) for key, text in delta.items() if key in ("reasoning", "reasoning_content", "content") and text]
    return posted, chunks


async def tapped_run(port: int, session, request, levers: dict | None = None) -> tuple:
    """One run of an attached client (its `levers` set first) through a proxy to 127.0.0.1:`port`
    that taps the run's bytes: (the run's end, when the request reached the proxy, [(arrival,
    field, text, running count)] as tapped_chunks reads them)."""
    from tui_app.attach.client import AttachConfig, ServerClient

    with FaultProxy(("127.0.0.1", port)) as proxy:
        client = ServerClient(AttachConfig(url=proxy.url), session.feed)
        await client.connect()
        for name, value in (levers or {}).items():
            client.set_lever(name, value)
        proxy.tap = {"up": [], "down": []}
        try:
            fin = await client.run(request)
        finally:
            await client.aclose()
    return (fin, *tapped_chunks(proxy.tap))


# A client's TTFT and TTFA start before its request is on the wire, so they are the raw stream's, as
# the proxy stamps it, plus the client's own way to the proxy and back: a fixed offset, not drift.
# Measured on the Zen 4 EPYC, 2026-11-29: 1.6-4.8 ms over 8 requests to vLLM (quiet), 6.4 ms beside a
# loaded test tier; 5.8 ms to llama.cpp beside one, where 2 % of its 229 ms TTFT is 4.6 ms.
CLIENT_WAY_S = 0.008


def as_raw(client_s: float, raw_s: float) -> bool:
    """A client's figure agrees with the raw stream's: no earlier, and later by 2 % and its way at most."""
    return 0 <= client_s - raw_s <= 0.02 * raw_s + CLIENT_WAY_S
