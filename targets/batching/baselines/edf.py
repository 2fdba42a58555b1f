"""Earliest deadline first on the SLOs: the request whose next token is due soonest goes first."""


def priority(r, p):
    return -r.deadline
