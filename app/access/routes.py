"""API key management (/v1/keys, `admin` scope): create, list, revoke. The first admin key
comes from the CLI: ``calibration-service keys create --name ops --scope admin``."""

from __future__ import annotations

from fastapi import APIRouter, Path, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

from ..http.auth import ADMIN
from ..http.openapi import problems
from ..platform.errors import NotFound, refused_as
from ..wire.codecs import dump_json
from ..wire.decoding import JSON_TYPE
from . import keys
from .schemas import KeyCreated, KeyList, KeyRequest

router = APIRouter(prefix="/v1/keys", tags=["access"], dependencies=[ADMIN])
KEY_ID = Path(description="The key's id (the 12 hex digits after `cal_`)", pattern="^[0-9a-f]{12}$")


@router.post("", status_code=201, summary="Create an API key (shown once)", response_model=KeyCreated,
             responses=problems(400, 422))
async def create(request: Request, body: KeyRequest):
    with refused_as():
        info, key = await run_in_threadpool(keys.create_key, request.app.state.db, body.name, body.scopes)
    return Response(dump_json({**info.as_dict(), "key": key}), status_code=201, media_type=JSON_TYPE)


@router.get("", summary="List API keys (never their secrets)", response_model=KeyList)
async def list_all(request: Request):
    listed = await run_in_threadpool(keys.list_keys, request.app.state.db)
    return Response(dump_json({"keys": [info.as_dict() for info in listed]}), media_type=JSON_TYPE)


@router.delete("/{key_id}", status_code=204, summary="Revoke an API key", responses=problems(404, 422))
async def revoke(request: Request, key_id: str = KEY_ID):
    if not await run_in_threadpool(keys.revoke_key, request.app.state.db, key_id):
        raise NotFound(f"no active API key {key_id!r}")
    return Response(status_code=204)
