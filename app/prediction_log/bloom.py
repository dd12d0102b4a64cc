"""A Bloom filter over strings, stored as bytes: which closed epochs of the prediction log's id index
may hold an id (``app.prediction_log.epochs``), so that a label is looked up in those epochs only.

A filter of ``m`` bits with ``k`` hash functions holds ``n`` keys; key ``x`` sets bits
``g_i(x) = (h1(x) + i * h2(x)) mod m`` for ``i = 0 .. k-1`` (double hashing, Kirsch and
Mitzenmacher, "Less hashing, same performance: building a better Bloom filter", ESA 2006), with
``h1``, ``h2`` the two halves of the key's 16-byte BLAKE2b digest (``h2`` made odd). A key is
"maybe held" when all its ``k`` bits are set: never a false negative, and a false positive with
probability about ``(1 - e^(-k n / m))^k`` (Bloom, "Space/time trade-offs in hash coding with
allowable errors", CACM 1970): 0.82% at ``m / n = 10`` bits and ``k = 7``, the defaults here
(``m`` is rounded up to a power of two: ``m / n`` from 10 to 20, and at most 0.82%).
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

BITS_PER_KEY = 10
HASHES = 7


def raw_digests(keys: list[str]) -> bytes:
    """Each key's BLAKE2b-128 digest of its UTF-8 bytes, one after another (16 bytes a key)."""
    return b"".join(hashlib.blake2b(key.encode(), digest_size=16).digest() for key in keys)


def halves(raw: bytes | bytearray) -> tuple[np.ndarray, np.ndarray]:
    """``(h1, h2)`` of ``raw_digests``: the two uint64 halves of each digest (``h2`` made odd)."""
    pairs = np.frombuffer(raw, dtype="<u8").reshape(-1, 2)
    return pairs[:, 0].copy(), pairs[:, 1] | np.uint64(1)


def digests(keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(h1, h2)``: the two uint64 halves of each key's BLAKE2b-128 digest of its UTF-8 bytes."""
    return halves(raw_digests(keys))


def _positions(h1: np.ndarray, h2: np.ndarray, hashes: int, bits: int) -> np.ndarray:
    """The ``k`` bit positions of each key, shape ``(n, k)`` (uint64 arithmetic wraps mod 2^64)."""
    steps = np.arange(hashes, dtype=np.uint64)
    return (h1[:, None] + steps[None, :] * h2[:, None]) % np.uint64(bits)


def size_bits(n_keys: int, bits_per_key: int = BITS_PER_KEY) -> int:
    """The bits of a filter for ``n_keys``: the power of two at or above ``bits_per_key`` a key (64
    at least), so that filters of similar sizes share their keys' bit positions (``Probe``)."""
    return max(64, 1 << math.ceil(math.log2(max(1, n_keys * bits_per_key))))


def build(keys: list[str], bits_per_key: int = BITS_PER_KEY, hashes: int = HASHES) -> bytes:
    """The filter of ``keys``: ``size_bits`` bits (``bits_per_key`` to twice as many a key)."""
    return from_digests(*digests(keys), len(keys), bits_per_key, hashes)


def from_digests(h1: np.ndarray, h2: np.ndarray, n_keys: int, bits_per_key: int = BITS_PER_KEY,
                 hashes: int = HASHES) -> bytes:
    """The filter of ``n_keys`` keys (its size, ``size_bits(n_keys)``) whose ``digests`` are given:
    the bytes ``build`` gives for those keys, whatever the digests' order or repeats."""
    if bits_per_key < 1 or hashes < 1:
        raise ValueError(f"a Bloom filter needs bits_per_key >= 1 and hashes >= 1, not {bits_per_key}, {hashes}")
    bits = np.zeros(size_bits(n_keys, bits_per_key), dtype=bool)
    if len(h1):
        bits[_positions(h1, h2, hashes, len(bits)).ravel().astype(np.int64)] = True
    return np.packbits(bits, bitorder="little").tobytes()


class Probe:
    """Keys to test against many filters: their digests once, and their bit positions once per
    filter size and number of hash functions."""

    def __init__(self, keys: list[str]):
        self.h1, self.h2 = digests(keys)
        self._at: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def maybe_held(self, bloom: bytes, hashes: int) -> np.ndarray:
        """Whether each key may be in the filter ``bloom`` built with ``hashes`` hash functions."""
        if not bloom or hashes < 1:
            raise ValueError("not a Bloom filter: no bits or no hash functions")
        size = (len(bloom), hashes)
        if size not in self._at:
            positions = _positions(self.h1, self.h2, hashes, len(bloom) * 8).astype(np.int64)
            self._at[size] = positions >> 3, (positions & 7).astype(np.uint8)
        byte, bit = self._at[size]
        return ((np.frombuffer(bloom, dtype=np.uint8)[byte] >> bit) & 1).all(axis=1)
