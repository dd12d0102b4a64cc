"""The prediction log's writer process: served batches go down a pipe to a process that writes them.

Why a process: a writer thread shares the API process's interpreter lock with the event loop, and
the loop waited on it each time the writer held it (its SQL, ``np.concatenate``, the driver's bind
copy). Servers of both kinds alternated five times at a 100% rate (64 x 100 float32 a request, wrk
-c32 on this 2-core machine): the thread kept 0.820 (0.795-0.825) of the throughput without
logging, the process 0.888 (0.825-0.930); the event loop's CPU a request rose by 63 and 46 us.

``PipeWriter`` is the API process's end. ``put`` writes a batch (a header, the ids, the array's raw
little-endian bytes) with one non-blocking ``writev``: the kernel copies it into the pipe (1 MiB)
and the hot path returns. A full pipe drops the batch (counted, and ``Served.logged`` is 0); a
batch the pipe took only part of is finished with blocking writes, so a batch is never cut.
The process starts with the first batch (an application that never logs has none) and again after
it died (its unwritten batches are lost, as a thread's are when its process dies). ``flush`` sends
a mark and waits until the process has written everything sent before it.

``main`` is the writer process: it reads batches into a ``LogBuffer`` and writes them on its own
thread (``flush_rows`` / ``flush_seconds`` / ``max_buffer_bytes`` as before); at end of file (the
API process closed the pipe or died) or once its parent is gone it writes what is left and exits.
Only raw arrays cross the pipe, never pickles.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import struct
import subprocess
import sys
import termios
import threading
import time

import numpy as np
import orjson

from .observation_store import raw_view
from .prediction_log_buffer import LogBuffer, Pending

logger = logging.getLogger(__name__)
# mode, calibrator id, version (a mark: its number), n_classes, rows, columns (-1: 1-D), text bytes,
# data bytes, dtype, input kind; then the text (client ids joined by newlines, or the prefix)
HEADER = struct.Struct("<8q8s16s")
CLIENT_IDS, PREFIX, MARK, CONFIG = 1, 2, 3, 4
ACK = struct.Struct("<q")
PIPE_BYTES = 1 << 20  # the pipe's size (F_SETPIPE_SZ; Linux allows an unprivileged process 1 MiB)
F_SETPIPE_SZ, F_GETPIPE_SZ = 1031, 1032  # Linux's fcntl commands
PAGE = 4096
PADDING = bytes(PAGE)
PAGE_MARGIN = 2 * PAGE  # the pipe's partly read first page, and one to spare


def _padding(size: int) -> bytes:
    """Zeros that end a message of ``size`` bytes on a page boundary. The pipe holds whole pages
    (1 MiB is 256 of them), and a write whose length is not a multiple of a page starts new pages
    part full: messages of whole pages make the room a byte count (``_queued``) tells exact, so a
    batch that fits is written whole, never in part."""
    return PADDING[:-size % PAGE]


def _queued(fd: int) -> int:
    """Bytes in the pipe not read yet."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def _header(mode: int, calibrator_id: int = 0, version: int = 0, n_classes: int = 0, shape=(0,),
            text: bytes = b"", data_bytes: int = 0, dtype: str = "", kind: str = "") -> bytes:
    columns = shape[1] if len(shape) == 2 else -1
    return HEADER.pack(mode, calibrator_id, version, n_classes, shape[0], columns, len(text), data_bytes,
                       dtype.encode(), kind.encode()) + text


def _rest(parts: list, sent: int) -> list[memoryview]:
    """What is left of ``parts`` once ``sent`` bytes of them were written."""
    views = [memoryview(part).cast("B") for part in parts]
    while views and sent >= len(views[0]):
        sent -= len(views.pop(0))
    if views:
        views[0] = views[0][sent:]
    return views


