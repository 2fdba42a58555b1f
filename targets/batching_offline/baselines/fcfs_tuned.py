"""vLLM's arrival order with its two knobs tuned to the batch: the token budget (max_num_batched_tokens)
and the batch cap (max_num_seqs), what a user tries first; fitted on the run's train share."""

PARAMS = {
    "token_budget": (512.0, 32768.0, "log", 16384.0),
    "max_seqs": (16.0, 2048.0, "log", 1024.0),
}


def priority(r, p):
    return -r.order
