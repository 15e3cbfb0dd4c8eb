"""llama-server's resumable-stream routes (mlxcel/http/stream_sessions.py): GET
/v1/stream?conv_id=ID&from=N reads a conversation's stream again from byte N, live
until it ends; POST /v1/streams/lookup tells which of the conversations a client names
have a stream (it never lists others); DELETE /v1/stream?conv_id=ID stops one."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from mlxcel.http.errors import APIError, invalid_request
from mlxcel.http.json_body import read_json_object
from mlxcel.http.sse import WatchedStreamResponse
from mlxcel.http.stream_sessions import OffsetLost, StreamSession, StreamSessions

router = APIRouter()
MAX_LOOKUP_IDS = 1024


def _sessions(request: Request) -> StreamSessions:
    return request.app.state.stream_sessions


def _conversation(request: Request) -> str:
    conversation = request.query_params.get("conv_id", "")
    if not conversation:
        raise invalid_request("Missing conversation id in path")
    return conversation


@router.get("/v1/stream")
async def replay(request: Request) -> WatchedStreamResponse:
    session = _sessions(request).get(_conversation(request))
    if session is None:
        raise APIError(404, "Stream not found or expired", "not_found_error")
    text = request.query_params.get("from", "")
    if text and not (text.isascii() and text.isdigit() and len(text) <= 18):
        raise invalid_request("Invalid 'from' offset")
    offset = int(text or 0)
    if offset < session.dropped:
        raise invalid_request("Stream offset lost, please restart")
    return WatchedStreamResponse(_read(session, offset), b"text/event-stream; charset=utf-8")


async def _read(session: StreamSession, offset: int):
    try:
        async for chunk in session.read_from(offset):
            yield chunk
    except OffsetLost:
        return  # the reader fell a whole buffer behind: its stream ends, and it restarts


@router.post("/v1/streams/lookup")
async def lookup(request: Request) -> list[dict]:
    body = await read_json_object(request, max_bytes=256 * 1024)
    wanted = body.get("conversation_ids")
    ids = [v for v in wanted if isinstance(v, str) and v] if isinstance(wanted, list) else []
    if len(ids) > MAX_LOOKUP_IDS:
        raise invalid_request(f"at most {MAX_LOOKUP_IDS} conversation_ids a lookup")
    return [{"conversation_id": s.conversation_id, "is_done": s.done, "total_bytes": s.total_bytes,
             "started_at": s.started_at, "completed_at": s.completed_at}
            for s in _sessions(request).lookup(ids)]


@router.delete("/v1/stream")
async def stop(request: Request) -> Response:
    """The user's Stop: the generation is cancelled and its stream forgotten (204 even
    when there was none)."""
    _sessions(request).cancel(_conversation(request))
    return Response(status_code=204)
