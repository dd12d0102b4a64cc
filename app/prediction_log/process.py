"""The prediction log's writer process, started by ``app.prediction_log.pipe.PipeWriter`` with its
pipe, its back pipe and the ring's memory (``app.prediction_log.ring``) as file descriptors.

It reads the pipe's control messages (``_controls``) and, at each, the ring's records up to the
head the message carries, keeps them in a ``LogBuffer`` and writes them on its own thread
(``flush_rows`` / ``flush_bytes`` / ``flush_seconds`` / ``max_buffer_bytes`` as a thread of the API process would),
through SQLite connections with a page cache of ``cache_bytes`` (``log_writer_cache_bytes``: a
flush behind on random client ids touches many pages of the id index, and a cache too small for
them has SQLite write some several times in one commit).
While that buffer is full it reads no further, so a slow database fills the ring and the API
process drops batches it can count and report. It sends back how far it has read the ring (every
eighth of it) and answers each flush mark once what came before the mark is written (negative when
rows could not be written since the last answer). At end of file (the API process closed the pipe,
or died) or once its parent is gone, and on a record that is not one (``ValueError``, exit status
1), it writes what it holds and exits. It ignores SIGINT and SIGTERM: the API process decides when
it ends. Only raw arrays cross, never pickles.
"""

from __future__ import annotations

import functools
import logging
import os
import select
import signal
import threading
import time

import orjson

from ..platform import logs
from ..platform.db import Database
from .buffer import LogBuffer, Pending, name_thread
from .epochs import EpochWriter
from .pipe import ACK, BACK, CONFIG_VARIABLE, CONTROL, MARK, PREFIX, TAIL
from .ring import RingReader

logger = logging.getLogger(__name__)
POLL_SECONDS = 0.005  # the pipe is read this often while messages come; a reader waiting in it
IDLE_POLLS = 20  # would be woken by each write. After this many empty polls it waits in the pipe


def _controls(fd: int, parent: int):
    """``(mode, value, ring head)`` of each control message, until end of file or the parent is gone."""
    os.set_blocking(fd, False)
    rest, idle = b"", 0
    while True:
        try:
            data = os.read(fd, CONTROL.size * 4096)
        except BlockingIOError:
            data = None
        if data == b"":
            return
        if data:
            idle, rest = 0, rest + data
            whole = len(rest) - len(rest) % CONTROL.size
            yield from CONTROL.iter_unpack(rest[:whole])
            rest = rest[whole:]
            continue
        if os.getppid() != parent:
            return
        idle += 1
        if idle > IDLE_POLLS:
            select.select([fd], [], [], 1.0)
        else:
            time.sleep(POLL_SECONDS)


def _say(fd: int, kind: int, value: int, wait: bool = False) -> bool:
    """Send ``(kind, value)`` back; a tail is skipped while the back pipe is full (a later one goes),
    a mark's answer waits for room."""
    while True:
        try:
            os.write(fd, BACK.pack(kind, value))
            return True
        except BlockingIOError:
            if not wait:
                return False
            select.select([], [fd], [], 1.0)
        except BrokenPipeError:  # the API process is gone
            return False


def main(read_arg: str, back_arg: str, ring_arg: str) -> None:
    """The process's loop; its arguments are the file descriptors of the pipe down, the pipe back
    and the ring's shared memory, as text (its command line)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    name_thread("prediction-log")
    read_fd, back_fd = int(read_arg), int(back_arg)
    config = orjson.loads(os.environ.pop(CONFIG_VARIABLE))
    logs.configure(config["log_level"])
    ring = RingReader(int(ring_arg), config["ring_bytes"])
    db = Database(config["database_url"], config["db_timeout"], sqlite_cache_bytes=config["cache_bytes"])
    buffer = LogBuffer(db, config["flush_rows"], config["flush_seconds"], config["max_buffer_bytes"],
                       EpochWriter(config["epoch_ids"], config["epoch_digest_bytes"] // 16), config["max_logged_rows"],
                       config["flush_bytes"])
    os.set_blocking(back_fd, False)
    done = threading.Event()

    def write() -> None:
        while not done.is_set():
            try:
                buffer.run_once()
            except Exception:  # an answer that failed: the writer goes on (a dead writer would hold the reader)
                logger.exception("prediction log: the writer process's writer thread")

    writer = threading.Thread(target=write, name="prediction-log", daemon=True)
    writer.start()
    said = 0  # the tail last sent back
    failed = 0  # the rows not written when the last mark was answered (the writer thread's)

    def answer(mark: int) -> None:
        """A mark's answer: negative when rows could not be written since the last one."""
        nonlocal failed
        failed_now = buffer.stats.failed_rows
        _say(back_fd, ACK, mark if failed_now == failed else -mark, wait=True)
        failed = failed_now

    try:
        for mode, value, head in _controls(read_fd, os.getppid()):
            for kind, calibrator_id, version, n_classes, input_kind, text, array in ring.records(head):
                ids, prefix = (None, text) if kind == PREFIX else (text.split("\n"), None)
                buffer.keep(Pending(calibrator_id, version, input_kind, n_classes, array, ids, prefix), wait=True)
            if ring.tail - said >= ring.size // 8 and _say(back_fd, TAIL, ring.tail):
                said = ring.tail
            if mode == MARK:
                buffer.ask_flush(functools.partial(answer, value))
    finally:
        done.set()
        buffer.ask_flush(lambda: None)
        writer.join(timeout=2 * config["db_timeout"] + 10)
        buffer.flush()
        buffer.close_epochs()
        db.dispose()
