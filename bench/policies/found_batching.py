# Found by `crucible search --target batching --budget 40 --seed 0` on the shipped workload (run
# ae164e7cd6, candidate #17, SLO attainment 0.939 against oracle SRPT 0.927 and FCFS 0.655); written by
# `crucible runs best`.
"""Parent #12 + guard: if r.free_blocks > p.t_2 then - p.w_3 * log1p(r.deadline)."""

PARAMS = {
    "t_1": (0.1, 1000.0, "log", 473.13822078705664),
    "w_1": (0.01, 100.0, "log", 40.07369758482048),
    "w_2": (0.01, 100.0, "log", 0.01360459790900832),
    "t_2": (0.001, 10.0, "log", 6.726626983426058),
    "w_3": (0.001, 10.0, "log", 0.0035386473581104027),
}


def priority(r, p):
    if r.computed > p.t_1:
        return p.w_2 * r.preemptions - p.w_1
    if r.free_blocks > p.t_2:
        return -r.prompt - p.w_3 * log1p(r.deadline)
    return -r.prompt
