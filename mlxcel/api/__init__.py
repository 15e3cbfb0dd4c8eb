"""The APIs mlxcel speaks, one sub-package each, all of one shape: wire models
(`*wire.py`), translation into the turn layer's terms and back, and routes."""
