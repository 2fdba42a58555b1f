"""A hand-written probe, not a found program: prompts over 30,000 tokens all go to the last of eight
instances, the rest to the others, each by Mooncake Conductor's TTFT estimate; every instance serves the
least prefill left first. It shows what serving capacity (90 % of requests within the SLOs) rewards:
leaving the longest prompts (7 % of the trace) to queue on one instance."""


def route(s, p):
    if s.prompt_tokens > 30000:
        if s.instance < 7:
            return -s.ttft_estimate_s - 1000
        return -s.ttft_estimate_s
    if s.instance >= 7:
        return -s.ttft_estimate_s - 1000
    return -s.ttft_estimate_s


def priority(r, p):
    return -r.pending


def evict(b, p):
    return b.last_access
