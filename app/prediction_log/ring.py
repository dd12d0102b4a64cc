"""A ring of served batches in memory that the API process shares with the prediction log's writer
process (``app.prediction_log.pipe``, ``app.prediction_log.process``).

The hot path copies a batch into the ring (``RingWriter.place``: a header, the ids, the array's
bytes; ~1.3 us for 64 x 100 float32, no system call). Written into a pipe instead, the kernel's copy
and page allocations cost the event loop ~13 us a batch (perf). Positions are byte counts since the
start, ``head`` (written so far) and ``tail`` (read so far); a record that would cross the ring's
end starts at its beginning instead, after a ``WRAP`` header where one fits.

What crosses between the processes is ordered by pipes, not by the shared memory: the writer
process reads records only up to a head it read from the pipe (``RingReader.records``), and the API
process reuses space only up to a tail it read from the back pipe. A pipe's write and read take the
same kernel lock, which orders every memory access before the write before every access after the
read, on every architecture: no record is read before it is whole, nor overwritten before it was
read. The reader checks every header it reads (``ValueError`` if one is not a record).
"""

from __future__ import annotations

import mmap
import os
import struct

import numpy as np

# mode, calibrator id, version, n_classes, rows, columns (-1: 1-D), text bytes, data bytes, dtype,
# input kind; then the text (client ids joined by newlines, or the prefix) and the array's bytes
HEADER = struct.Struct("<8q8s16s")
CLIENT_IDS, PREFIX, WRAP = 1, 2, 3  # the ids are the client's or a prefix's; the records go on at the start
DTYPES = ("<f2", "<f4", "<f8")  # what ``app.platform.sql.raw_view`` gives for float inputs
# ``calibration.INPUT_KINDS`` (a test keeps them equal): the writer process does not import the core,
# whose scipy would add ~50 MiB to its resident memory
KINDS = ("logits", "probabilities", "scores")

MAX_TEXT = 1 << 26  # bytes of ids a record may carry (64 MiB: the largest request body)
RING_BYTES = 16 << 20


def record_header(mode: int, calibrator_id: int, version: int, n_classes: int, shape: tuple, text: bytes,
                  data_bytes: int, dtype: str, kind: str) -> bytes:
    """A record's header, followed by its text."""
    columns = shape[1] if len(shape) == 2 else -1
    return HEADER.pack(mode, calibrator_id, version, n_classes, shape[0], columns, len(text), data_bytes,
                       dtype.encode(), kind.encode()) + text


class RingWriter:
    """The API process's side: the ring's memory (a ``memfd`` the writer process inherits)."""

    def __init__(self, size: int = RING_BYTES):
        self.size = size
        self.fd = os.memfd_create("prediction-log", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, size)
        self.memory = mmap.mmap(self.fd, size)
        self.head = 0
        self.tail = 0  # what the writer process said it has read

    def place(self, head_and_text: bytes, data) -> bool:
        """Copy a record in; ``False`` when the ring has no room for it (nothing is written)."""
        n = len(head_and_text) + len(data)
        position = self.head % self.size
        skip = self.size - position if self.size - position < n else 0
        if self.head + skip + n - self.tail > self.size:
            return False
        if skip:
            if skip >= HEADER.size:
                self.memory[position:position + HEADER.size] = HEADER.pack(WRAP, *[0] * 7, b"", b"")
            self.head += skip
            position = 0
        middle = position + len(head_and_text)
        self.memory[position:middle] = head_and_text
        self.memory[middle:middle + len(data)] = data
        self.head += n
        return True

    def close(self) -> None:
        self.memory.close()
        os.close(self.fd)


class RingReader:
    """The writer process's side."""

    def __init__(self, fd: int, size: int):
        self.size = size
        self.memory = mmap.mmap(fd, size)
        os.close(fd)
        self.tail = 0

    def records(self, head: int):
        """``(mode, calibrator_id, version, n_classes, kind, text, array)`` of each record before
        ``head`` (the array a copy: its space is reused once the tail is sent back)."""
        while self.tail < head:
            position = self.tail % self.size
            if self.size - position < HEADER.size:
                self.tail += self.size - position
                continue
            fields = HEADER.unpack_from(self.memory, position)
            if fields[0] == WRAP:
                self.tail += self.size - position
                continue
            mode, calibrator_id, version, n_classes, shape, n_text, n_data, dtype, kind = self._checked(
                fields, position, head)
            start = position + HEADER.size
            text = self.memory[start:start + n_text].decode()
            array = np.frombuffer(self.memory, dtype=dtype, count=n_data // dtype.itemsize,
                                  offset=start + n_text).reshape(shape).copy()
            self.tail += HEADER.size + n_text + n_data
            yield mode, calibrator_id, version, n_classes, kind, text, array

    def _checked(self, fields: tuple, position: int, head: int) -> tuple:
        mode, calibrator_id, version, n_classes, rows, columns, n_text, n_data, dtype, kind = fields
        dtype, kind = dtype.rstrip(b"\0").decode("ascii", "replace"), kind.rstrip(b"\0").decode("ascii", "replace")
        shape = (rows,) if columns == -1 else (rows, columns)
        if (mode not in (CLIENT_IDS, PREFIX) or dtype not in DTYPES or kind not in KINDS or rows < 0
                or columns < -1 or not 0 <= n_text <= MAX_TEXT or n_data != rows * abs(columns) * int(dtype[2])
                or position + HEADER.size + n_text + n_data > self.size
                or self.tail + HEADER.size + n_text + n_data > head):
            raise ValueError(f"not a record of the prediction log at ring position {self.tail}: {fields}")
        return mode, calibrator_id, version, n_classes, shape, n_text, n_data, np.dtype(dtype), kind
