"""The opening every route that takes a body shares, as one FastAPI dependency: the
body read, checked and validated into the route's wire model, the model ready, the
request's id and context, and the fields it sent that change nothing named in one
warning line."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Generic, TypeVar

from fastapi import Request
from pydantic import BaseModel

from mlxcel.http.fleet_opening import MODEL_KEY, open_in_fleet
from mlxcel.http.ignored_fields import warn_ignored_fields
from mlxcel.http.json_body import read_model
from mlxcel.http.request_context import request_context
from mlxcel.turn.context import RequestContext
from mlxcel.turn.model_host import ModelHost

Model = TypeVar("Model", bound=BaseModel)


@dataclass
class Opened(Generic[Model]):
    host: ModelHost
    data: dict  # the body as sent (checked at the edge)
    body: Model  # validated
    context: RequestContext
    model_id: str = ""  # the model the request addressed (its host's, with one model)

    @property
    def id(self) -> str:
        return self.context.request_id


def opening(
    model: type[Model],
    id_prefix: str,
    honored: Collection[str] | None = None,
    ignored: Collection[str] = (),
    notes: Callable[[Model], list[str]] = lambda _body: [],
    api: str | None = None,
    vocabulary_only: bool = False,
) -> Callable[[Request], Opened[Model]]:
    """The dependency for a route taking `model`: ids are `id_prefix` + 32 hex digits;
    with `honored`, every other field of the body (and each of `ignored`) is named in
    one warning line, with the route's `notes` about the body. With many models
    (--config) the body's `model` picks the model, loaded if needed, and its profile's
    defaults fill what the body leaves out, named by `api` (chat, completions,
    anthropic, responses, native). `vocabulary_only`: the route needs only a vocabulary,
    so a server with no generating model (--embedding, --reranking) serves it with its
    model's (the route's vocabulary_of)."""

    async def open_request(request: Request) -> Opened[Model]:
        if request.app.state.fleet is not None:
            host, data, body = await open_in_fleet(request, model, api)
            model_id = request.scope["state"][MODEL_KEY]
        else:
            host: ModelHost = request.app.state.host
            data, body = await read_model(request, model)
            model_id = host.model_id
        if host is not None and not (vocabulary_only and host.absent):  # None: a dry run of a model not loaded
            host.require_ready()
        context = request_context(request, f"{id_prefix}{uuid.uuid4().hex}")
        if honored is not None:
            warn_ignored_fields(data, honored, context.request_id, ignored, notes(body))
        return Opened(host, data, body, context, model_id)

    return open_request
