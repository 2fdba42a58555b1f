"""The DiT target: parallel plans for Diffusion Transformer requests, and serving them on a GPU cluster."""
