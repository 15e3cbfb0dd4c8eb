"""Reading a multipart/form-data upload within the 25 MiB limit: the Content-Length is
checked first, then the bytes as they arrive (a body without a length, or one that
lies, stops at the limit), so nothing beyond it is ever buffered."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import Request
from starlette.datastructures import FormData
from starlette.formparsers import MultiPartException, MultiPartParser

from mlxcel.http.errors import APIError, invalid_request, not_supported

FILE_LIMIT = 25 * 1024 * 1024  # OpenAI's limit on the audio file
FORM_SLACK = 64 * 1024  # the form's other fields and its boundaries
MAX_FIELD_BYTES = 64 * 1024  # a prompt, a model name


def too_large(what: str) -> APIError:
    return APIError(413, f"{what} is larger than the 25 MiB limit on audio uploads", "invalid_request_error",
                    "request_too_large")


async def _bounded(request: Request, limit: int) -> AsyncIterator[bytes]:
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            raise too_large("the request body")
        yield chunk


async def read_form(request: Request) -> FormData:
    """The form's fields and files; 413 past the limit, 400 for anything but a
    well-formed multipart/form-data body."""
    kind = request.headers.get("content-type", "")
    if not kind.lower().startswith("multipart/form-data"):
        raise invalid_request("the body must be multipart/form-data with the audio in a `file` field "
                              f"(Content-Type was {kind or 'missing'!r})")
    limit = FILE_LIMIT + FORM_SLACK
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise too_large(f"the request body ({int(length)} bytes)")
    try:
        import multipart  # noqa: F401 - python-multipart, which Starlette's parser needs
    except ImportError:
        raise not_supported("audio uploads need the audio extra: pip install 'mlxcel[audio]'") from None
    parser = MultiPartParser(request.headers, _bounded(request, limit), max_files=4, max_fields=32,
                             max_part_size=MAX_FIELD_BYTES)
    try:
        return await parser.parse()
    except MultiPartException as exc:
        raise invalid_request(f"malformed multipart/form-data body: {exc.message}") from None
