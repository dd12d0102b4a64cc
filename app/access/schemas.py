"""Request and response models of API keys (``/v1/keys``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..registry.schemas import Strict
from .keys import NAME_PATTERN as KEY_NAME_PATTERN


class KeyRequest(Strict):
    model_config = ConfigDict(extra="forbid",
                              json_schema_extra={"examples": [{"name": "inference-service", "scopes": ["read"]}]})

    name: str = Field(pattern=KEY_NAME_PATTERN.pattern, description="Who the key is for")
    scopes: list[Literal["read", "write", "admin"]] = Field(
        min_length=1, max_length=3, description="admin includes write, which includes read")


class KeyOut(BaseModel):
    id: str
    name: str
    scopes: list[str]
    created_at: str
    revoked_at: str | None


class KeyCreated(KeyOut):
    key: str = Field(description="The secret key; shown only in this response")


class KeyList(BaseModel):
    keys: list[KeyOut]