class PipeWriter:
    """The API process's end of the writer process (see the module)."""

    def __init__(self, config: dict, flush_timeout: float = 60.0):
        self.config = config  # database_url, db_timeout, flush_rows, flush_seconds, max_buffer_bytes, log_level
        self.flush_timeout = flush_timeout
        self.dropped_rows = 0
        self.process: subprocess.Popen | None = None
        self._fd: int | None = None
        self._acks: int | None = None
        self._capacity = PIPE_BYTES
        self._marks = 0
        self._lock = threading.Lock()  # one batch at a time into the pipe
        self._flush_lock = threading.Lock()

    def _start(self) -> None:
        read, write = os.pipe()
        ack_read, ack_write = os.pipe()
        with contextlib.suppress(OSError):  # a lower limit: the default size
            fcntl.fcntl(write, F_SETPIPE_SZ, PIPE_BYTES)
        self._capacity = fcntl.fcntl(write, F_GETPIPE_SZ)
        self.process = subprocess.Popen([sys.executable, "-m", "app.prediction_log_pipe", str(read), str(ack_write)],
                                        pass_fds=(read, ack_write), stdin=subprocess.DEVNULL)
        os.close(read)
        os.close(ack_write)
        self._fd, self._acks = write, ack_read
        header = _header(CONFIG, text=orjson.dumps(self.config))
        self._write_all([header, _padding(len(header))])
        os.set_blocking(write, False)

    def _close(self) -> None:
        for fd in (self._fd, self._acks):
            if fd is not None:
                os.close(fd)
        self._fd = self._acks = None

    def _write_all(self, parts: list) -> None:
        """Write ``parts`` whole, waiting for room in the pipe."""
        os.set_blocking(self._fd, True)
        try:
            while parts:
                parts = _rest(parts, os.writev(self._fd, parts))
        finally:
            os.set_blocking(self._fd, False)

    def put(self, item: Pending) -> bool:
        """Send a served batch to the writer process; ``False`` (counted as dropped) when the pipe is full."""
        data, dtype = raw_view(item.inputs)
        if item.prefix is not None:
            mode, text = PREFIX, item.prefix.encode()
        else:
            mode, text = CLIENT_IDS, "\n".join(item.ids).encode()
        header = _header(mode, item.calibrator_id, item.version, item.n_classes, item.inputs.shape, text,
                         len(data), dtype, item.kind)
        padding = _padding(len(header) + len(data))
        size = len(header) + len(data) + len(padding)
        with self._lock:
            try:
                if self._fd is None:
                    self._start()
                room = self._capacity - PAGE_MARGIN
                if size > room:  # larger than the pipe: written in parts as the process reads
                    self._write_all([header, data, padding])
                    return True
                if _queued(self._fd) + size > room:  # the pipe is full: dropped, never cut
                    self.dropped_rows += len(item.inputs)
                    return False
                sent = os.writev(self._fd, [header, data, padding])
                if sent < size:  # not seen (the room was checked), but a batch is never cut
                    self._write_all(_rest([header, data, padding], sent))
            except OSError as exc:  # the process died (a broken pipe) or could not start
                logger.warning("prediction log: the writer process is gone (%s); starting another", exc)
                self._close()
                self.dropped_rows += len(item.inputs)
                return False
        return True

    def flush(self) -> None:
        """Return once the writer process has written every batch sent before this call."""
        with self._flush_lock:
            with self._lock:
                if self._fd is None:
                    return
                self._marks += 1
                mark = self._marks
                try:
                    header = _header(MARK, version=mark)
                    self._write_all([header, _padding(len(header))])
                except OSError:
                    self._close()
                    return
                acks = self._acks
            deadline = time.monotonic() + self.flush_timeout
            while (left := deadline - time.monotonic()) > 0 and select.select([acks], [], [], left)[0]:
                answer = os.read(acks, ACK.size)
                if len(answer) < ACK.size or ACK.unpack(answer)[0] >= mark:
                    return
            logger.warning("prediction log: the writer process did not flush within %.0f s", self.flush_timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Close the pipe: the writer process writes what it holds and exits."""
        with self._lock:
            process = self.process
            self._close()
        if process is not None:
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                logger.warning("prediction log: the writer process did not exit within %.0f s", timeout)
                process.kill()


class _Messages:
    """The messages in the pipe, read without ever waiting on it: a reader waiting in the pipe is
    woken by each write, a wake-up (across cores, in a VM an interrupt through the hypervisor) that
    cost the event loop ~60 us a request at 100% (``benchmarks/prediction_log.py``). The reader
    sleeps ``POLL_SECONDS`` instead, then reads all there is; after a read of more than an eighth of
    the pipe it reads again at once, and after ``IDLE_POLLS`` empty polls it waits in the pipe."""

    POLL_SECONDS = 0.005
    IDLE_POLLS = 20  # then it waits in the pipe, and costs nothing while nothing is logged

    def __init__(self, fd: int, parent: int):
        self.fd, self.parent = fd, parent
        self.data = bytearray(2 * PIPE_BYTES)
        self.start = self.end = 0  # the unread bytes are data[start:end]
        self.idle = 0  # polls in a row that found nothing
        os.set_blocking(fd, False)

    def _fill(self) -> int | None:
        """Read what the pipe holds into ``data``; bytes read, or ``None`` at end of file."""
        if self.start:
            self.data[:self.end - self.start] = self.data[self.start:self.end]
            self.start, self.end = 0, self.end - self.start
        try:
            n = os.readv(self.fd, [memoryview(self.data)[self.end:]])
        except BlockingIOError:
            return 0
        self.end += n
        return n or None

    def _take(self, n: int, convert=bytes):
        """``convert`` of a view of the next ``n`` bytes, waiting for them; ``None`` at end of file
        or once the parent is gone."""
        if n > len(self.data):
            self.data.extend(bytes(n - len(self.data)))
        while self.end - self.start < n:
            got = self._fill()
            if got is None:
                return None
            self.idle = 0 if got else self.idle + 1
            if self.end == len(self.data) or got > PIPE_BYTES // 8:
                continue
            if os.getppid() != self.parent:
                return None
            if self.idle > self.IDLE_POLLS:  # nothing for a while: wait in the pipe (one wake-up)
                select.select([self.fd], [], [], 1.0)
            else:
                time.sleep(self.POLL_SECONDS)
        with memoryview(self.data)[self.start:self.start + n] as view:
            self.start += n
            return convert(view)

    def __iter__(self):
        """``(header fields, text, array)`` of each message."""
        while (header := self._take(HEADER.size)) is not None:
            mode, calibrator_id, version, n_classes, rows, columns, n_text, n_data, dtype, kind = HEADER.unpack(header)
            if (text := self._take(n_text)) is None:
                return
            array = None
            if mode in (CLIENT_IDS, PREFIX):
                shape = (rows,) if columns < 0 else (rows, columns)
                dtype = np.dtype(dtype.rstrip(b"\0").decode())
                array = self._take(n_data, lambda view, dtype=dtype, shape=shape:
                                   np.frombuffer(view, dtype=dtype).reshape(shape).copy())
                if array is None:
                    return
            if self._take(len(_padding(HEADER.size + n_text + (0 if array is None else n_data)))) is None:
                return
            yield (mode, calibrator_id, version, n_classes, kind.rstrip(b"\0").decode()), text, array


def main(read_fd: int, ack_fd: int) -> None:
    from . import logs
    from .db import Database
    from .prediction_log import name_thread

    name_thread("prediction-log")
    messages = iter(_Messages(read_fd, os.getppid()))
    (mode, *_), text, _ = next(messages)
    config = orjson.loads(text)
    logs.configure(config["log_level"])
    db = Database(config["database_url"], config["db_timeout"])
    buffer = LogBuffer(db, config["flush_rows"], config["flush_seconds"], config["max_buffer_bytes"])
    done = threading.Event()

    def write() -> None:
        while not done.is_set():
            buffer.run_once()

    writer = threading.Thread(target=write, name="prediction-log")
    writer.start()
    for (mode, calibrator_id, version, n_classes, kind), text, array in messages:
        if mode == MARK:
            buffer.ask_flush(lambda mark=version: os.write(ack_fd, ACK.pack(mark)))
        elif mode == PREFIX:
            buffer.keep(Pending(calibrator_id, version, kind, n_classes, array, None, text.decode()))
        else:
            buffer.keep(Pending(calibrator_id, version, kind, n_classes, array, text.decode().split("\n")))
    done.set()
    buffer.ask_flush(lambda: None)
    writer.join()
    buffer.flush()
    db.dispose()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
