"""A chat prompt's media, from the parts' references to the engine's media spans:
fetched and decoded under the media policy (mlxcel.media, off the event loop), then
tokenized and encoded by the projector on its own thread."""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import TYPE_CHECKING

from mlxcel.chat.errors import ChatInputError
from mlxcel.chat.media_parts import MEDIA_MARKER, MediaIntake
from mlxcel.chat.prompt import PreparedChat
from mlxcel.engine.media_span import MediaLayout
from mlxcel.engine.projector import Bitmap, ProjectedPrompt, ProjectorError
from mlxcel.media import DecodedAudio, DecodedImage, DecodedVideo, MediaRef, check_combination, sniff_audio
from mlxcel.turn.errors import InvalidRequest
from mlxcel.turn.prompts import MULTIMODAL_DATA, PROMPT_STRING, split_prompts, tokenize_one, tokenize_prompts

if TYPE_CHECKING:
    from mlxcel.turn.model_host import ModelHost


def _bitmaps(item: DecodedImage | DecodedAudio | DecodedVideo) -> list[Bitmap]:
    if isinstance(item, DecodedAudio):
        return [Bitmap(key=item.digest, samples=item.samples)]
    frames = item.frames if isinstance(item, DecodedVideo) else (item,)
    return [Bitmap(key=frame.digest, width=frame.width, height=frame.height, rgb=frame.rgb) for frame in frames]


def pieces_of(prompt: str, decoded: list) -> list[str | Bitmap]:
    """The prompt cut at its media markers, each marker replaced by its media (a video
    by its frames, in order)."""
    texts = prompt.split(MEDIA_MARKER)
    if len(texts) - 1 != len(decoded):
        raise ChatInputError(f"the prompt holds {len(texts) - 1} media markers for {len(decoded)} media parts "
                             "(media markers in text are not allowed)")
    pieces: list[str | Bitmap] = [texts[0]]
    for item, text in zip(decoded, texts[1:]):
        pieces.extend(_bitmaps(item))
        pieces.append(text)
    return pieces


async def project_media(host: ModelHost, prepared: PreparedChat, encode: bool = True) -> ProjectedPrompt:
    """Fetch and decode the prompt's media, then tokenize (and encode) it all."""
    refs = prepared.media.refs
    check_combination(refs)
    projector = host.projector
    lease = host.media_loader.lease()  # the decoded media count against --media-memory until projected
    try:
        decoded = await host.media_loader.load(refs, projector.audio_sample_rate or 16000, lease)
        pieces = pieces_of(prepared.prompt, decoded)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(projector.executor, projector.project, pieces, prepared.add_special, encode)
    except ProjectorError as exc:
        raise ChatInputError(str(exc), code="invalid_media") from exc
    finally:
        lease.release()


def _sniff_kind(data: str) -> str:
    """A /completion multimodal_data item (bare base64) is audio or an image, as its
    container's magic bytes say (llama.cpp's mtmd helper decides the same way: a RIFF
    file is audio only when it is a WAVE, as WebP is RIFF too)."""
    try:
        head = base64.b64decode(data[:64] + "=" * (-len(data[:64]) % 4), validate=False)
    except (binascii.Error, ValueError):
        return "image"  # the loader reports the bad base64
    return "audio" if sniff_audio(head) is not None else "image"


async def completion_prompts(host: ModelHost, prompt, max_prompts: int) -> tuple[list[list[int]], list[MediaLayout]]:
    """/completion's prompts as token lists, and each one's media: an object prompt
    {"prompt_string", "multimodal_data": [base64, ...]} places its media at the media
    markers (/props' media_marker) of its string."""
    raw = split_prompts(prompt)
    if host.projector is None or not any(isinstance(p, dict) and MULTIMODAL_DATA in p for p in raw):
        tokens = await asyncio.to_thread(tokenize_prompts, host.tokenizer, prompt, max_prompts)
        return tokens, [MediaLayout(())] * len(tokens)
    if not raw or len(raw) > max_prompts:
        raise InvalidRequest(f"prompt: between 1 and {max_prompts} prompts are accepted (--max-prompts)")
    results, layouts = [], []
    for i, one in enumerate(raw):
        if not (isinstance(one, dict) and MULTIMODAL_DATA in one):
            results.append(await asyncio.to_thread(tokenize_one, host.tokenizer, one))
            layouts.append(MediaLayout(()))
            continue
        text, data = one.get(PROMPT_STRING), one[MULTIMODAL_DATA]
        if not isinstance(text, str) or not isinstance(data, list) or not all(isinstance(d, str) for d in data):
            raise InvalidRequest(f"prompt[{i}]: prompt_string must be a string and multimodal_data a list of "
                                 "base64 strings")
        where = f"prompt[{i}].multimodal_data"
        refs = [MediaRef(kind=_sniff_kind(d), url=d, where=f"{where}[{j}]") for j, d in enumerate(data)]
        prepared = PreparedChat(prompt=text, tokens=[], plan=None, parse_reasoning=False, start_in_reasoning=False,
                                markers=None, add_special=True,
                                media=MediaIntake(host.model_id, host.projector.vision, host.projector.audio, refs))
        projected = await project_media(host, prepared)
        results.append(projected.tokens)
        layouts.append(MediaLayout(projected.spans))
    return results, layouts
