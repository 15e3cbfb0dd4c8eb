"""llama-server's native routes: /completion, /tokenize, /detokenize."""
