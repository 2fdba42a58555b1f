"""A hand-written probe, not a found program: running requests first (no preemption churn), then the
requests that can still meet their deadline before the late ones, each group by least pending work. On
h100-llama3-8b it beats the SRPT oracle's capacity on the shipped head and on two later windows of the
Azure conversation trace (docs/targets/batching.md)."""


def priority(r, p):
    late = 1.0 if r.slack < 0.0 else 0.0
    return 100000000.0 * r.running - 1000000.0 * late - r.pending
