"""The one HTTP endpoint in front of the engine replicas: a Ray Serve deployment
placed on the endpoint's node that serves HTTP itself (uvicorn in its own event
loop), so a token crosses one Ray hop (replica -> gateway), not two (Ray's HTTP
proxy is not started).

Every request is read whole (bounded by --max-body-bytes), asked its prompt's block
digests by one replica when it has a prompt, and sent to the replica the router
picks, its answer streamed back as the replica sends it: status, headers, body, SSE
events included. A client that leaves before the answer starts (a whole answer starts
once generated) cancels the replica's call, freeing its slot. A replica that dies
before answering costs a retry on another; one that dies mid-stream ends the stream
with an error event. A failure of the gateway itself is a 500 in the API's error
format. /health, /metrics and /v1/metrics answer for every replica: ready while one
is; samples labelled by replica. A Responses cancel goes to every replica, since only the one running a
response can stop it. A change of the server's state (POST /lora-adapters, POST
/v1/cache/reset) goes to every replica, and succeeds once every one applied it.
A chat completion's control and a resumable stream (GET and DELETE /v1/stream) reach the
replica running them (conversations.py); a stream lookup merges every replica's.
llama-server's slot routes number every replica's slots in one sequence (slot_ids.py):
GET /slots lists them all, POST /slots/{id} acts on the replica holding that slot, and
a request's `id_slot` sends it to that replica."""

import asyncio
import dataclasses
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve
from ray.serve import context as serve_context
from starlette.requests import ClientDisconnect

from mlxcel.cluster import conversations
from mlxcel.cluster import router as routing
from mlxcel.cluster.metrics_merge import merge_exposition
from mlxcel.cluster.prompt_keys import ROUTED
from mlxcel.cluster.slot_ids import locate, merged_rows
from mlxcel.config import TlsFiles
from mlxcel.http.connection_guard import DEFAULT_TIMEOUT_S, guarded_protocol
from mlxcel.http.envelope import HttpEnvelope, ResponseStart
from mlxcel.http.errors import (
    CLIENT_CLOSED_REQUEST,
    APIError,
    anthropic_error_body,
    is_anthropic_path,
    is_responses_path,
)
from mlxcel.http.request_context import run_while_connected
from mlxcel.server.listeners import open_listeners

log = logging.getLogger("mlxcel.cluster")
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]
ATTEMPTS = 3
DIGEST_TIMEOUT_S = 10.0
FAN_OUT_TIMEOUT_S = 10.0
HEALTH_PATHS = {"/health", "/v1/health"}
METRICS_PATHS = {"/metrics", "/v1/metrics"}
LISTEN_TIMEOUT_S = 30.0
CANCEL_PATH = re.compile(r"/(?:v1/)?responses/[^/]+/cancel")
EVERY_REPLICA_POSTS = {"/lora-adapters", "/v1/cache/reset"}  # each replica holds its own copy of what they change
SLOT_ACTION_PATH = re.compile(r"/slots/(\d{1,9})")


def _own_call_id() -> None:
    """Give the next handle call its own internal request id. Ray Serve copies the
    incoming request's id into every call made while handling it, and its router
    matches a routing decision to a request by that id: calls made at once for one
    incoming request (the fan-out, or the digests and the request itself) would
    share one and wait on each other. The context variable is per task, so this
    changes only the calling task's calls."""
    current = serve_context._get_serve_request_context()  # noqa: SLF001 - no public way to set it
    serve_context._serve_request_context.set(  # noqa: SLF001
        dataclasses.replace(current, _internal_request_id=uuid.uuid4().hex))


def _error(path: str, status: int, message: str, kind: str = "server_error") -> JSONResponse:
    if is_anthropic_path(path):
        return JSONResponse(anthropic_error_body("api_error" if status >= 500 else "invalid_request_error", message),
                            status_code=status)
    return JSONResponse(APIError(status, message, kind).body(), status_code=status)


