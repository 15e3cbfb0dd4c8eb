"""Where a media reference points: inline bytes (a base64 data URI or bare base64), a
remote http(s) URL, or a local path (file:// URL or bare absolute path)."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from urllib.parse import unquote

from mlxcel.media.types import MediaError

# bare base64 may start with "/" like a path: every JPEG does ("/9j/"), and an MP3 without
# an ID3 tag ("//s", "//u"); decoded, their first byte is 0xFF, which no path's is
_BASE64 = re.compile(rb"[A-Za-z0-9+/=_-]*")
_DATA_MEDIA_TYPES = ("image/", "audio/", "video/", "application/octet-stream")


@dataclass(frozen=True)
class Inline:
    base64_text: str  # decoded lazily, after its size is checked


@dataclass(frozen=True)
class Remote:
    url: str


@dataclass(frozen=True)
class Local:
    path: str  # absolute, or relative to the roots (llama-server's file://NAME)


Source = Inline | Remote | Local


def classify(url: str, where: str) -> Source:
    """The source `url` names; a MediaError for an unsupported scheme or a malformed URI."""
    text = url.strip()
    lowered = text[:16].lower()
    if lowered.startswith("data:"):
        return _data_uri(text, where)
    if lowered.startswith(("http://", "https://")):
        return Remote(text)
    if lowered.startswith("file://"):
        return Local(_file_url_path(text[7:], where))
    if text.startswith("/") and not _looks_like_base64_media(text):
        return Local(text)
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", text):
        raise MediaError(f"{where}: unsupported URL scheme {text.split(':', 1)[0]!r} (use a data URI, "
                         "http(s)://, file:// or an absolute path)", "unsupported_media_url")
    if not text or not _BASE64.fullmatch(text.encode("ascii", "replace")):
        raise MediaError(f"{where}: not a data URI, URL, absolute path or base64 payload", "invalid_media_url")
    return Inline(text)


def _data_uri(text: str, where: str) -> Inline:
    header, comma, payload = text.partition(",")
    if not comma:
        raise MediaError(f"{where}: malformed data URI (no comma)", "invalid_media_url")
    params = header[5:].lower().split(";")
    if params[-1] != "base64":
        raise MediaError(f"{where}: a data URI must be base64-encoded (';base64,')", "invalid_media_url")
    media_type = params[0]
    if media_type and not media_type.startswith(_DATA_MEDIA_TYPES):
        raise MediaError(f"{where}: data URI type {media_type!r} is not image/, audio/ or video/",
                         "unsupported_media_type", 415)
    return Inline(payload)


def _file_url_path(rest: str, where: str) -> str:
    if rest.lower().startswith("localhost/"):
        rest = rest[len("localhost"):]
    path = unquote(rest)
    if not path or "\x00" in path:
        raise MediaError(f"{where}: malformed file:// URL", "invalid_media_url")
    return path


def _looks_like_base64_media(text: str) -> bool:
    try:
        head = base64.b64decode(text[:16], validate=True)
    except (binascii.Error, ValueError):
        return False
    return head.startswith((b"\xff\xd8\xff", b"\xff\xfb", b"\xff\xf3", b"\xff\xf2", b"\xff\xe3"))


def decode_inline(source: Inline, cap: int, where: str) -> bytes:
    """The payload's bytes; 413 beyond `cap` (checked on the encoded length first)."""
    text = "".join(source.base64_text.split())
    if len(text) // 4 * 3 > cap + 3:
        raise MediaError(f"{where}: inline media is larger than the {cap}-byte limit", "media_too_large", 413)
    text = text.replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError(f"{where}: invalid base64 payload", "invalid_media_url") from None
    if not data:
        raise MediaError(f"{where}: empty media payload", "invalid_media_url")
    if len(data) > cap:
        raise MediaError(f"{where}: inline media is larger than the {cap}-byte limit", "media_too_large", 413)
    return data
