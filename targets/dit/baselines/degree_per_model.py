"""A fixed degree per model, in arrival order: 8 GPUs for video models, 4 for image models of more than
3B parameters, 1 for the others (as many as the cluster has, if fewer); the fastest plan on them."""


def score(o, p):
    want = 8.0 if o.video > 0.5 else (4.0 if o.params_b > 3.0 else 1.0)
    if o.gpus != min(want, o.cluster_gpus):
        return -1.0
    return 1.0e9 * o.fastest_on_group + 1.0e9 - o.arrival
