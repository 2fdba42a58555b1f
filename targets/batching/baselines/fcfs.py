"""vLLM's default: first come, first served; the newest running request is preempted first."""


def priority(r, p):
    return r.waiting
