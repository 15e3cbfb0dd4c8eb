"""State that outlives a request and may outlive the process: bounded key-value
stores of JSON values (the Responses API's responses, conversations and background
jobs), on SQLite (the default: one file under $MLXCEL_HOME), Redis (shared by
replicas) or memory (unit tests of pure logic). See store.py for the interface and
url.py for choosing a backend."""
