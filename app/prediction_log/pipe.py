"""The API process's end of the prediction log's writer process (``app.prediction_log.process``).

Why a process: a writer thread shares the API process's interpreter lock with the event loop, and
the loop waited on it each time the writer held it (its SQL, ``np.concatenate``, the driver's bind
copy). Served batches go into a ring in shared memory (``app.prediction_log.ring``): ``put`` copies a
batch in and returns, with no system call. Every ``ANNOUNCE_SECONDS`` at most, while batches come,
one 24-byte control message down a pipe tells the process how far the ring is written (the log's
thread sends the last one after a lull); the process reads its pipe every 5 ms and never waits in
it while batches come, so no write wakes it (a wake-up, across cores and in a VM through the
hypervisor, cost the loop ~60 us a batch when the batches themselves went down the pipe). It sends
back how far it has read the ring, and answers flush marks. ``benchmarks/prediction_log.py``
measures what is left: the copy, and the process's work on the machine's other core.

A full ring drops the batch whole (``Served.logged`` 0, counted in ``dropped_rows``); the process
holds back (reads no further) while its own buffer is full, so its drops are the ring's. A batch
larger than a quarter of the ring, or than the process's buffer, is not logged (counted too). The process
starts with the first batch (an application that never logs has none), or sooner (``start``: at
start-up when a calibrator logs, and when logging is turned on), in a session of its own (a
Ctrl-C or a signal to the API's process group does not reach it; it ends when the API process
closes the pipe or dies), and again after it ended, at most every ``RESTART_SECONDS``. ``flush``
returns ``True`` once the process has written everything put before it, ``False`` if it could not
(the process ended, rows failed, or no answer within ``flush_timeout``). A batch put after the
process ended and before a control message finds its pipe broken (5 ms at most) is answered
``logged`` but lost, as a thread's buffer is lost with its process: ``logged`` says a batch was
handed to the writer, and ``flush`` whether it was written.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import orjson

from ..platform.sql import raw_view
from .buffer import Pending
from .ring import CLIENT_IDS, PREFIX, RING_BYTES, RingWriter, record_header

logger = logging.getLogger(__name__)
CONTROL = struct.Struct("<3q")  # down the pipe: mode, value (a mark's number), the ring's head
ANNOUNCE, MARK = 1, 2
BACK = struct.Struct("<qq")  # back: (TAIL, the ring's tail) or (ACK, a mark's number)
TAIL, ACK = 1, 2
ANNOUNCE_SECONDS = 0.005
RESTART_SECONDS = 5.0
CONFIG_VARIABLE = "CALIBRATION_LOG_WRITER_CONFIG"  # the process's settings, in its environment
# the process multiplies no matrices: one BLAS thread, not the pool of one a core numpy's OpenBLAS starts at import
WRITER_ENVIRONMENT = {"OPENBLAS_NUM_THREADS": "1"}
# the process imports this application's ``app``, not one that its working directory may hold, with no
# cyclic collections while it imports (they would walk the modules' objects, which are all kept)
BOOT = ("import gc, sys; gc.disable(); sys.path.insert(0, sys.argv[1]); from app.prediction_log.process import main; "
        "gc.enable(); main(*sys.argv[2:])")
ROOT = str(Path(__file__).resolve().parents[2])


class PipeWriter:
    """The API process's end of the writer process (see the module)."""

    def __init__(self, config: dict, ring_bytes: int = RING_BYTES, flush_timeout: float = 60.0,
                 restart_seconds: float = RESTART_SECONDS):
        # database_url, db_timeout, flush_rows, flush_bytes, flush_seconds, max_buffer_bytes, log_level,
        # cache_bytes, epoch_ids, epoch_digest_bytes, max_logged_rows
        self.config = config
        self.ring_bytes = ring_bytes
        self.flush_timeout = flush_timeout
        self.restart_seconds = restart_seconds
        self.dropped_rows = 0
        self.process: subprocess.Popen | None = None
        self._fd: int | None = None
        self._back: int | None = None
        self._ring: RingWriter | None = None
        self._generation = 0  # one more each start: a flush waits on the process it sent its mark to
        self._next_start = 0.0
        self.close_timeout = 2 * config["db_timeout"] + 40  # the process's last writes may wait on the database
        self._closed = False
        self._ended = False  # a process ended since the last flush: what it was handed may be lost
        self._announced = (0, 0.0)  # the head last sent down the pipe, and when
        self._marks = self._acked = self._failed = 0  # marks sent; answered; answered as failed (the latest)
        self._lock = threading.Lock()  # the ring, the pipes and the process

    def _start(self) -> None:
        now = time.monotonic()
        if now < self._next_start:
            raise ChildProcessError("the writer process ended less than restart_seconds ago")
        self._next_start = now + self.restart_seconds
        config = orjson.dumps({**self.config, "ring_bytes": self.ring_bytes}).decode()
        ring = RingWriter(self.ring_bytes)
        read, write = os.pipe()
        back_read, back_write = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", BOOT, ROOT, str(read), str(back_write), str(ring.fd)],
                pass_fds=(read, back_write, ring.fd), stdin=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, CONFIG_VARIABLE: config, **WRITER_ENVIRONMENT})
        except (OSError, subprocess.SubprocessError):
            for fd in (write, back_read):
                os.close(fd)
            ring.close()
            raise
        finally:
            os.close(read)
            os.close(back_write)
        os.set_blocking(write, False)
        os.set_blocking(back_read, False)
        self._fd, self._back, self._ring = write, back_read, ring
        self._announced = (0, 0.0)
        self._generation += 1

    def start(self) -> None:
        """Start the process now unless it runs, the log is closed or it ended less than
        ``restart_seconds`` ago. Otherwise the first batch starts it, and while it boots (~1 s)
        batches that do not fit in the ring are dropped: at 64 x 100 float32 a request, the ring's
        650 batches are a third of a second at 2000 requests a second."""
        with self._lock:
            if self._closed or self._fd is not None:
                return
            try:
                self._start()
            except ChildProcessError:  # ended less than restart_seconds ago: a later batch starts it
                pass
            except (OSError, subprocess.SubprocessError) as exc:
                self._end(exc)

    def _close(self) -> None:
        for fd in (self._fd, self._back):
            if fd is not None:
                os.close(fd)
        if self._ring is not None:
            self._ring.close()
        self._fd = self._back = self._ring = None

    def _channel(self) -> tuple[int, int, RingWriter]:
        """The pipe down, the pipe back and the ring of the running process (set and cleared together)."""
        if self._fd is None or self._back is None or self._ring is None:
            raise BrokenPipeError("the writer process is not running")
        return self._fd, self._back, self._ring

    def _control(self, mode: int, value: int = 0) -> bool:
        """Send a control message; ``False`` if the pipe is full (a write this small is never cut)."""
        fd, _, ring = self._channel()
        try:
            os.write(fd, CONTROL.pack(mode, value, ring.head))
        except BlockingIOError:
            return False
        if mode == ANNOUNCE:
            self._announced = (ring.head, time.monotonic())
        return True

    def _read_back(self) -> None:
        """Take in what the process said: the ring's tail, and the marks it has flushed."""
        _, back, ring = self._channel()
        while True:
            try:
                said = os.read(back, BACK.size * 4096)
            except BlockingIOError:
                return
            if not said:
                raise BrokenPipeError("the writer process has ended")
            for kind, value in BACK.iter_unpack(said):
                if kind == TAIL:
                    ring.tail = max(ring.tail, value)
                elif kind == ACK:  # negative: rows could not be written before this mark's answer
                    self._acked = max(self._acked, abs(value))
                    self._failed = max(self._failed, -value)

    def put(self, item: Pending) -> bool:
        """Hand a served batch to the writer process; ``False`` (counted in ``dropped_rows``) when it
        was not: the ring full, the batch larger than a quarter of it, or no process."""
        data, dtype = raw_view(item.inputs)
        if item.prefix is not None:
            mode, text = PREFIX, item.prefix.encode()
        else:
            # a served batch's client ids (``PredictionLog.record``): without a prefix it has them, and
            # only the buffer sets one of them to None (a repeated id), after a batch was put
            mode, text = CLIENT_IDS, "\n".join(cast("Sequence[str]", item.ids)).encode()
        head = record_header(mode, item.calibrator_id, item.version, item.n_classes, item.inputs.shape, text,
                             len(data), dtype, item.kind)
        with self._lock:
            try:
                # a quarter of the ring at most: with the tail the process has not reported yet (an
                # eighth) and a wrap's skipped end, such a batch always fits once the process caught up
                if self._closed or len(head) + len(data) > self.ring_bytes // 4 or (
                        item.inputs.nbytes > self.config["max_buffer_bytes"]):
                    raise ValueError
                if self._fd is None:
                    self._start()
                ring = self._channel()[2]
                if not ring.place(head, data):
                    self._read_back()
                    if not ring.place(head, data):
                        raise ValueError
                if time.monotonic() - self._announced[1] >= ANNOUNCE_SECONDS:
                    self._control(ANNOUNCE)
                return True
            except (ValueError, ChildProcessError):  # the ring full, the batch too large, the log closed,
                pass  # or the process waiting to start again
            except (OSError, subprocess.SubprocessError) as exc:  # the process ended, or could not start
                self._end(exc)
            self.dropped_rows += len(item.inputs)
            return False

    def _end(self, exc: BaseException) -> None:
        """The process ended (a broken pipe) or could not start: what it was handed and had not
        written is lost (the next ``flush`` says so); another starts with a later batch."""
        logger.warning("prediction log: the writer process has ended or could not start (%s); another starts "
                       "in %.0f s at most", exc, max(0.0, self._next_start - time.monotonic()))
        # a start that fails after a writer ended keeps that loss known to the next flush
        self._ended = self._ended or self._fd is not None
        self._close()

    def announce(self) -> None:
        """Send the ring's head if batches came since it was last sent (the log's thread calls this
        every ``flush_seconds``, so the last batches before a lull are written in time)."""
        with self._lock:
            if self._ring is not None and self._fd is not None and self._ring.head != self._announced[0]:
                try:
                    self._control(ANNOUNCE)
                except OSError as exc:
                    self._end(exc)

    def flush(self) -> bool:
        """Return once the writer process has written every batch put before this call: ``True``,
        or ``False`` if it could not (a process ended since the last flush, rows could not be
        written, or no answer within ``flush_timeout``). Flushes from several threads wait together."""
        with self._lock:
            ended, self._ended = self._ended, False
            if self._fd is None:
                return not ended
            self._marks += 1
            mark, generation, sent = self._marks, self._generation, False
        deadline = time.monotonic() + self.flush_timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._generation != generation or self._fd is None or self._back is None:
                    return False
                try:
                    sent = sent or self._control(MARK, mark)
                    self._read_back()
                except OSError as exc:
                    self._end(exc)
                    return False
                if self._acked >= mark:
                    return not ended and self._failed < mark
                back = self._back
            with contextlib.suppress(OSError, ValueError):  # closed by a put since: see the generation
                select.select([back], [], [], 0.05)
        logger.warning("prediction log: the writer process did not flush within %.0f s", self.flush_timeout)
        return False

    def close(self) -> None:
        """Close the pipe: the writer process writes what it holds and exits. Nothing is put after.
        The last head is sent even into a full pipe (waiting for room), or the batches after the
        last one sent would not be read."""
        deadline = time.monotonic() + self.close_timeout
        with self._lock:
            self._closed = True
            process = self.process
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    while not self._control(ANNOUNCE) and time.monotonic() < deadline:
                        select.select([], [self._fd], [], 1.0)
                self._close()
        if process is not None:
            try:
                process.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("prediction log: the writer process did not exit within %.0f s", self.close_timeout)
                process.kill()
                process.wait()
