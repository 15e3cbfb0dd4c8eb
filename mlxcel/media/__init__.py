"""Media a content part points at (data URIs, http(s) URLs, local files), fetched
under the spec's access policy and decoded to pixels, samples or frames."""

from mlxcel.media.audio import sniff as sniff_audio
from mlxcel.media.loader import MediaLoader, check_combination
from mlxcel.media.types import DecodedAudio, DecodedImage, DecodedVideo, MediaError, MediaRef

__all__ = ["DecodedAudio", "DecodedImage", "DecodedVideo", "MediaError", "MediaLoader", "MediaRef",
           "check_combination", "sniff_audio"]
