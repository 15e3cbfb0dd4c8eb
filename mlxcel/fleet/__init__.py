"""Many models in one server (`mlxcel serve --config FILE`): the configuration file,
addressing (id, alias, id@profile), profiles and intents, residency (lazy loads, LRU
unloads under a budget, pins, keeps), capacity and the memory governor."""
