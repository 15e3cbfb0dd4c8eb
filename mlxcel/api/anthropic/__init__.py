"""The Anthropic Messages API: /v1/messages and count_tokens."""
