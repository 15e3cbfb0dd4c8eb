"""Audio runtimes beside the chat model: speech to text (faster-whisper) and text to
speech (piper), each a worker thread with a bounded queue, hosted like the embedding
worker (loaded on a background thread at start)."""
