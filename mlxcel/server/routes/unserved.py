"""Routes of the spec that need a runtime llama.cpp does not have: image generation
(`--image-model`, diffusion checkpoints) and structured decisions (`/v1/systemone`, a
DiffusionGemma model). The spec answers them 501 naming what they need when the server
runs without it; here that is always so (the flags are refused at start). Realtime voice
chat (`/v1/realtime`, a WebSocket the spec mounts for a Nemotron VoiceChat checkpoint)
is refused the same way, its WebSocket handshake answered 501 too. And the web
UI's MCP proxy (`/cors-proxy`), which llama-server answers 403 "this feature is
disabled" unless started with --webui-mcp-proxy (refused here: mlxcel's web UI has no MCP client)."""

from __future__ import annotations

from fastapi import APIRouter, WebSocket
from fastapi.responses import JSONResponse

from mlxcel.http.errors import APIError, as_api_error
from mlxcel.turn.errors import NotSupported

router = APIRouter()
# answered without a model: none of them wakes a sleeping one
PATHS = frozenset({"/v1/images/generations", "/images/generations", "/v1/images/edits", "/images/edits",
                   "/v1/systemone", "/systemone", "/v1/realtime", "/cors-proxy"})

IMAGES = ("image generation is not available: it needs --image-model, a diffusion checkpoint that llama.cpp "
          "(mlxcel's engine) cannot run")
DECISIONS = "structured decisions are not available: they need a DiffusionGemma model, which llama.cpp cannot run"
REALTIME = ("realtime voice chat is not available: it needs a Nemotron VoiceChat checkpoint, which llama.cpp "
            "(mlxcel's engine) cannot run; /v1/audio/transcriptions and /v1/audio/speech serve speech")


@router.post("/v1/images/generations")
@router.post("/images/generations")
@router.post("/v1/images/edits")
@router.post("/images/edits")
async def images():
    raise NotSupported(IMAGES, code="not_implemented")


@router.post("/v1/systemone")
@router.post("/systemone")
async def systemone():
    raise NotSupported(DECISIONS, code="not_implemented")


@router.get("/v1/realtime")
async def realtime():
    raise NotSupported(REALTIME, code="not_implemented")


@router.websocket("/v1/realtime")
async def realtime_socket(websocket: WebSocket) -> None:
    """The handshake is refused with the same 501 (uvicorn's denial-response extension);
    a server without that extension closes the socket before accepting it."""
    refusal = as_api_error(NotSupported(REALTIME, code="not_implemented"))
    try:
        await websocket.send_denial_response(JSONResponse(refusal.body(), status_code=refusal.status))
    except RuntimeError:
        await websocket.close(code=1011, reason="not implemented")


@router.get("/cors-proxy")
@router.post("/cors-proxy")
async def cors_proxy():
    raise APIError(403, "this feature is disabled", "feature_disabled")
