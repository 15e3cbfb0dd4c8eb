"""mlxcel: an LLM inference server for local GGUF models."""

__version__ = "0.1.0"
