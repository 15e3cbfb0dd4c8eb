"""The HTTP edge every API shares: body reading and checks, the route opening,
error mapping (typed errors to statuses, once), API keys, SSE."""
