"""A small real inference engine (PyTorch): random-weight transformer, paged KV cache, prefix reuse."""
