"""Tiny multimodal projector GGUFs (mmproj) for tests: random weights, real mtmd types.

Both files load and run in the vendored llama.cpp mtmd (clip.cpp) in milliseconds and
project into the text model's embedding width (576 for SmolLM2-135M). The weights come
from a fixed seed, so every run writes the same bytes; the embeddings mean nothing.

Vision: projector type ``mlp`` (LLaVA-1.5): a ViT over fixed-size square images
(mtmd resizes every image to ``image_size`` x ``image_size``, padding to keep the
aspect ratio), then ``mm.0`` -> GELU -> ``mm.2``. No text is added around the image.
    image tokens = (image_size // patch_size) ** 2, whatever the input size.

Audio: projector type ``ultravox``: a Whisper encoder (16 kHz, 80 mel bins; the audio
is padded with 30 s of silence and cut into 3000-frame windows, the last partial
window dropped), frames stacked by ``stack_factor``, then an RMS-norm SwiGLU MLP.
No text is added around the audio.
    windows = ((n_samples + 480000) // 160 + 1) // 3000   (1 for any clip under ~30 s)
    audio tokens = windows * (1500 // stack_factor)

Non-causal vision: projector type ``gemma3``: a SigLIP ViT (post-LN, no pre-LN), the
patch grid average-pooled by ``merge`` x ``merge``, RMS-norm, one projection. mtmd
resizes every image to ``image_size`` square like ``mlp``, and adds the text
``<start_of_image>`` before and ``<end_of_image>`` after each image (plain text for
SmolLM2: several tokens each). Its rows decode NON-causally (mtmd_decode_use_non_causal).
    image tokens = (image_size // patch_size // merge) ** 2, whatever the input size.

The others decode causally; all use ordinary (not M-RoPE) positions.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np
from gguf import GGUFWriter

SEED = 20
AUDIO_SAMPLE_RATE = 16000
AUDIO_FRAMES_PER_WINDOW = 3000  # mel frames per Whisper window (30 s)
_AUDIO_POSITIONS = 1500  # encoder positions per window (conv stride 2)


def image_tokens(image_size: int = 64, patch_size: int = 8) -> int:
    """Tokens one image takes with ``write_vision_projector``'s geometry."""
    return (image_size // patch_size) ** 2


def gemma3_image_tokens(image_size: int = 96, patch_size: int = 8, merge: int = 2) -> int:
    """Tokens one image takes with ``write_gemma3_projector``'s geometry (text around it not counted)."""
    return (image_size // patch_size // merge) ** 2


def audio_tokens(n_samples: int, stack_factor: int = 60) -> int:
    """Tokens one 16 kHz clip of ``n_samples`` takes with ``write_audio_projector``."""
    n_frames = (n_samples + 30 * AUDIO_SAMPLE_RATE) // 160 + 1
    return (n_frames // AUDIO_FRAMES_PER_WINDOW) * (_AUDIO_POSITIONS // stack_factor)


def png_bytes(width: int, height: int) -> bytes:
    """A deterministic RGB PNG (a colour gradient), stdlib only, for image_url data URIs."""
    rows = b"".join(b"\x00" + bytes((x * 7 + y * 3 + c * 50) % 256 for x in range(width) for c in range(3))
                    for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


class _Weights:
    def __init__(self, writer: GGUFWriter, seed: int):
        self.writer = writer
        self.rng = np.random.default_rng(seed)

    def rand(self, name: str, *shape: int, scale: float = 0.05) -> None:
        """Add a tensor with numpy shape ``shape`` (ggml ne order reversed)."""
        data = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.writer.add_tensor(name, data)

    def ones(self, name: str, *shape: int) -> None:
        self.writer.add_tensor(name, np.ones(shape, dtype=np.float32))

    def norm(self, name: str, n: int) -> None:
        self.ones(f"{name}.weight", n)
        self.writer.add_tensor(f"{name}.bias", np.zeros(n, dtype=np.float32))

    def linear(self, name: str, n_in: int, n_out: int, bias: bool = True) -> None:
        self.rand(f"{name}.weight", n_out, n_in)
        if bias:
            self.rand(f"{name}.bias", n_out)

    def encoder_blocks(self, prefix: str, n_layer: int, n_embd: int, n_ff: int) -> None:
        for il in range(n_layer):
            blk = f"{prefix}.blk.{il}"
            self.norm(f"{blk}.ln1", n_embd)
            self.linear(f"{blk}.attn_q", n_embd, n_embd)
            self.linear(f"{blk}.attn_k", n_embd, n_embd, bias=prefix != "a")
            self.linear(f"{blk}.attn_v", n_embd, n_embd)
            self.linear(f"{blk}.attn_out", n_embd, n_embd)
            self.norm(f"{blk}.ln2", n_embd)
            self.linear(f"{blk}.ffn_up", n_embd, n_ff)
            self.linear(f"{blk}.ffn_down", n_ff, n_embd)


def _projector_writer(path, name: str, projector_type: str, kind: str, n_embd: int, n_head: int, n_layer: int,
                      n_embd_text: int) -> GGUFWriter:
    """A clip GGUF with the header every test projector shares: all f32, one encoder
    (``kind`` vision or audio) with a feed-forward twice its width."""
    w = GGUFWriter(str(path), "clip")
    w.add_name(name)
    w.add_file_type(0)  # all f32
    w.add_bool(f"clip.has_{kind}_encoder", True)
    w.add_string("clip.projector_type", projector_type)
    _encoder_hparams(w, kind, n_embd, n_head, 2 * n_embd, n_layer, n_embd_text)
    return w


def _image_hparams(w: GGUFWriter, image_size: int, patch_size: int) -> None:
    """The image geometry and normalisation every test vision projector shares."""
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch_size)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    w.add_bool("clip.use_gelu", True)


def _encoder_hparams(w: GGUFWriter, kind: str, n_embd: int, n_head: int, n_ff: int,
                     n_layer: int, n_embd_text: int) -> None:
    w.add_uint32(f"clip.{kind}.embedding_length", n_embd)
    w.add_uint32(f"clip.{kind}.attention.head_count", n_head)
    w.add_uint32(f"clip.{kind}.feed_forward_length", n_ff)
    w.add_uint32(f"clip.{kind}.block_count", n_layer)
    w.add_uint32(f"clip.{kind}.projection_dim", n_embd_text)
    w.add_float32(f"clip.{kind}.attention.layer_norm_epsilon", 1e-5)


def _finish(w: GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_vision_projector(path, n_embd_text: int = 576, image_size: int = 64,
                           patch_size: int = 8, n_embd: int = 32, n_head: int = 4,
                           n_layer: int = 2, seed: int = SEED) -> int:
    """Write an ``mlp`` (LLaVA) vision mmproj to ``path``; return tokens per image.

    The LLaVA graph runs ``n_layer - 1`` blocks (it takes the second-to-last layer).
    """
    w = _projector_writer(path, "mlxcel-test-vision", "mlp", "vision", n_embd, n_head, n_layer, n_embd_text)
    _image_hparams(w, image_size, patch_size)

    t = _Weights(w, seed)
    n_patches = image_tokens(image_size, patch_size)
    t.rand("v.patch_embd.weight", n_embd, 3, patch_size, patch_size)
    t.rand("v.patch_embd.bias", n_embd)
    t.rand("v.position_embd.weight", n_patches, n_embd)
    t.norm("v.pre_ln", n_embd)
    t.encoder_blocks("v", n_layer, n_embd, 2 * n_embd)
    hidden = 2 * n_embd
    t.linear("mm.0", n_embd, hidden)
    t.linear("mm.2", hidden, n_embd_text)
    _finish(w)
    return n_patches


def write_audio_projector(path, n_embd_text: int = 576, stack_factor: int = 60,
                          n_mel: int = 80, n_embd: int = 16, n_head: int = 2,
                          n_layer: int = 1, seed: int = SEED + 1) -> int:
    """Write an ``ultravox`` audio mmproj to ``path``; return tokens per 30 s window.

    ``stack_factor`` must divide 1500 (the encoder's positions per window).
    """
    if _AUDIO_POSITIONS % stack_factor:
        raise ValueError("stack_factor must divide 1500")
    w = _projector_writer(path, "mlxcel-test-audio", "ultravox", "audio", n_embd, n_head, n_layer, n_embd_text)
    w.add_uint32("clip.audio.num_mel_bins", n_mel)
    w.add_uint32("clip.audio.projector.stack_factor", stack_factor)

    t = _Weights(w, seed)
    # conv1d kernels: ggml ne [K, IC, OC]; biases [1, OC] to broadcast over time
    t.rand("a.conv1d.1.weight", n_embd, n_mel, 3)
    t.rand("a.conv1d.1.bias", n_embd, 1)
    t.rand("a.conv1d.2.weight", n_embd, n_embd, 3)
    t.rand("a.conv1d.2.bias", n_embd, 1)
    t.rand("a.position_embd.weight", _AUDIO_POSITIONS, n_embd)
    t.encoder_blocks("a", n_layer, n_embd, 2 * n_embd)
    t.norm("a.post_ln", n_embd)
    stacked, hidden = n_embd * stack_factor, 2 * n_embd
    t.ones("mm.a.norm_pre.weight", stacked)
    t.rand("mm.a.mlp.1.weight", 2 * hidden, stacked)  # SwiGLU: halves the width
    t.ones("mm.a.norm_mid.weight", hidden)
    t.rand("mm.a.mlp.2.weight", n_embd_text, hidden)
    _finish(w)
    return _AUDIO_POSITIONS // stack_factor


def write_gemma3_projector(path, n_embd_text: int = 576, image_size: int = 96, patch_size: int = 8,
                           merge: int = 2, n_embd: int = 32, n_head: int = 4, n_layer: int = 2,
                           seed: int = SEED + 2) -> int:
    """Write a ``gemma3`` (non-causal) vision mmproj to ``path``; return tokens per image."""
    if (image_size // patch_size) % merge:
        raise ValueError("merge must divide the patch grid's side")
    w = _projector_writer(path, "mlxcel-test-gemma3", "gemma3", "vision", n_embd, n_head, n_layer, n_embd_text)
    _image_hparams(w, image_size, patch_size)
    w.add_uint32("clip.vision.projector.scale_factor", merge)

    t = _Weights(w, seed)
    n_patches = (image_size // patch_size) ** 2
    t.rand("v.patch_embd.weight", n_embd, 3, patch_size, patch_size)
    t.rand("v.patch_embd.bias", n_embd)
    t.rand("v.position_embd.weight", n_patches, n_embd)
    t.encoder_blocks("v", n_layer, n_embd, 2 * n_embd)
    t.norm("v.post_ln", n_embd)
    t.ones("mm.soft_emb_norm.weight", n_embd)
    # ggml ne [n_embd_text, n_embd]: the graph transposes it before the matmul
    t.rand("mm.input_projection.weight", n_embd, n_embd_text, scale=0.5)
    _finish(w)
    return gemma3_image_tokens(image_size, patch_size, merge)