def _stream_error_event(path: str, message: str) -> bytes:
    """The event that ends a stream whose replica failed, in its API's shape."""
    if is_anthropic_path(path):
        body = anthropic_error_body("api_error", message)
        return f"event: error\ndata: {json.dumps(body)}\n\n".encode()
    if is_responses_path(path):
        body = {"type": "error", "code": "server_error", "message": message, "param": None}
        return f"event: error\ndata: {json.dumps(body)}\n\n".encode()
    return f"data: {json.dumps({'error': {'code': 502, 'message': message, 'type': 'server_error'}})}\n\n".encode()


@serve.deployment
class Gateway:
    async def __init__(self, engine, max_body_bytes: int, api_prefix: str, hosts: list[str], port: int,
                       timeout_s: float = DEFAULT_TIMEOUT_S, tls: TlsFiles | None = None,
                       slots_per_replica: int = 1) -> None:
        self.engine = engine
        self.timeout_s = timeout_s
        self.slots_per_replica = slots_per_replica
        self.max_body_bytes = max_body_bytes
        self.api_prefix = api_prefix
        await self.engine.options(method_name="record_routing_stats").remote()  # the router starts with it
        app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
        app.add_api_route("/{path:path}", self.forward, methods=METHODS, include_in_schema=False)
        self._server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_config=None, log_level="warning",
                                                    access_log=False, http=guarded_protocol(timeout_s),
                                                    ssl_keyfile=tls.key_file if tls else None,
                                                    ssl_certfile=tls.cert_file if tls else None))
        # every --host address, bound here so that one in use fails the deploy
        self._serving = asyncio.create_task(self._server.serve(sockets=open_listeners(hosts, port)))
        where = ", ".join(hosts) + f" port {port}"
        started = time.monotonic()
        while not self._server.started and not self._serving.done():
            if time.monotonic() - started > LISTEN_TIMEOUT_S:
                raise RuntimeError(f"the gateway did not listen on {where} in time")
            await asyncio.sleep(0.02)
        if self._serving.done():
            raise RuntimeError(f"the gateway could not listen on {where}: {self._serving.exception()}")

    def check_health(self) -> None:
        if self._serving.done():
            raise RuntimeError("the gateway's HTTP server stopped")

    def __del__(self) -> None:
        server = getattr(self, "_server", None)
        if server is not None:
            server.should_exit = True

    def _router(self) -> "routing.PrefixRouter | None":
        return next(iter(routing.LIVE), None)

    def replica_ids(self) -> list[str]:
        router = self._router()
        return sorted(router.replicas()) if router is not None else []

    def _slot_counts(self) -> dict[str, int]:
        """Each running replica's slots (every one runs -np)."""
        return {replica: self.slots_per_replica for replica in self.replica_ids()}

    async def forward(self, request: Request) -> Response:
        """The answer to `request`; a failure of the gateway itself is a 500 in the API's
        error format."""
        path = request.url.path
        try:
            body = await self._body(request)
            if isinstance(body, Response):
                return body
            envelope = HttpEnvelope(request.method, path, request.url.query.encode(), list(request.headers.raw),
                                    body, (request.client.host, request.client.port) if request.client else None)
            return await self._dispatch(request, envelope)
        except ClientDisconnect:  # nobody is there to read an answer
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        except Exception as exc:  # noqa: BLE001 - answered in the format the client reads
            request_id = f"req_{uuid.uuid4().hex[:16]}"
            log.exception("the gateway failed on %s %s [%s]", request.method, path, request_id)
            response = _error(path, 500, f"internal server error ({type(exc).__name__}); request id {request_id}")
            response.headers["x-request-id"] = request_id
            return response

    async def _dispatch(self, request: Request, envelope: HttpEnvelope) -> Response:
        bare = envelope.path.removeprefix(self.api_prefix)
        if request.method == "GET" and bare in HEALTH_PATHS:
            return await self._health(envelope)
        if request.method == "GET" and bare in METRICS_PATHS:
            return await self._metrics(envelope)
        if request.method == "POST" and CANCEL_PATH.fullmatch(bare):
            return await self._cancel(envelope)
        if request.method == "POST" and bare in EVERY_REPLICA_POSTS:
            return await self._everywhere(envelope)
        if request.method == "GET" and bare == "/slots":
            return await self._slots(envelope)
        if request.method == "POST" and bare == "/v1/chat/completions/control":
            return await self._control(envelope)
        if bare == "/v1/streams/lookup" and request.method == "POST":
            return await self._lookup(envelope)
        if bare == "/v1/stream" and request.method in ("GET", "DELETE"):
            return await self._stream_session(envelope, request.query_params.get("conv_id", ""))
        if request.method == "POST" and (numbered := SLOT_ACTION_PATH.fullmatch(bare)):
            return await self._slot_action(envelope, int(numbered.group(1)))
        # a request one replica answers: a client that leaves before the answer starts cancels
        # the call, so a whole (not streamed) answer's slot is freed as on one server
        if request.method == "POST" and bare in ROUTED:
            envelope, pinned = self._pin_to_slot(envelope)
            digests = await self._digests(envelope) if pinned is None else None
            return await run_while_connected(request, self._forward(envelope, digests, pinned))
        return await run_while_connected(request, self._forward(envelope, None))

    def _pin_to_slot(self, envelope: HttpEnvelope) -> tuple[HttpEnvelope, str | None]:
        """A request naming a slot (`id_slot`, numbered as GET /slots numbers them) goes to
        the replica holding that slot, as that replica's own slot number; one past the
        last slot goes on unchanged, for a replica to refuse."""
        if b'"id_slot"' not in envelope.body:
            return envelope, None
        try:
            data = json.loads(envelope.body)
        except (ValueError, RecursionError):  # nested too deep for Python's parser too
            return envelope, None  # a replica answers the malformed body
        slot_id = data.get("id_slot") if isinstance(data, dict) else None
        if type(slot_id) is not int:
            return envelope, None
        place = locate(slot_id, self._slot_counts())
        if place is None:
            return envelope, None
        body = json.dumps({**data, "id_slot": place.slot}).encode()
        return dataclasses.replace(envelope, body=body), place.replica

    async def _body(self, request: Request) -> bytes | Response:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            return _error(request.url.path, 413, f"the request body exceeds {self.max_body_bytes} bytes",
                          "invalid_request_error")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body_bytes:
                return _error(request.url.path, 413, f"the request body exceeds {self.max_body_bytes} bytes",
                              "invalid_request_error")
            chunks.append(chunk)
        return b"".join(chunks)

    async def _digests(self, envelope: HttpEnvelope) -> list[int] | None:
        router = self._router()
        if router is not None and router.mode != "prefix":
            return None
        try:
            _own_call_id()
            call = self.engine.options(method_name="prompt_digests").remote(envelope)
            return await asyncio.wait_for(call, DIGEST_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - routing falls back to load
            log.warning("no prompt digests for %s: %s", envelope.path, exc)
            return None

    async def _forward(self, envelope: HttpEnvelope, digests: list[int] | None,
                       pinned: str | None = None) -> Response:
        failure = None
        pin = {"replica": pinned} if pinned is not None else {}
        for _ in range(ATTEMPTS):
            _own_call_id()
            stream = self.engine.options(method_name="serve_http", stream=True).remote(envelope,
                                                                                      prompt_digests=digests, **pin)
            try:
                start = await stream.__anext__()
            except StopAsyncIteration:
                return _error(envelope.path, 502, "the replica closed the request without answering")
            except asyncio.CancelledError:
                stream.cancel()
                raise
            except Exception as exc:  # noqa: BLE001 - a replica that died before answering: try another
                failure = exc
                log.warning("replica failed before answering %s, retrying: %s", envelope.path, exc)
                await asyncio.sleep(0.2)
                continue
            if not isinstance(start, ResponseStart):
                return _error(envelope.path, 502, "the replica answered out of order")
            response = StreamingResponse(self._rest(stream, envelope.path, start), status_code=start.status)
            # the replica's own headers, Content-Length included: its body is passed on byte for
            # byte (HEAD's too), and a body cut short by a replica's death then reads as cut
            response.raw_headers = list(start.headers)
            return response
        return _error(envelope.path, 503, f"no replica could answer: {failure}", "unavailable_error")

    @staticmethod
    async def _rest(stream, path: str, start: ResponseStart) -> AsyncIterator[bytes]:
        sse = any(k.lower() == b"content-type" and v.startswith(b"text/event-stream") for k, v in start.headers)
        try:
            async for part in stream:
                yield part
        except asyncio.CancelledError:
            stream.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - the replica died mid-stream
            log.warning("replica failed mid-stream on %s: %s", path, exc)
            if sse:
                yield _stream_error_event(path, f"the replica serving this stream failed: {type(exc).__name__}")
        finally:
            stream.cancel()

    async def _fan_out(self, envelope: HttpEnvelope) -> dict[str, tuple[int, bytes] | BaseException]:
        """Every replica's answer to `envelope`, or what its call raised."""
        ids = self.replica_ids()

        async def one(replica: str):
            _own_call_id()
            call = self.engine.options(method_name="call").remote(envelope, replica=replica)
            return await asyncio.wait_for(call, FAN_OUT_TIMEOUT_S)

        answers = await asyncio.gather(*(one(r) for r in ids), return_exceptions=True)
        for replica, answer in zip(ids, answers):
            if isinstance(answer, BaseException):
                log.warning("replica %s did not answer %s %s: %s", replica, envelope.method, envelope.path,
                            type(answer).__name__)
        return dict(zip(ids, answers))

    async def _answers(self, envelope: HttpEnvelope) -> dict[str, tuple[int, bytes]]:
        """The replicas that answered, and their answers."""
        return {r: a for r, a in (await self._fan_out(envelope)).items() if not isinstance(a, BaseException)}

    async def _health(self, envelope: HttpEnvelope) -> Response:
        answers = await self._answers(envelope)
        router = self._router()
        known = router.replicas() if router is not None else {}
        replicas = {r: {**known.get(r, {}), "status": status} for r, (status, _) in answers.items()}
        ok = next((body for status, body in answers.values() if status == 200), None)
        if ok is not None:
            payload = json.loads(ok)
            return JSONResponse({**payload, "replicas": replicas} if isinstance(payload, dict) else payload)
        first = next(iter(answers.values()), None)
        payload = json.loads(first[1]) if first is not None else {"status": "no replica is running"}
        return JSONResponse({**payload, "replicas": replicas} if isinstance(payload, dict) else payload,
                            status_code=503)

    async def _cancel(self, envelope: HttpEnvelope) -> Response:
        """Only the replica running a response can stop it (a stream it serves; a background
        job, which the others can also ask through the shared store): every replica is
        asked, and the one that stopped it answers; a 404 only when none knows it."""
        results = list((await self._fan_out(envelope)).values())
        answers = [a for a in results if not isinstance(a, BaseException)]
        # the replica that cancelled it, else one that knows it (a finished response, a bad key)
        chosen = min(answers, key=lambda a: (a[0] != 200, a[0] == 404), default=None)
        if chosen is None or (chosen[0] == 404 and len(answers) < len(results)):
            return _error(envelope.path, 503, "not every replica answered the cancel; retry it", "unavailable_error")
        return Response(chosen[1], status_code=chosen[0], media_type="application/json")

    async def _everywhere(self, envelope: HttpEnvelope) -> Response:
        """A change every replica makes: its answer when all answered 200 (the freed
        counts of a cache reset summed, each replica's answer under `replicas`); the
        refusal when one refused (they all read the same body); 503 when one did not
        answer, since the replicas may now differ and the change is safe to repeat."""
        results = await self._fan_out(envelope)
        if not results or any(isinstance(a, BaseException) for a in results.values()):
            return _error(envelope.path, 503, "not every replica answered the change; repeat it",
                          "unavailable_error")
        refused = next(((s, b) for s, b in results.values() if s != 200), None)
        if refused is not None:
            return Response(refused[1], status_code=refused[0], media_type="application/json")
        answers = {r: json.loads(b) for r, (_, b) in results.items()}
        first = next(iter(answers.values()))
        if not isinstance(first, dict) or "freed_entries" not in first:
            return JSONResponse(first)
        merged = {**first, "replicas": answers}
        for key in ("freed_entries", "freed_bytes"):
            merged[key] = sum(a.get(key, 0) for a in answers.values())
        return JSONResponse(merged)

    async def _slots(self, envelope: HttpEnvelope) -> Response:
        """Every replica's slots, numbered one after another; a refusal (slots turned
        off, a bad model) as a replica answered it; 503 when one did not answer, since
        the numbers after its slots would be wrong."""
        results = await self._fan_out(envelope)
        if not results or any(isinstance(a, BaseException) for a in results.values()):
            return _error(envelope.path, 503, "not every replica listed its slots; retry", "unavailable_error")
        refused = next(((s, b) for s, b in results.values() if s != 200), None)
        if refused is not None:
            return Response(refused[1], status_code=refused[0], media_type="application/json")
        return JSONResponse(merged_rows({r: json.loads(b) for r, (_, b) in results.items()}))

    async def _slot_action(self, envelope: HttpEnvelope, slot_id: int) -> Response:
        """A slot save, restore or erase, sent to the replica holding slot `slot_id` as
        its own slot number, the answer's `id_slot` numbered back. Replicas share no
        slot files unless --slot-save-path is one folder they all see (one node)."""
        place = locate(slot_id, self._slot_counts())
        if place is None:  # a number past the last slot: a replica refuses it in the spec's format
            return await self._forward(envelope, None)
        local = dataclasses.replace(envelope, path=envelope.path[: envelope.path.rindex("/") + 1] + str(place.slot))
        _own_call_id()
        try:
            call = self.engine.options(method_name="call").remote(local, replica=place.replica)
            status, body = await asyncio.wait_for(call, self.timeout_s)  # a busy slot's action waits for its request
        except Exception as exc:  # noqa: BLE001 - the replica went away: nothing was done, or it is unknown
            log.warning("replica %s did not answer %s: %s", place.replica, envelope.path, type(exc).__name__)
            return _error(envelope.path, 503, f"the replica holding slot {slot_id} did not answer; retry",
                          "unavailable_error")
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        if status != 200 or not isinstance(answer, dict):
            return Response(body, status_code=status, media_type="application/json")
        return JSONResponse({**answer, "id_slot": slot_id, "replica": place.replica, "replica_slot": place.slot})

    async def _control(self, envelope: HttpEnvelope) -> Response:
        """A completion runs on one replica: every replica is asked, the one running it answers."""
        chosen = conversations.control_answer(await self._fan_out(envelope))
        if chosen is None:
            return _error(envelope.path, 503, "not every replica answered the control; retry it", "unavailable_error")
        return Response(chosen[1], status_code=chosen[0], media_type="application/json")

    async def _lookup(self, envelope: HttpEnvelope) -> Response:
        answers = await self._fan_out(envelope)
        merged = conversations.merged_lookup(answers)
        if merged is None:
            refused = next((a for a in answers.values() if not isinstance(a, BaseException) and a[0] != 200), None)
            if refused is not None:
                return Response(refused[1], status_code=refused[0], media_type="application/json")
            return _error(envelope.path, 503, "not every replica answered the lookup; retry it", "unavailable_error")
        return JSONResponse(merged)

    async def _stream_session(self, envelope: HttpEnvelope, conversation_id: str) -> Response:
        """GET /v1/stream and DELETE /v1/stream, on the replica holding the conversation's
        stream (found by a lookup on every replica); without one, any replica answers
        (a 404, a 204, or the refusal of a bad query)."""
        pinned = None
        if conversation_id:
            lookup = envelope.with_json("POST", self.api_prefix + "/v1/streams/lookup",
                                        {"conversation_ids": [conversation_id]})
            pinned = conversations.holder(await self._fan_out(lookup), conversation_id)
        return await self._forward(envelope, None, pinned)

    async def _metrics(self, envelope: HttpEnvelope) -> Response:
        answers = await self._answers(envelope)
        if not answers:
            return _error(envelope.path, 503, "no replica answered", "unavailable_error")
        failed = next(((s, b) for s, b in answers.values() if s != 200), None)
        if failed is not None:
            return Response(failed[1], status_code=failed[0], media_type="application/json")
        bodies = {r: b for r, (_, b) in answers.items()}
        try:
            snapshots = {r: json.loads(b) for r, b in bodies.items()}
        except ValueError:
            text = merge_exposition({r: b.decode() for r, b in bodies.items()})
            return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")
        router = self._router()
        return JSONResponse({"object": "metrics.replicas", "replica_count": len(snapshots),
                             "routing": dict(router.routed) if router is not None else {},
                             "replicas": [{"replica": r, **s} for r, s in snapshots.items()]})
