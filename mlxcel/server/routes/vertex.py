"""The routes of Vertex AI's container contract (mlxcel/http/vertex_predict.py), added
only with AIP_MODE=PREDICTION: the predict route, and a second health path."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from mlxcel.config import VertexSettings
from mlxcel.http.envelope import HttpEnvelope
from mlxcel.http.json_body import read_raw_body
from mlxcel.http.vertex_predict import predict
from mlxcel.server.routes.info import health


def add_vertex_routes(app: FastAPI, settings: VertexSettings, api_prefix: str) -> None:
    async def predict_route(request: Request) -> JSONResponse:
        client = (request.client.host, request.client.port) if request.client else None
        body = await read_raw_body(request, None)  # --max-body-bytes, as every route's body (413)
        original = HttpEnvelope("POST", request.url.path, b"", list(request.headers.raw), body, client)
        # each instance goes through the whole app again (keys, limits, a model's lease)
        status, answer = await predict(request.app, original, api_prefix, settings.predict_route)
        return JSONResponse(answer, status_code=status)

    app.add_api_route(settings.predict_route, predict_route, methods=["POST"], include_in_schema=False)
    if settings.health_route:
        app.add_api_route(settings.health_route, health, methods=["GET"], include_in_schema=False)
