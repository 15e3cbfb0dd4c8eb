"""Routes of the spec that need a runtime llama.cpp does not have: image generation
(`--image-model`, diffusion checkpoints) and structured decisions (`/v1/systemone`, a
DiffusionGemma model). The spec answers them 501 naming what they need when the server
runs without it; here that is always so (the flags are refused at start). And the web
UI's MCP proxy (`/cors-proxy`), which llama-server answers 403 "this feature is
disabled" unless started with --webui-mcp-proxy (refused here: mlxcel serves no web UI)."""

from __future__ import annotations

from fastapi import APIRouter

from mlxcel.http.errors import APIError
from mlxcel.turn.errors import NotSupported

router = APIRouter()
PATHS = frozenset({"/v1/images/generations", "/images/generations", "/v1/images/edits", "/images/edits",
                   "/v1/systemone", "/systemone", "/cors-proxy"})  # answered without a model: none wakes one

IMAGES = ("image generation is not available: it needs --image-model, a diffusion checkpoint that llama.cpp "
          "(mlxcel's engine) cannot run")
DECISIONS = "structured decisions are not available: they need a DiffusionGemma model, which llama.cpp cannot run"


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


@router.get("/cors-proxy")
@router.post("/cors-proxy")
async def cors_proxy():
    raise APIError(403, "this feature is disabled", "feature_disabled")
