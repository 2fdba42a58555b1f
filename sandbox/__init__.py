"""Where candidate code runs: isolated backends and the worker that runs inside them."""
