"""vLLM's offline LLM class: first come, first served in submission order; the latest admitted is preempted
first. Its budget and batch cap are vLLM's defaults for the GPU (the target's defaults)."""


def priority(r, p):
    return -r.order
