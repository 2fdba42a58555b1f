"""xDiT as deployed: every request takes the whole cluster with its fastest plan there, in arrival order."""


def score(o, p):
    if o.gpus < o.cluster_gpus:
        return -1.0
    return 1.0e9 * o.fastest_on_group + 1.0e9 - o.arrival
