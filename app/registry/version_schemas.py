"""The version list's response model: the intact versions of a page, and its damaged ones
(``app.registry.version_records``) beside them."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .schemas import VersionOut


class DamagedVersion(BaseModel):
    version: int
    detail: str = Field(description="Why it is refused: a stored column that cannot be read, or that does not "
                                    "match the version's digest")


class VersionList(BaseModel):
    name: str
    versions: list[VersionOut] = Field(description="The intact versions of this page")
    damaged: list[DamagedVersion] = Field([], description="Versions of this page whose stored record is damaged "
                                                          "(getting or serving one is a 500 problem naming it)")
    next_page_token: str | None = None
