"""The serving target: a fleet of batching instances over prefix caches, behind a router."""
