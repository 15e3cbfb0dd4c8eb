"""OpenAI's Audio API: /v1/audio/transcriptions, /v1/audio/translations (and /v1/audio/speech)."""
