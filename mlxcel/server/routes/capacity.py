"""003's capacity routes: GET /v1/metrics (the JSON snapshot; `?format=prometheus`
for its gauges) and GET /v1/capacity/plan?width=W&depth=D[&model=ID].

Where the snapshot lives, in both modes: /v1/metrics is always the JSON snapshot and
its Prometheus flattening; /metrics stays llama-server's Prometheus route (001's
names, behind --metrics with one model), and answers the JSON snapshot when asked
for it (`?format=json`, or `Accept: application/json`); with many models, /metrics
without --metrics serves the snapshot's gauges."""

from __future__ import annotations

from fastapi import APIRouter, Request

from mlxcel.fleet.capacity import plan
from mlxcel.http.errors import invalid_request
from mlxcel.observability.metrics_view import snapshot_response
from mlxcel.turn.errors import ServerBusy

router = APIRouter()


@router.get("/v1/metrics")
async def metrics_snapshot(request: Request):
    return await snapshot_response(request, request.query_params.get("format"))


def _positive(request: Request, name: str) -> int:
    text = request.query_params.get(name)
    if text is None or not text.isdigit() or not 1 <= int(text) <= 1 << 24:
        raise invalid_request(f"`{name}` must be an integer from 1 to {1 << 24}")
    return int(text)


@router.get("/v1/capacity/plan")
async def capacity_plan(request: Request):
    width, depth = _positive(request, "width"), _positive(request, "depth")
    monitor = request.app.state.monitor
    await monitor.learn_served()
    fleet = request.app.state.fleet
    name = request.query_params.get("model")
    if fleet is not None:
        model_id = fleet.entry(name).id if name else fleet.default_id
        resident = fleet.resident(model_id) if model_id else None
        host = resident.host if resident is not None and resident.ready else None
    else:
        host = request.app.state.host
        model_id = host.model_id
        if not host.ready:
            raise ServerBusy("Loading model")
    band = monitor.governor.band.value
    if host is None:  # not resident: nothing tabulated, no slot free until it loads
        answer = plan(None, width, depth, 0, 0, band, decode_batch=0)
        return {"model": model_id, "resident": False, **answer.to_dict()}
    snapshot_now = host.engine.snapshot
    answer = plan(monitor.table(host), width, depth, snapshot_now.n_idle, snapshot_now.queue_depth, band,
                  decode_batch=len(snapshot_now.slots))
    return {"model": model_id, "resident": True, **answer.to_dict()}
