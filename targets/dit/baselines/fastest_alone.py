"""Each request runs its fastest plan (exhaustive, as if alone on the cluster), in arrival order; it waits
for that many GPUs."""


def score(o, p):
    if o.gpus != o.fastest_gpus:
        return -1.0
    return 1.0e9 * o.fastest_on_group + 1.0e9 - o.arrival
