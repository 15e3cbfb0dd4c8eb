"""GET /health?ready=1: a coarse verdict for load balancers. 200 `ready: true`, or 503
with one word and Retry-After: `pressure` (the memory governor is orange or red),
`queue` (requests wait for a slot), `busy` (every engine is at its decode width),
`loading` (no model can answer yet)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

from mlxcel.engine.drain import drain_eta_s
from mlxcel.engine.snapshot import EngineSnapshot


def _engines(request: Request) -> list[EngineSnapshot] | None:
    fleet = request.app.state.fleet
    if fleet is None:
        host = request.app.state.host
        if host is None or host.absent:
            return []
        return [host.engine.snapshot] if host.ready else None
    residents = fleet.resident_list()
    ready = [r.host.engine.snapshot for r in residents if r.ready and r.host.engine is not None]
    if not ready and any(not r.ready for r in residents):
        return None  # the first models are still loading
    return ready


def readiness(request: Request) -> JSONResponse:
    snapshots = _engines(request)
    governor = getattr(request.app.state, "governor", None)
    band = governor.band() if governor is not None else "green"
    reason = None
    if snapshots is None:
        reason = "loading"
    elif band in ("orange", "red"):
        reason = "pressure"
    elif any(s.queue_depth for s in snapshots):
        reason = "queue"
    elif snapshots and all(s.n_idle == 0 for s in snapshots):
        reason = "busy"
    if reason is None:
        return JSONResponse({"status": "healthy", "ready": True, "band": band})
    eta = drain_eta_s(snapshots or [])
    return JSONResponse({"status": "unavailable", "ready": False, "reason": reason, "band": band},
                        status_code=503, headers={"Retry-After": str(eta)})
