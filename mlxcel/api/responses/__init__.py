"""The OpenAI Responses API: wire models, input items, stores, background jobs, compaction, typed events, routes."""
