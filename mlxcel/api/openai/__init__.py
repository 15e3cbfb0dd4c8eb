"""OpenAI chat completions and (legacy) completions."""
