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
        "--embd-gemma-default", "--vision-gemma-4b-default", "--vision-gemma-12b-default")
_refuse("downloads a multimodal projector (give --mmproj a path)", "-mmu", "--mmproj-url")
_refuse("changes how video is cut into frames (mlxcel samples frames with --video-max-frames and the part's fps)",
        "--video-ffmpeg-dir", "--video-timestamp-interval")
_refuse("runs the tools in a container or over ssh (not implemented: mlxcel's tools run on the server's machine)",
        "--tools-runtime")


# tuning flags named in the warning line with what mlxcel does instead
TUNING_NOTES: dict[str, str] = {
    "--spec-default": "llama-server's n-gram drafting (ngram-mod); mlxcel's prompt lookup drafts instead: the output "
                      "is the same",
}


# the refused flags' environment variables, refused alike (HF_TOKEN, -hft's, is left alone:
# other tools read it, and it downloads nothing by itself)
REFUSED_ENV: dict[str, str] = {
    "LLAMA_ARG_MODEL_URL": "--model-url", "LLAMA_ARG_DOCKER_REPO": "--docker-repo", "LLAMA_ARG_HF_REPO": "--hf-repo",
    "LLAMA_ARG_HF_FILE": "--hf-file", "LLAMA_ARG_SPEC_DRAFT_HF_REPO": "--spec-draft-hf",
    "LLAMA_ARG_MMPROJ_URL": "--mmproj-url", "LLAMA_ARG_VIDEO_FFMPEG_DIR": "--video-ffmpeg-dir",
    "LLAMA_ARG_VIDEO_TIMESTAMP_INTERVAL": "--video-timestamp-interval", "LLAMA_ARG_TOOLS_RUNTIME": "--tools-runtime",
}


# the environment variables of llama-server's tuning flags: named in the warning line beside
# the flags, when set
TUNING_ENV: dict[str, str] = {
    "LLAMA_ARG_THREADS_HTTP": "--threads-http", "LLAMA_ARG_CONT_BATCHING": "--cont-batching",
    "LLAMA_ARG_CACHE_IDLE_SLOTS": "--cache-idle-slots", "LLAMA_ARG_CTX_CHECKPOINTS": "--ctx-checkpoints",
    "LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT": "-cms", "LLAMA_ARG_PERF": "--perf", "LLAMA_ARG_KV_OFFLOAD": "-kvo",
    "LLAMA_ARG_NO_HOST": "--no-host", "LLAMA_ARG_DEFRAG_THOLD": "--defrag-thold", "LLAMA_ARG_RPC": "--rpc",
    "LLAMA_ARG_LAZY_MODE": "--lazy-mode", "LLAMA_ARG_NUMA": "--numa", "LLAMA_ARG_DEVICE": "--device",
    "LLAMA_ARG_OVERRIDE_TENSOR": "--override-tensor", "LLAMA_ARG_CPU_MOE": "--cpu-moe",
    "LLAMA_ARG_N_CPU_MOE": "--n-cpu-moe", "LLAMA_ARG_N_CPU_FFN": "--n-cpu-ffn", "LLAMA_ARG_FIT": "--fit",
    "LLAMA_ARG_FIT_TARGET": "--fit-target", "LLAMA_ARG_FIT_CTX": "--fit-ctx",
    "LLAMA_ARG_BACKEND_SAMPLING": "--backend-sampling", "LLAMA_ARG_N_GPU_LAYERS_DRAFT": "--spec-draft-ngl",
    "LLAMA_ARG_SPEC_DRAFT_CPU_MOE": "--spec-draft-cpu-moe", "LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE": "--spec-draft-n-cpu-moe",
    "LLAMA_ARG_SPEC_DRAFT_P_SPLIT": "--spec-draft-p-split", "LLAMA_ARG_SPEC_DRAFT_P_MIN": "--spec-draft-p-min",
    "LLAMA_ARG_SPEC_DRAFT_BACKEND_SAMPLING": "--spec-draft-backend-sampling",
    "LLAMA_ARG_SPEC_SYNTH_LEN": "--spec-synth-len", "LLAMA_ARG_SPEC_SYNTH_RATES": "--spec-synth-rates",
    "LLAMA_ARG_MMPROJ_AUTO": "--mmproj-auto", "LLAMA_ARG_MMPROJ_OFFLOAD": "--mmproj-offload",
    "MTMD_BACKEND_DEVICE": "--mmproj-device", "LLAMA_ARG_MTMD_BATCH_MAX_TOKENS": "--mtmd-batch-max-tokens",
}

# the variables of flags llama-server removed: it refuses them too
REMOVED_ENV: dict[str, str] = {"LLAMA_ARG_DRAFT_MAX": "--draft-max", "LLAMA_ARG_DRAFT_MIN": "--draft-min"}


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
