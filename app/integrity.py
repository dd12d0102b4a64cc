"""Integrity of stored versions: a digest over everything served from a version, checked before
the version is loaded (``cache.load_calibrator``).

The digest covers the canonical parameter JSON (which holds the method, its options and input
kind, and the number of classes) and the class and tensor names served with it:
``sha256:<digest>`` of the canonical JSON of ``[params_json, class_names, tensor_names]`` (the
32 bytes in unpadded URL-safe base64: 43 characters, so either form fits the 64-character
column), or, when
``CALIBRATION_INTEGRITY_KEY`` is set, ``hmac-sha256:<digest>`` keyed with it (RFC 2104), so that
someone who can write to the database but does not hold the key cannot forge or alter a
calibrator. With a key set, unkeyed digests are refused: ``calibration-service sign-versions``
signs the versions stored before the key was set. Digests are compared in constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import orjson

SHA256 = "sha256:"
HMAC = "hmac-sha256:"


def _message(params_json: str, class_names: list | None, tensor_names: dict | None) -> bytes:
    return orjson.dumps([params_json, class_names, tensor_names], option=orjson.OPT_SORT_KEYS)


def digest(params_json: str, class_names: list | None, tensor_names: dict | None, key: bytes | None) -> str:
    """The digest to store with a version."""
    message = _message(params_json, class_names, tensor_names)
    if key:
        return HMAC + _text(hmac.new(key, message, hashlib.sha256).digest())
    return SHA256 + _text(hashlib.sha256(message).digest())


def _text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def verify(stored: str, params_json: str, class_names: list | None, tensor_names: dict | None,
           key: bytes | None) -> str | None:
    """``None`` when ``stored`` is the right digest, else why it is refused."""
    if key and not stored.startswith(HMAC):
        return "it is not signed with CALIBRATION_INTEGRITY_KEY (run `calibration-service sign-versions`)"
    if stored.startswith(HMAC) and not key:
        return "it is signed with an integrity key and CALIBRATION_INTEGRITY_KEY is not set"
    expected = digest(params_json, class_names, tensor_names, key)
    return None if hmac.compare_digest(expected, stored) else "its parameters or names do not match their digest"
