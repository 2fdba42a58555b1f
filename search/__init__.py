"""The search loop: proposers, program database, store, CLI and CI job."""
