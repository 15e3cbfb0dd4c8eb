"""The /v1/metrics view of what the monitor watches (mlxcel.observability.metrics_snapshot builds the JSON)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from mlxcel.engine.host_memory import read_host_memory
from mlxcel.fleet.monitor import ServerMonitor
from mlxcel.http.errors import invalid_request
from mlxcel.observability.metrics_snapshot import ModelView, SnapshotView, build_snapshot, render_prometheus

PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


def snapshot_view(monitor: ServerMonitor) -> SnapshotView:
    models = []
    for served in monitor.served():
        host = served.host
        cache = host.host_cache
        models.append(ModelView(
            id=served.id, engine=host.engine.snapshot, queue_cap=host.config.queue_cap, profile=served.profile,
            pinned=served.pinned, kept=served.kept, weights_bytes=host.runtime.model_size(),
            kv_bytes_per_token=monitor.kv_bytes_per_token(host),
            cache_bytes=cache.stats()["bytes"] if cache is not None else 0, capacity=monitor.table(host)))
    return SnapshotView(models=models, queue=monitor.queue, governor=monitor.governor, read_memory=read_host_memory)


async def snapshot_response(request: Request, form: str | None) -> Response:
    """The snapshot as JSON, or (`form` prometheus) as its gauges."""
    if form not in (None, "", "json", "prometheus"):
        raise invalid_request("`format` must be json or prometheus")
    monitor = request.app.state.monitor
    await monitor.learn_served()
    data = build_snapshot(snapshot_view(monitor))
    if form == "prometheus":
        return Response(render_prometheus(data), media_type=PROMETHEUS)
    return JSONResponse(data)
