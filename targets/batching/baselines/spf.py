"""Shortest prompt first: a short prompt reaches its first token soonest; arrival order breaks ties."""


def priority(r, p):
    return -r.prompt
