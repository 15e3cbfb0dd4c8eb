"""What happens to a llama-server flag mlxcel does not implement.

A flag that only tunes how llama.cpp runs (threads, placement, memory layout, polling,
logging) is accepted and named in one warning line. A flag that would change what is
served or computed (another model source, adapters, media, embeddings, a different
numeric setup, extra routes) is refused at start, in one line naming it: serving
without it would silently answer something else than the user asked for.
"""

from __future__ import annotations

REFUSED: dict[str, str] = {}


def _refuse(reason: str, *flags: str) -> None:
    for flag in flags:
        REFUSED[flag] = reason


_refuse("downloads or selects models another way (use -m with a path or a catalog name; `mlxcel pull`)",
        "-mu", "--model-url", "-dr", "--docker-repo", "-hf", "-hfr", "--hf-repo", "-hff", "--hf-file",
        "-hft", "--hf-token", "-hfd", "-hfrd", "--hf-repo-draft", "--spec-draft-hf",
        "--fim-qwen-1.5b-default", "--fim-qwen-3b-default", "--fim-qwen-7b-default", "--fim-qwen-7b-spec",
        "--fim-qwen-14b-spec", "--fim-qwen-30b-default", "--gpt-oss-20b-default", "--gpt-oss-120b-default",
        "--embd-gemma-default", "--vision-gemma-4b-default", "--vision-gemma-12b-default", "--spec-default")
_refuse("downloads a multimodal projector (give --mmproj a path)", "-mmu", "--mmproj-url")
_refuse("changes how video is cut into frames (mlxcel samples frames with --video-max-frames and the part's fps)",
        "--video-ffmpeg-dir", "--video-timestamp-interval")
_refuse("runs the tools in a container or over ssh (not implemented: mlxcel's tools run on the server's machine)",
        "--tools-runtime")


# the refused flags' environment variables, refused alike (HF_TOKEN, -hft's, is left alone:
# other tools read it, and it downloads nothing by itself)
REFUSED_ENV: dict[str, str] = {
    "LLAMA_ARG_MODEL_URL": "--model-url", "LLAMA_ARG_DOCKER_REPO": "--docker-repo", "LLAMA_ARG_HF_REPO": "--hf-repo",
    "LLAMA_ARG_HF_FILE": "--hf-file", "LLAMA_ARG_SPEC_DRAFT_HF_REPO": "--spec-draft-hf",
    "LLAMA_ARG_MMPROJ_URL": "--mmproj-url", "LLAMA_ARG_VIDEO_FFMPEG_DIR": "--video-ffmpeg-dir",
    "LLAMA_ARG_VIDEO_TIMESTAMP_INTERVAL": "--video-timestamp-interval", "LLAMA_ARG_TOOLS_RUNTIME": "--tools-runtime",
}


def refusal(flag: str) -> str:
    return (f"{flag}: this llama-server flag {REFUSED[flag]}; mlxcel refuses it rather than serve something "
            "else than asked")


# flags of the spec's MLX edition for models llama.cpp cannot run: refused at start in one line,
# from the command line or from their environment variable
UNSERVABLE: dict[str, str] = {
    "--image-model": "image generation needs a diffusion checkpoint, which llama.cpp (mlxcel's engine) cannot run; "
                     "the image routes answer 501",
}
UNSERVABLE_ENV: dict[str, str] = {"MLXCEL_IMAGE_MODEL": "--image-model"}
