"""The CI autotuning job: `crucible ci` re-checks champions, gates regressions, searches, reports."""
