"""What the embedding and rerank hosts share: one engine's context settings from the
command line, and a job run on that engine from the event loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from mlxcel.config import ServerConfig
from mlxcel.engine.embedding_engine import EmbeddingEngine, EmbeddingJob
from mlxcel.engine.embedding_runtime import EmbeddingRuntimeConfig
from mlxcel.engine.engine_control import EngineStoppedError, QueueFullError
from mlxcel.engine.faults import EngineFailedError
from mlxcel.engine.llama_runtime import FLASH_ATTN_TYPES
from mlxcel.engine.request import Priority
from mlxcel.turn.errors import EngineUnavailable, GenerationFailed, ServerBusy


def embedding_runtime_config(config: ServerConfig, model_path: Path, pooling: str) -> EmbeddingRuntimeConfig:
    """An encoder's context as the command line asks for it (threads, micro-batch,
    attention kernel, offload, mapping) with `pooling`."""
    return EmbeddingRuntimeConfig(
        model_path=model_path, pooling=pooling, n_ubatch=config.ubatch_size, n_threads=config.threads,
        n_threads_batch=config.threads_batch, flash_attn=FLASH_ATTN_TYPES[config.flash_attn],
        n_gpu_layers=config.n_gpu_layers, load_mode=config.model_load_mode, repack=config.repack,
        check_tensors=config.check_tensors)


def require_running(engine: EmbeddingEngine, what: str) -> EmbeddingEngine:
    """`engine`, or EngineUnavailable where its thread failed or stopped."""
    if not engine.alive:
        raise EngineUnavailable(engine.failure or f"the {what} engine stopped")
    return engine


async def run_embedding_job(engine: EmbeddingEngine, inputs: list[list[int]], priority: Priority) -> list[np.ndarray]:
    """The engine's rows for `inputs`, from its next batches. Past the queue cap a
    ServerBusy (503), a stopped or failed engine EngineUnavailable, a failed forward
    pass GenerationFailed; cancelled (the client left), the inputs not yet decoded are
    dropped."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future = loop.create_future()

    def done(rows: list[np.ndarray] | None, error: str | None) -> None:
        def settle() -> None:
            if not answer.done():
                answer.set_result((rows, error))
        try:
            loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the loop is closed: nobody is waiting
            pass

    job = EmbeddingJob(inputs, done, priority)
    try:
        engine.submit(job)
    except QueueFullError:
        raise ServerBusy("All slots are busy. Please try again later.") from None
    except (EngineFailedError, EngineStoppedError) as exc:
        raise EngineUnavailable(str(exc)) from None
    try:
        rows, error = await answer
    except asyncio.CancelledError:
        engine.cancel(job)
        raise
    if error is not None or rows is None:
        raise GenerationFailed(error or "the model's forward pass failed")
    return rows
