"""The layer between every API and the engine: the served model (ModelHost), one
complete GenerationRequest built in one place, the chat turn every chat-shaped API
shares, structured output and logprob formatting, and typed errors. Nothing here
knows HTTP."""
