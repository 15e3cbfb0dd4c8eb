"""Images to RGB8 pixels with Pillow: JPEG, PNG, WebP and GIF (its first frame). The
dimensions are read from the header and checked before any pixel is decoded, so a
decompression bomb costs nothing."""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image, UnidentifiedImageError

from mlxcel.media.types import DecodedImage, MediaError, image_of

FORMATS = ("JPEG", "PNG", "WEBP", "GIF")
_SIXTEEN_BIT_GREY = ("I;16", "I;16B", "I;16L", "I")  # how Pillow opens a 16-bit greyscale PNG


def check_pixels(width: int, height: int, max_pixels: int, where: str) -> None:
    if width <= 0 or height <= 0:
        raise MediaError(f"{where}: the image has no pixels ({width}x{height})", "invalid_media")
    if width * height > max_pixels:
        raise MediaError(f"{where}: the image is {width}x{height} pixels, more than the {max_pixels}-pixel limit",
                         "media_too_large", 413)


def decode_image(data: bytes, max_pixels: int, where: str, reserve=None) -> DecodedImage:
    """`reserve(n_bytes, where)`: called with the decoded size once the header gives it,
    before decoding (a decoded-media budget; it raises to refuse)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=FORMATS) as image:
                check_pixels(image.width, image.height, max_pixels, where)
                if reserve is not None:
                    reserve(image.width * image.height * 3, where)
                image.seek(0)
                rgb = _to_rgb8(image)
    except UnidentifiedImageError:
        raise MediaError(f"{where}: unsupported image format (JPEG, PNG, WebP or GIF expected)",
                         "unsupported_media_type", 415) from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise MediaError(f"{where}: the image is too large to decode safely", "media_too_large", 413) from None
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        raise MediaError(f"{where}: the image could not be decoded ({exc})", "invalid_media") from None
    return image_of(rgb.width, rgb.height, rgb.tobytes())


def _to_rgb8(image: Image.Image) -> Image.Image:
    """The image as 8-bit RGB. A 16-bit greyscale PNG keeps its top 8 bits, as llama.cpp's
    stb_image does; Pillow's own conversion clips it to 255, so mid grey came out white."""
    if image.mode in _SIXTEEN_BIT_GREY:
        grey = (np.asarray(image, dtype=np.uint32) >> 8).clip(0, 255).astype(np.uint8)
        return Image.fromarray(grey, "L").convert("RGB")
    return image.convert("RGB")
