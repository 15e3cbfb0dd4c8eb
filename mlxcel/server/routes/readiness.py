"""GET /health?ready=1: a coarse verdict for load balancers (mlxcel.fleet.readiness):
200 `ready: true`, or 503 with one word and Retry-After: `pressure`, `queue`,
`busy`, or `loading` while no model can answer yet."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

from mlxcel.engine.drain import retry_after_s
from mlxcel.engine.snapshot import EngineSnapshot
from mlxcel.fleet.readiness import readiness as verdict


def _engines(request: Request) -> list[EngineSnapshot] | None:
    """The resident engines' snapshots; None while the first models still load."""
    fleet = request.app.state.fleet
    if fleet is None:
        host = request.app.state.host
        if host is None or host.absent or host.sleeping:  # asleep: the next request wakes it
            return []
        return [host.engine.snapshot] if host.ready else None
    residents = fleet.resident_list()
    ready = [r.host.engine.snapshot for r in residents if r.ready and r.host.engine is not None]
    if not ready and any(not r.ready for r in residents):
        return None
    return ready


def readiness(request: Request) -> JSONResponse:
    snapshots = _engines(request)
    band = request.app.state.monitor.governor.band.value
    if snapshots is None:
        return JSONResponse({"status": "loading model", "ready": False, "reason": "loading", "band": band},
                            status_code=503, headers={"Retry-After": "2"})
    waiting = sum(s.queue_depth for s in snapshots)
    answer = verdict(band, waiting, [s.n_idle for s in snapshots], retry_after_s(snapshots))
    if answer.ready:
        return JSONResponse({"status": "healthy", **answer.to_dict(), "band": band})
    return JSONResponse({"status": "unavailable", **answer.to_dict(), "band": band}, status_code=503,
                        headers={"Retry-After": str(answer.retry_after)})
